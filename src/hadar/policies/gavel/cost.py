"""Throughput per dollar (Gavel's ``max_sum_throughput_normalized_by_cost_perf`` and ``..._SLOs``).

Maximize ``sum_ij T_ij x_ij / p_j`` over the base constraints, ``p_j`` the
price of type j in $ per GPU-hour (``Cluster.price``: the cluster file's
``prices``, else the Google Cloud preemptible prices Gavel's scheduler
hard-codes: V100 0.74, P100 0.43, K80 0.135). As in Gavel, the price divides
a job's whole throughput, whatever its scale factor, and raw steps/s of
different models are summed (see ``throughput.py``). A type with no price
is an input error.

The SLO variant adds, for every job with an SLO factor ``f_i`` (the trace's
SLO column, a CSV/YAML job's ``slo``), the constraint
``sum_j T_ij x_ij >= R_i / (D_i - now)``: the rate that finishes its
remaining steps ``R_i`` by its deadline ``D_i = arrival_i + f_i * (total
steps / its throughput on its fastest type)`` (Gavel: ``f_i`` times the
job's duration, its run time on a V100). Jobs past their deadline get no
constraint; when the constraints cannot all be met, the allocation is the
one without SLOs (Gavel's fallback), and the run goes on.

Ties between optimal points are broken as in ``max_sum_throughput_perf``:
the analytic center of the optimal face (no ECOS path: Gavel never
published results for these policies, its price logs are not public).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from hadar.arrays import FloatArray
from hadar.errors import InputError, SolverError
from hadar.model.state import Allocation, SchedulerState
from hadar.numeric import dot
from hadar.policies.gavel.center import Face, center_face, repair
from hadar.policies.gavel.common import GavelPolicy, Inputs, finish
from hadar.policies.gavel.problem import ClassProblem, fattened
from hadar.policies.gavel.throughput import solve_max_sum
from hadar.policies.registry import register
from hadar.solve.lp import base_constraints, demand_rows, solve_lp

log = logging.getLogger(__name__)

#: an LP under per-job rate floors (``need``: steps/s, 0 = none); None when they cannot all be met
SloSolve = Callable[[FloatArray], "FloatArray | None"]


def prices(state: SchedulerState) -> FloatArray:
    """$ per GPU-hour of each type, in ``gpu_types`` order; a type without one is an ``InputError``."""
    out = []
    for t in state.gpu_types:
        p = state.cluster.price(t)
        if p is None:
            raise InputError(f"no price for GPU type {t!r}: give it in the cluster file (prices: {{{t}: DOLLARS}})")
        out.append(p)
    return np.array(out, dtype=float)


def slo_rates(state: SchedulerState, inp: Inputs) -> FloatArray:
    """Per job, the steps/s it needs to meet its SLO (0: no SLO, or its deadline has passed)."""
    need = np.zeros(len(state.jobs))
    for i, job in enumerate(state.jobs):
        best = max(job.throughputs, default=0.0)
        if job.slo is None or best <= 0:
            continue
        left_s = job.arrival_s + job.slo * job.total_steps / best - state.now_s
        if left_s > 0:
            need[i] = inp.remaining[i] / left_s
    return need


def solve_with_slos(coef: FloatArray, inp: Inputs, need: FloatArray) -> FloatArray | None:
    """Max ``sum coef . x`` with ``T_i . x_i >= need_i``; None when the SLOs cannot all be met."""
    m, _ = inp.shape
    demand = need > 0
    prob = ClassProblem.build(coef, inp.scale_factors, inp.capacities, inp.active, demand=np.zeros(m, dtype=bool),
                              extra_features=(need, inp.throughputs))
    if prob.size == 0:
        return np.zeros(inp.shape)
    var = prob.var
    t_cls = prob.classes.take(np.where(inp.active, inp.throughputs, 0.0))
    need_cls = prob.classes.take(need)
    rows = np.nonzero(prob.classes.take(demand))[0]
    scale = np.where(need_cls > 0, 1.0 / np.maximum(need_cls, 1e-300), 1.0)[:, None]  # rows in units of need
    a_ub, b_ub = base_constraints(var, prob.k * prob.s, prob.capacities)
    blocks = sp.vstack([a_ub, demand_rows(var, t_cls * scale, rows, extra_cols=0)]).tocsr()
    rhs = np.concatenate([b_ub, -np.ones(rows.size)])
    gain = var.gather(prob.k[:, None] * prob.a)
    bounds = np.zeros((var.count, 2))
    bounds[:, 1] = np.inf
    try:
        res = solve_lp(-gain, blocks, rhs, bounds, "max-sum-throughput-per-dollar LP with SLOs")
    except SolverError:
        return None
    best = dot(gain, res.x)
    face_a = np.where(need_cls[:, None] > 0, t_cls * scale, 0.0)
    x_rep = repair(prob.face(np.full(prob.size, -np.inf)), var.to_matrix(res.x))
    g = np.full(prob.size, -np.inf)
    g[rows] = np.minimum(fattened(1.0), np.asarray(fattened((face_a * x_rep).sum(axis=1)))[rows])
    c_floor = min(float(fattened(best)), float(fattened(float((prob.k[:, None] * prob.a * x_rep).sum()))))
    face = Face(face_a, g, prob.k, prob.s, prob.capacities, prob.active, c=prob.a, c_floor=c_floor)
    x_cls = center_face(face, x_rep, inp.centering)
    return prob.expand(x_cls, m)


@register("max_sum_throughput_normalized_by_cost_perf_SLOs",
          "maximize throughput per dollar (steps/s over $/GPU-hour) while meeting each job's SLO (Gavel)",
          slos=True)
@register("max_sum_throughput_normalized_by_cost_perf",
          "maximize the sum of throughput per dollar: steps/s over the GPU type's $/GPU-hour (Gavel)", slos=False)
class MaxSumThroughputPerDollar(GavelPolicy):
    """Gavel's ``ThroughputNormalizedByCostSum`` policies; ``slos`` adds the SLO constraints."""

    NAMES: ClassVar[tuple[str, ...]] = ("max_sum_throughput_normalized_by_cost_perf",)
    PARAMS: ClassVar[Mapping[str, str]] = {
        "slo_fallback": "`_SLOs` only, when the SLOs cannot all be met: `hardest` drops the fewest, hardest first "
                        "(needed rate over the job's best rate), until the rest can; `all` drops every one "
                        "(Gavel's; `--gavel-compat` sets it)",
    }
    GAVEL_COMPAT: ClassVar[Mapping[str, Any]] = {"slo_fallback": "all"}

    def __init__(self, *, slos: bool = False, slo_fallback: str = "hardest") -> None:
        super().__init__(type_aware=True)
        if slo_fallback not in ("hardest", "all"):
            raise ValueError(f"slo_fallback must be 'hardest' or 'all', got {slo_fallback!r}")
        self.slos = bool(slos)
        self.slo_fallback = slo_fallback

    @property
    def name(self) -> str:
        return "max_sum_throughput_normalized_by_cost_perf" + ("_SLOs" if self.slos else "")

    def solve(self, state: SchedulerState, inp: Inputs, throughputs: FloatArray) -> Allocation:
        coef = throughputs / prices(state)[None, :]
        x = self.with_slos(state, inp, lambda need: solve_with_slos(coef, inp, need))
        if x is None:
            x = solve_max_sum(coef, inp)
        return finish(state, x, inp.active)

    def with_slos(self, state: SchedulerState, inp: Inputs, solve: SloSolve) -> FloatArray | None:
        """``solve(need)`` under this policy's SLOs and fallback; None: allocate without SLOs."""
        if not self.slos:
            return None
        need = slo_rates(state, inp)
        if not (need > 0).any():
            return None
        x = solve(need)
        if x is None and self.slo_fallback == "hardest":
            x = _fewest_dropped(solve, inp, need, state)
        if x is None:
            log.info("t=%.0f s: the SLOs cannot all be met; allocating without them", state.now_s)
        return x


def _fewest_dropped(solve: SloSolve, inp: Inputs, need: FloatArray, state: SchedulerState) -> FloatArray | None:
    """The allocation with the fewest SLOs dropped, hardest first (bisection on how many: dropping more
    never makes the rest infeasible); None when only dropping them all works."""
    best = np.where(inp.active, inp.throughputs, 0.0).max(axis=1, initial=0.0)
    rows = [i for i in range(need.size) if need[i] > 0]
    order = sorted(rows, key=lambda i: (-need[i] / best[i], state.jobs[i].job_id))
    lo, hi, found = 1, len(order) - 1, None  # dropping 0 failed; dropping all is the caller's fallback
    while lo <= hi:
        k = (lo + hi) // 2
        kept = need.copy()
        kept[order[:k]] = 0.0
        x = solve(kept)
        if x is None:
            lo = k + 1
        else:
            found, hi = x, k - 1
    return found
