"""Water-filling max-min fairness with space sharing (Gavel's ``max_min_fairness_water_filling_packed``).

The same normalized effective throughput as ``max_min_fairness_packed``
(``s_i / (w_i prop_i)`` times the job's rate summed over the units holding
it: alone and in pairs, packing.py), raised lexicographically as
``max_min_fairness_water_filling_perf`` does (water_filling.py):

1. LP (HiGHS): maximize ``tau`` s.t. every unfrozen job reaches ``tau`` and
   every frozen one keeps its level.
2. Bottlenecks (an LP instead of Gavel's big-M MILP): maximize ``sum u_i``
   with ``u_i <= delta tau`` over the candidates, each required to reach
   ``tau + u_i``; candidates with ``u_i > 0`` can improve and leave the set;
   repeat until none can. Freeze the rest at ``tau``.
3. Repeat until every job with a positive coefficient is frozen; the
   allocation is the last LP's point (a HiGHS vertex, where Gavel keeps
   ECOS's point of its last LP).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from hadar.arrays import BoolArray, FloatArray
from hadar.model.state import Allocation, SchedulerState
from hadar.policies.gavel.common import (
    Inputs,
    finish,
    las_scale,
)
from hadar.policies.gavel.packed import PackedPolicy, pair_map
from hadar.policies.gavel.packing import PackedRows, Units
from hadar.policies.registry import register
from hadar.solve.lp import solve_lp

_LEVEL_RTOL = 1e-9  # slack granted to levels found by an earlier LP (HiGHS tolerances)
_DELTA = 1e-2  # cap on the improvement u_i, relative to tau
_IMPROVES = 1e-6  # u_i above this (relative to tau) means "can improve"


def _loosen(level: FloatArray) -> FloatArray:
    return level - _LEVEL_RTOL * np.abs(level)


def _base(rows: PackedRows, extra: int) -> tuple[sp.csr_matrix, FloatArray]:
    m = rows.time.shape[0]
    pad = sp.csr_matrix((rows.cap.shape[0] + m, extra))
    a = sp.hstack([sp.vstack([rows.cap, rows.time]), pad])
    return a.tocsr(), np.concatenate([rows.capacities, np.ones(m)])


def _floor_rows(rows: PackedRows, which: BoolArray, floors: FloatArray, extra: int) -> tuple[sp.csr_matrix, FloatArray]:
    """``gain_i x >= floor_i`` for ``which`` jobs, as ``-gain_i x <= -floor_i``."""
    g = -rows.gain[which]
    return sp.hstack([g, sp.csr_matrix((g.shape[0], extra))]).tocsr(), -floors[which]


def _max_min(rows: PackedRows, free: BoolArray, frozen: BoolArray, levels: FloatArray) -> tuple[float, FloatArray]:
    """Maximize ``tau``: every ``free`` job reaches it, every ``frozen`` one its (loosened) level."""
    nv, k = rows.nv, int(free.sum())
    a0, b0 = _base(rows, 1)
    up = sp.hstack([-rows.gain[free], sp.csr_matrix(np.ones((k, 1)))]).tocsr()
    a1, b1 = _floor_rows(rows, frozen, _loosen(levels), 1)
    bounds = np.zeros((nv + 1, 2))
    bounds[:, 1] = np.inf
    c = np.zeros(nv + 1)
    c[-1] = -1.0
    res = solve_lp(c, sp.vstack([a0, up, a1]).tocsr(), np.concatenate([b0, np.zeros(k), b1]), bounds,
                   "packed water-filling LP")
    return float(res.x[-1]), np.asarray(res.x[:nv])


def _improvable(rows: PackedRows, cand: BoolArray, free: BoolArray, frozen: BoolArray, levels: FloatArray,
                tau: float) -> BoolArray:
    """Candidates that can exceed ``tau`` while every other job keeps its level (free ones: ``tau``)."""
    nv, k = rows.nv, int(cand.sum())
    floor = np.where(frozen, levels, tau)
    a0, b0 = _base(rows, k)
    up = sp.hstack([-rows.gain[cand], sp.identity(k, format="csr")]).tocsr()
    a1, b1 = _floor_rows(rows, (free | frozen) & ~cand, _loosen(floor), k)
    bounds = np.zeros((nv + k, 2))
    bounds[:nv, 1] = np.inf
    bounds[nv:, 1] = _DELTA * abs(tau)
    c = np.zeros(nv + k)
    c[nv:] = -1.0
    res = solve_lp(c, sp.vstack([a0, up, a1]).tocsr(), np.concatenate([b0, -_loosen(np.full(k, tau)), b1]),
                   bounds, "packed water-filling bottleneck LP")
    out = np.zeros(cand.size, dtype=bool)
    out[np.nonzero(cand)[0]] = res.x[nv:] > _IMPROVES * abs(tau)
    return out


def packed_water_fill(rows: PackedRows, demand: BoolArray) -> FloatArray:
    """The last LP's point (over ``rows``' variables) of the lexicographic max-min over ``demand`` jobs."""
    m = demand.size
    levels = np.zeros(m)
    frozen = np.zeros(m, dtype=bool)
    xv = np.zeros(rows.nv)
    while (demand & ~frozen).any():
        free = demand & ~frozen
        tau, xv = _max_min(rows, free, frozen, levels)
        cand = free.copy()
        while cand.any():
            better = _improvable(rows, cand, free, frozen, levels, tau)
            if not better.any():
                break
            cand &= ~better
        if not cand.any():  # numerical safety: never loop without progress
            cand = free
        levels[cand] = tau
        frozen |= cand
    return xv


@register("max_min_fairness_water_filling_packed",
          "lexicographic (water-filling) max-min of normalized effective throughput over jobs alone and "
          "pairs (Gavel)")
class MaxMinFairnessWaterFillingPacked(PackedPolicy):
    NAMES: ClassVar[tuple[str, ...]] = ("max_min_fairness_water_filling_packed",)

    def solve(self, state: SchedulerState, inp: Inputs, throughputs: FloatArray) -> Allocation:
        scale = las_scale(inp.throughputs, inp)
        units = Units.of(state, inp.capacities)
        rows = PackedRows.of(units, scale, inp.throughputs, inp.scale_factors, inp.capacities)
        demand = (scale > 0) & (np.asarray(rows.gain.sum(axis=1)).ravel() > 0)
        x = rows.unpack(packed_water_fill(rows, demand), units.count)
        m = inp.shape[0]
        return finish(state, x[:m], inp.active, pairs=pair_map(state, units, x[m:]))
