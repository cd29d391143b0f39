"""Inputs and baselines shared by the Gavel policies (pure numpy, no solver).

Notation (spec/gavel.md section 2): ``T[i, j]`` whole-job steps/s of job i
on type j, ``s_i`` scale factor, ``w_i`` priority weight, ``N_j`` GPUs of
type j; rows follow ``state.jobs``, columns ``state.gpu_types``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import ClassVar, TypeVar

import numpy as np
import numpy.typing as npt

from hadar.arrays import BoolArray, FloatArray, IntArray
from hadar.model.state import Allocation, SchedulerState
from hadar.numeric import matvec
from hadar.policies.base import PolicyTraits
from hadar.policies.gavel.center import Centering
from hadar.solve.lp import active_mask, clip_fractions, unique_rows

_S = TypeVar("_S", bound=np.generic)

@dataclass(frozen=True, slots=True)
class Inputs:
    """The arrays every Gavel policy reads from a ``SchedulerState``."""

    throughputs: FloatArray  # (m, n) steps/s
    scale_factors: FloatArray  # (m,)
    weights: FloatArray  # (m,) priority weights
    remaining: FloatArray  # (m,) steps
    age_s: FloatArray  # (m,) now - arrival
    capacities: FloatArray  # (n,)
    active: BoolArray  # (m, n): where x may be > 0
    #: the policy's centering state (``center.Centering``: when its centerings run compiled; None: NumPy)
    centering: Centering | None = None

    @classmethod
    def of(cls, state: SchedulerState, centering: Centering | None = None) -> Inputs:
        t = state.throughput_matrix()
        caps = state.capacities()
        now = state.now_s
        # per job: scale factor, priority weight, remaining steps, age (one array, then its columns)
        per_job = np.array([(j.scale_factor, j.priority_weight, j.remaining_steps, now - j.arrival_s)
                            for j in state.jobs], dtype=float).reshape(-1, 4).T.copy()
        return cls(
            throughputs=t,
            scale_factors=per_job[0],
            weights=per_job[1],
            remaining=per_job[2],
            age_s=per_job[3],
            capacities=caps,
            active=active_mask(t, caps),
            centering=centering,
        )

    @property
    def shape(self) -> tuple[int, int]:
        return self.throughputs.shape

    def rates_for(self, *, agnostic: bool) -> FloatArray:
        """The throughputs a policy sees: real ones, or the agnostic reference view."""
        return self.reference_rates() if agnostic else self.throughputs

    def reference_rates(self) -> FloatArray:
        """Agnostic view: every type gets the job's rate on the state's first type. That is Gavel's
        ``v100`` under its type order (``--gavel-compat``; else the first type listed, as before) and
        the fastest type by the table otherwise (``ThroughputTable.speed_order``): never a name."""
        col = 0
        n = self.shape[1]
        if n == 0:
            return self.throughputs.copy()
        return np.repeat(self.throughputs[:, [col]], n, axis=1)


def proportional_throughputs(throughputs: FloatArray, capacities: FloatArray) -> FloatArray:
    """``prop_i = sum_j T_ij N_j / sum_k N_k`` (Gavel's proportional baseline)."""
    total = float(capacities.sum())
    if total <= 0:
        return np.zeros(throughputs.shape[0])
    return matvec(throughputs, capacities / total)


def las_scale(throughputs: FloatArray, inp: Inputs) -> FloatArray:
    """LAS's per-job normalization ``s_i / (w_i prop_i)`` (0 where a job has no proportional share)."""
    prop = proportional_throughputs(throughputs, inp.capacities)
    return np.divide(inp.scale_factors, inp.weights * prop, out=np.zeros_like(prop), where=prop > 0)


def isolated_fractions(scale_factors: FloatArray, capacities: FloatArray) -> FloatArray:
    """Gavel's ``IsolatedPolicy``: ``x_ij = (N_j / m) / s_i``, each row divided by ``max(1, row sum)``.

    An equal ``1/m`` slice of every type; it never exceeds the capacities.
    """
    m = scale_factors.size
    if m == 0:
        return np.zeros((0, capacities.size))
    x = np.tile(capacities / m, (m, 1)) / scale_factors[:, None]
    out: FloatArray = x / np.maximum(1.0, x.sum(axis=1))[:, None]
    return out


def isolated_throughputs(throughputs: FloatArray, scale_factors: FloatArray, capacities: FloatArray) -> FloatArray:
    """``T^iso_i = sum_j T_ij x^iso_ij`` with Gavel's isolated fractions."""
    out: FloatArray = (throughputs * isolated_fractions(scale_factors, capacities)).sum(axis=1)
    return out


@dataclass(frozen=True, slots=True)
class Classes:
    """Identical rows collapsed: row ``c`` of the reduced problem stands for ``counts[c]`` jobs."""

    rows: BoolArray  # (m,): rows that take part (others get x = 0)
    first: IntArray  # (c,) index (into all rows) of each class's first member
    inverse: IntArray  # (number of taking-part rows,) class of each
    counts: FloatArray  # (c,)

    @classmethod
    def of(cls, rows: BoolArray, *features: FloatArray) -> Classes:
        cols = [f.reshape(f.shape[0], -1) for f in features]
        feats = np.concatenate(cols, axis=1)[rows] if cols else np.zeros((int(rows.sum()), 0))
        first, inverse, counts = unique_rows(feats)
        idx = np.nonzero(rows)[0]
        return cls(rows, idx[first] if first.size else first, inverse, counts.astype(float))

    def take(self, arr: npt.NDArray[_S]) -> npt.NDArray[_S]:
        return arr[self.first]

    def expand(self, x_cls: FloatArray, m: int) -> FloatArray:
        x = np.zeros((m, x_cls.shape[1]))
        if self.inverse.size:
            x[self.rows] = x_cls[self.inverse]
        return x


def tie_order(state: SchedulerState) -> IntArray:
    """Type indices in the order ties between types are broken: by name under Gavel's type order (Gavel's
    dicts are sorted by name; ``--gavel-compat``), the state's own order where the run set a label-free
    one (``Cluster.order``: fastest first by the table)."""
    types = state.gpu_types
    if state.cluster.order:
        return np.arange(len(types))
    return np.argsort(np.asarray(types, dtype=str), kind="stable")


def empty_allocation(state: SchedulerState, **kw: object) -> Allocation:
    return Allocation.for_state(state, np.zeros((0, len(state.gpu_types))), **kw)


def finish(state: SchedulerState, x: FloatArray, active: BoolArray, **kw: object) -> Allocation:
    """Clip to [0, 1], force zeros off ``active`` and wrap as an ``Allocation``."""
    return Allocation.for_state(state, np.where(active, clip_fractions(x), 0.0), **kw)


class GavelPolicy:
    """Base of Gavel's policies: a name per variant and the declared traits.

    ``type_aware`` (Gavel's ``*_perf`` variants) or not (every GPU looks alike to the policy);
    ``NAMES`` = (aware name, agnostic name); a class with one variant lists it once.
    ``centering``: when this policy's centerings run compiled (``center.Centering``), the one state it
    keeps between calls; it changes the time a decision takes, never the decision.
    """

    TRAITS: ClassVar[PolicyTraits] = PolicyTraits()
    NAMES: ClassVar[tuple[str, ...]]

    def __init__(self, *, type_aware: bool = True) -> None:
        if len(self.NAMES) == 1 and type_aware != self.TRAITS.type_aware:
            raise ValueError(f"{self.NAMES[0]} has no {'type-aware' if type_aware else 'type-agnostic'} variant")
        self.type_aware = bool(type_aware)
        self.centering = Centering()

    @property
    def name(self) -> str:
        return self.NAMES[0] if self.type_aware or len(self.NAMES) == 1 else self.NAMES[1]

    @property
    def traits(self) -> PolicyTraits:
        return replace(self.TRAITS, type_aware=self.type_aware)

    def allocate(self, state: SchedulerState) -> Allocation:
        if not state.jobs:
            return empty_allocation(state)
        inp = Inputs.of(state, self.centering)
        return self.solve(state, inp, inp.rates_for(agnostic=not self.type_aware))

    def solve(self, state: SchedulerState, inp: Inputs, throughputs: FloatArray) -> Allocation:
        raise NotImplementedError


class ReferenceSolved(GavelPolicy):
    """A policy with a Gavel-exact path: ``solver="ecos"`` solves cvxpy's problem form with our
    re-implementation of ECOS (ecos_ipm.py); Gavel-compatible runs select it (the run builder)."""

    TRAITS: ClassVar[PolicyTraits] = PolicyTraits(reference_solver=True)
    ADVANCED: ClassVar[Mapping[str, str]] = {
        "solver": "`highs`: the optimum from HiGHS LPs, returned as the analytic center of the optimal set; "
                  "`ecos`: the point Gavel's ECOS returns, from cvxpy's problem form solved by the "
                  "re-implementation of ECOS's iterations (`--gavel-compat` selects it)",
    }

    def __init__(self, *, type_aware: bool = True, solver: str = "highs") -> None:
        super().__init__(type_aware=type_aware)
        if solver not in ("highs", "ecos"):
            raise ValueError(f"solver must be 'highs' or 'ecos', got {solver!r}")
        self.solver = solver
