"""Lexicographic max-min fairness by water filling (Gavel's ``max_min_fairness_water_filling_perf``).

Same normalized throughput as ``max_min_fairness_perf``
(``c_i . x_i = s_i T_i . x_i / (w_i prop_i)``), but instead of stopping at the
best minimum, keep raising the levels of the jobs that can still improve:

1. LP (HiGHS): maximize ``tau`` s.t. ``c_i . x_i >= tau`` for unfrozen jobs and
   ``c_i . x_i >= level_i`` for frozen ones.
2. Bottleneck test (an LP instead of Gavel's big-M MILP): maximize
   ``sum_i u_i`` s.t. ``c_i . x_i >= tau + u_i``, ``0 <= u_i <= delta`` over the
   candidates. Jobs with ``u_i > 0`` can improve; drop them from the candidates
   and repeat until the optimum is 0: the remaining candidates cannot improve
   even alone (if several could, an average of their witnesses would improve
   all of them), so they are exactly the bottlenecks. Freeze them at ``tau``.
3. Repeat until every job is frozen, then return the analytic center of
   ``{c_i . x_i >= level_i}`` (the point ECOS would return on Gavel's last LP).

Identical jobs are merged into classes (they always share a level).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from hadar.arrays import BoolArray, FloatArray
from hadar.model.state import Allocation, SchedulerState
from hadar.policies.gavel.common import GavelPolicy, Inputs, finish
from hadar.policies.gavel.max_min import max_min_coefficients
from hadar.policies.gavel.problem import ClassProblem, fattened
from hadar.policies.registry import register
from hadar.solve.lp import base_constraints, demand_rows, solve_lp

_LEVEL_RTOL = 1e-9  # slack granted to levels found by an earlier LP (HiGHS tolerances)
_DELTA = 1e-2  # cap on the improvement u_i, relative to tau
_IMPROVES = 1e-6  # u_i above this (relative to tau) means "can improve"


def _loosen(level: FloatArray | float) -> FloatArray | float:
    return level - _LEVEL_RTOL * np.abs(level)


def _improvable(prob: ClassProblem, cand: BoolArray, free: BoolArray, floors: FloatArray,
                tau: float) -> BoolArray:
    """Candidates that can exceed ``tau`` while every other job keeps its level."""
    var = prob.var
    rows = np.nonzero(cand)[0]
    n_u = rows.size
    a_base, b_base = base_constraints(var, prob.k * prob.s, prob.capacities, extra_cols=n_u)
    up = demand_rows(var, prob.a, rows, extra_cols=n_u)
    up = up + sp.csr_matrix((np.ones(n_u), (np.arange(n_u), var.count + np.arange(n_u))), shape=up.shape)
    others = np.nonzero(~cand & (free | np.isfinite(floors)))[0]
    other_floor = np.where(free, _loosen(tau), floors)[others]
    blocks = [a_base, up, demand_rows(var, prob.a, others, extra_cols=n_u)]
    rhs = np.concatenate([b_base, np.full(n_u, -_loosen(tau)), -other_floor])
    bounds = np.zeros((var.count + n_u, 2))
    bounds[: var.count, 1] = np.inf
    bounds[var.count:, 1] = _DELTA * abs(tau)
    c = np.zeros(var.count + n_u)
    c[var.count:] = -prob.k[rows]
    res = solve_lp(c, sp.vstack(blocks).tocsr(), rhs, bounds, "water-filling bottleneck LP")
    out = np.zeros(prob.size, dtype=bool)
    out[rows] = res.x[var.count:] > _IMPROVES * abs(tau)
    return out


def _bottlenecks(prob: ClassProblem, free: BoolArray, floors: FloatArray, tau: float) -> BoolArray:
    cand = free.copy()
    while cand.any():
        better = _improvable(prob, cand, free, floors, tau)
        if not better.any():
            return cand
        cand &= ~better
    return cand


def water_fill(prob: ClassProblem) -> tuple[FloatArray, FloatArray]:
    """``(levels, x)`` on the class problem: the lexicographic max-min levels and a point attaining them."""
    levels = np.full(prob.size, -np.inf)
    frozen = np.zeros(prob.size, dtype=bool)
    x = np.zeros(prob.a.shape)
    while not frozen.all():
        free = ~frozen
        floors = np.where(frozen, _loosen(levels), -np.inf)
        tau, x = prob.max_min(free=free, floors=floors, what="water-filling LP")
        stuck = _bottlenecks(prob, free, floors, tau)
        if not stuck.any():  # numerical safety: never loop without progress
            stuck = free
        levels[stuck] = tau
        frozen |= stuck
    return levels, x


def solve_water_filling(coef: FloatArray, inp: Inputs) -> FloatArray:
    m, _ = inp.shape
    prob = ClassProblem.build(coef, inp.scale_factors, inp.capacities, inp.active, centering=inp.centering)
    if prob.size == 0:
        return np.zeros(inp.shape)
    levels, x_opt = water_fill(prob)
    x_cls = prob.centered(np.asarray(fattened(levels)), x_opt)
    return prob.expand(x_cls, m)


@register("max_min_fairness_water_filling_perf",
          "lexicographic (water-filling) max-min of normalized effective throughput (Gavel)", type_aware=True)
class MaxMinFairnessWaterFilling(GavelPolicy):
    NAMES: ClassVar[tuple[str, ...]] = ("max_min_fairness_water_filling_perf",)

    def solve(self, state: SchedulerState, inp: Inputs, throughputs: FloatArray) -> Allocation:
        x = solve_water_filling(max_min_coefficients(throughputs, inp), inp)
        return finish(state, x, inp.active)
