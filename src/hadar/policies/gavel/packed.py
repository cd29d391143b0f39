"""Gavel's space-sharing policies: ``max_min_fairness_packed`` (LAS over single jobs and pairs).

The allocation's ``fractions`` are each job's time alone; ``pairs`` the time
each pair shares the same GPUs (see packing.py for the LP and
mechanism/pairs.py for how rounds run it).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from hadar.model.state import Allocation, SchedulerState
from hadar.policies.gavel.common import GavelPolicy, Inputs, empty_allocation, finish, proportional_throughputs
from hadar.policies.gavel.packing import Units, packed_max_min
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


@register("max_min_fairness_packed",
          "LAS with space sharing: max-min of normalized effective throughput over jobs alone and pairs (Gavel)")
class MaxMinFairnessPacked(GavelPolicy):
    """Gavel's packed LAS: ``max min_i (s_i / (w_i prop_i)) sum_{u containing i} sum_j T_{i|u,j} x_uj``."""

    NAMES: ClassVar[tuple[str, ...]] = ("max_min_fairness_packed",)

    def __init__(self) -> None:
        super().__init__(type_aware=True)

    def allocate(self, state: SchedulerState) -> Allocation:
        if not state.jobs:
            return empty_allocation(state)
        inp = Inputs.of(state)
        prop = proportional_throughputs(inp.throughputs, inp.capacities)
        scale = np.divide(inp.scale_factors, inp.weights * prop, out=np.zeros_like(prop), where=prop > 0)
        units = Units.of(state, inp.capacities)
        _, x = packed_max_min(units, scale, inp.throughputs, inp.scale_factors, inp.capacities)
        m = inp.shape[0]
        return finish(state, x[:m], inp.active, pairs=pair_map(state, units, x[m:]))


@register("min_total_duration_packed",
          "makespan minimization with space sharing: the shortest T every job can finish in, over jobs alone "
          "and pairs (Gavel)")
class MinTotalDurationPacked(GavelPolicy):
    """Gavel's packed makespan: ``max 1/T`` s.t. ``sum_{u containing i} sum_j T_{i|u,j} x_uj >= R_i / T``.

    Solved exactly as one LP (``1/T`` = the max-min of effective throughput per remaining step);
    Gavel bisects on T and returns a feasible point at a T up to 5 % above the optimum.
    """

    NAMES: ClassVar[tuple[str, ...]] = ("min_total_duration_packed",)

    def __init__(self) -> None:
        super().__init__(type_aware=True)

    def allocate(self, state: SchedulerState) -> Allocation:
        if not state.jobs:
            return empty_allocation(state)
        inp = Inputs.of(state)
        demand = inp.remaining > 0
        scale = np.divide(1.0, inp.remaining, out=np.zeros_like(inp.remaining), where=demand)
        if demand.any():  # one positive factor (1/T comes out O(1) for HiGHS); the argmax is unchanged
            scale /= float(np.median(scale[demand]))
        units = Units.of(state, inp.capacities)
        _, x = packed_max_min(units, scale, inp.throughputs, inp.scale_factors, inp.capacities, demand)
        m = inp.shape[0]
        return finish(state, x[:m], inp.active, pairs=pair_map(state, units, x[m:]))
