"""Gavel's space-sharing policies: ``max_min_fairness_packed`` (LAS over single jobs and pairs).

The allocation's ``fractions`` are each job's time alone; ``pairs`` the time
each pair shares the same GPUs (see packing.py for the LP and
mechanism/pairs.py for how rounds run it).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from hadar.arrays import FloatArray
from hadar.model.state import Allocation, SchedulerState
from hadar.policies.gavel.common import (
    GavelPolicy,
    Inputs,
    finish,
    isolated_throughputs,
    las_scale,
)
from hadar.policies.gavel.finish_time import (
    MEMO_CUMULATIVE,
    MEMO_ISOLATED,
    MEMO_REMAINING,
    cumulative_isolated_time,
)
from hadar.policies.gavel.packing import Units, effective_throughputs, packed_max_min
from hadar.policies.registry import register

#: pair shares below this are dropped (solver round-off)
PAIR_EPS = 1e-9


def pair_map(state: SchedulerState, units: Units, x_pairs: np.ndarray) -> dict[tuple[int, int], tuple[float, ...]]:
    """``(job id a, job id b) -> shares per type`` for the pairs with some time."""
    ids = state.job_ids
    out: dict[tuple[int, int], tuple[float, ...]] = {}
    for p, (a, b) in enumerate(units.pairs):
        row = x_pairs[p]
        if row.max(initial=0.0) > PAIR_EPS:
            out[(ids[int(a)], ids[int(b)])] = tuple(float(v) if v > PAIR_EPS else 0.0 for v in row)
    return out


def _max_min_allocation(state: SchedulerState, inp: Inputs, scale: np.ndarray,
                        demand: np.ndarray | None = None) -> Allocation:
    """One packed max-min LP over the state's jobs and pairs (``scale``: each job's factor), as an allocation."""
    units = Units.of(state, inp.capacities)
    _, x = packed_max_min(units, scale, inp.throughputs, inp.scale_factors, inp.capacities, demand)
    m = inp.shape[0]
    return finish(state, x[:m], inp.active, pairs=pair_map(state, units, x[m:]))


class PackedPolicy(GavelPolicy):
    """Base of the packed policies: type-aware only, no parameter of their own; ``solve`` sees the
    real throughputs (``GavelPolicy.allocate`` handles the empty state)."""

    def __init__(self) -> None:
        super().__init__(type_aware=True)


@register("max_min_fairness_packed",
          "LAS with space sharing: max-min of normalized effective throughput over jobs alone and pairs (Gavel)")
class MaxMinFairnessPacked(PackedPolicy):
    """Gavel's packed LAS: ``max min_i (s_i / (w_i prop_i)) sum_{u containing i} sum_j T_{i|u,j} x_uj``."""

    NAMES: ClassVar[tuple[str, ...]] = ("max_min_fairness_packed",)

    def solve(self, state: SchedulerState, inp: Inputs, throughputs: FloatArray) -> Allocation:
        scale = las_scale(inp.throughputs, inp)
        return _max_min_allocation(state, inp, scale)


@register("min_total_duration_packed",
          "makespan minimization with space sharing: the shortest T every job can finish in, over jobs alone "
          "and pairs (Gavel)")
class MinTotalDurationPacked(PackedPolicy):
    """Gavel's packed makespan: ``max 1/T`` s.t. ``sum_{u containing i} sum_j T_{i|u,j} x_uj >= R_i / T``.

    Solved exactly as one LP (``1/T`` = the max-min of effective throughput per remaining step);
    Gavel bisects on T and returns a feasible point at a T up to 5 % above the optimum.
    """

    NAMES: ClassVar[tuple[str, ...]] = ("min_total_duration_packed",)

    def solve(self, state: SchedulerState, inp: Inputs, throughputs: FloatArray) -> Allocation:
        demand = inp.remaining > 0
        scale = np.divide(1.0, inp.remaining, out=np.zeros_like(inp.remaining), where=demand)
        if demand.any():  # one positive factor (1/T comes out O(1) for HiGHS); the argmax is unchanged
            scale /= float(np.median(scale[demand]))
        return _max_min_allocation(state, inp, scale, demand)


_FTF_ROUNDS = 60


@register("finish_time_fairness_packed",
          "finish-time fairness (Themis rho) with space sharing: over jobs alone and pairs (Gavel)")
class FinishTimeFairnessPacked(PackedPolicy):
    """Minimize ``max_i rho_i``, ``rho_i = (t_i + R_i / thr_i) / (C_i + R_i / T^iso_i)`` with ``thr_i``
    the job's effective throughput over its units. ``rho_i <= rho`` is ``thr_i >= R_i / (rho D_i - t_i)``:
    Dinkelbach steps, each one packed max-min LP, from the isolated allocation's rho down to the optimum."""

    NAMES: ClassVar[tuple[str, ...]] = ("finish_time_fairness_packed",)

    def solve(self, state: SchedulerState, inp: Inputs, throughputs: FloatArray) -> Allocation:
        m = inp.shape[0]
        cumulative = cumulative_isolated_time(state, state.memo)
        iso = isolated_throughputs(inp.throughputs, inp.scale_factors, inp.capacities)
        demand = (inp.remaining > 0) & (iso > 0)
        denom = cumulative + np.divide(inp.remaining, iso, out=np.zeros(m), where=iso > 0)
        units = Units.of(state, inp.capacities)
        x = np.zeros((units.count, inp.shape[1]))
        if demand.any():
            x = _min_max_rho(units, inp, demand, denom, iso)
        ids = state.job_ids
        memo = {
            MEMO_CUMULATIVE: dict(zip(ids, cumulative.tolist(), strict=True)),
            MEMO_REMAINING: dict(zip(ids, inp.remaining.tolist(), strict=True)),
            MEMO_ISOLATED: dict(zip(ids, iso.tolist(), strict=True)),
        }
        return finish(state, x[:m], inp.active, pairs=pair_map(state, units, x[m:]), memo=memo)


def _max_rho(thr: np.ndarray, inp: Inputs, demand: np.ndarray, denom: np.ndarray) -> float:
    with np.errstate(divide="ignore"):
        t = np.where(thr > 0, inp.remaining / np.where(thr > 0, thr, 1.0), np.inf)
    return float(((inp.age_s + t) / np.where(denom > 0, denom, 1.0))[demand].max())


def _min_max_rho(units: Units, inp: Inputs, demand: np.ndarray, denom: np.ndarray, iso: np.ndarray) -> np.ndarray:
    """Dinkelbach iterations from the isolated throughputs' rho; returns the units x types allocation."""
    rho = _max_rho(iso, inp, demand, denom)
    x = None
    for _ in range(_FTF_ROUNDS):
        slack = np.where(demand, rho * denom - inp.age_s, 1.0)
        need = np.where(demand, inp.remaining / np.where(slack > 0, slack, 1.0), 1.0)
        scale = np.where(demand, 1.0 / need, 0.0)
        scale /= float(np.median(scale[demand]))
        _, x_new = packed_max_min(units, scale, inp.throughputs, inp.scale_factors, inp.capacities, demand,
                                  spread=True)
        new_rho = _max_rho(effective_throughputs(units, inp.throughputs, x_new), inp, demand, denom)
        if x is not None and new_rho >= rho * (1.0 - 1e-10):
            break
        x, rho = x_new, min(rho, new_rho)
    assert x is not None
    return x
