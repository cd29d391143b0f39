"""Least attained service / max-min fairness (Gavel's ``max_min_fairness[_perf]``).

Heterogeneity-aware: maximize ``min_i (s_i / (w_i prop_i)) sum_j T_ij x_ij``
over the base constraints, ``prop_i`` = the job's throughput under the
proportional split ``x_ij = N_j / sum_k N_k``. Agnostic: the same LP with
every ``T_ij := 1`` (so ``prop_i = 1``): equal GPU-time shares.

Solved as ``max tau s.t. c_i . x_i >= tau`` with HiGHS on job classes, then
re-centered on the optimal face (see ``center.py``): non-bottleneck jobs
share the leftover capacity and identical jobs get identical rows, as with
Gavel's ECOS.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from hadar.arrays import FloatArray
from hadar.model.state import Allocation, SchedulerState
from hadar.policies.gavel.common import GavelPolicy, Inputs, empty_allocation, finish, las_scale
from hadar.policies.gavel.problem import ClassProblem, fattened
from hadar.policies.registry import register


def max_min_coefficients(throughputs: FloatArray, inp: Inputs) -> FloatArray:
    """``c_ij = T_ij s_i / (w_i prop_i)``: normalized, priority-weighted throughput per unit of x."""
    return throughputs * las_scale(throughputs, inp)[:, None]


def solve_max_min(coef: FloatArray, inp: Inputs) -> FloatArray:
    """Centered optimum of ``max min_i coef_i . x_i`` (rows without an active entry get 0)."""
    m, _ = inp.shape
    prob = ClassProblem.build(coef, inp.scale_factors, inp.capacities, inp.active, centering=inp.centering)
    if prob.size == 0:
        return np.zeros(inp.shape)
    tau, x_opt = prob.max_min(what="max-min fairness LP")
    x_cls = prob.centered(np.full(prob.size, fattened(tau)), x_opt)
    return prob.expand(x_cls, m)


@register("max_min_fairness_perf", "LAS, heterogeneity-aware: max-min of normalized effective throughput (Gavel)",
          type_aware=True)
@register("max_min_fairness", "LAS, type-agnostic: max-min of GPU-time shares (Gavel)", type_aware=False)
class MaxMinFairness(GavelPolicy):
    """Gavel's LAS; ``type_aware=False`` solves the same LP with every throughput set to 1."""

    NAMES: ClassVar[tuple[str, ...]] = ("max_min_fairness_perf", "max_min_fairness")

    def allocate(self, state: SchedulerState) -> Allocation:
        if not state.jobs:
            return empty_allocation(state)
        inp = Inputs.of(state, self.centering)
        rates = inp.throughputs if self.type_aware else np.ones(inp.shape)
        x = solve_max_min(max_min_coefficients(rates, inp), inp)
        return finish(state, x, inp.active)
