"""Hierarchical max-min fairness: entities (teams) share first, then their jobs (water filling).

Jobs belong to entities (``JobView.entity``: the ``entity`` column of a CSV or
YAML job list); entity ``e`` has a weight ``W_e`` (``entity_weights``, default
1). A job that names no entity stands alone, as an entity of its own whose
weight is its priority weight. Shares are measured as in
``max_min_fairness_water_filling_perf``: a job's normalized throughput
``c_i . x_i = s_i T_i . x_i / prop_i`` (type-agnostic variant: every ``T_ij =
1``, i.e. GPU-time shares).

Progressive filling with re-weighting (the semantics of Gavel's water-filling
``fairness`` re-weighting of entities, solved our own way): every job that can
still grow grows at rate ``W_e * w_i / (sum of w_j over its entity's jobs
that can still grow)``, so each entity grows at its weight as long as one of
its jobs can, and within it jobs grow in their priority weights' ratio. Each
step is one LP (HiGHS): maximize ``t`` s.t. ``c_i . x_i >= L_i + r_i t`` for
growing jobs (``L_i`` their level so far, ``r_i`` their rate) and ``c_i . x_i
>= F_i`` for frozen ones, then the bottleneck test of ``water_filling.py``
(an LP that lets candidates exceed their target by a bounded ``u_i``; the
candidates that cannot are the bottlenecks) freezes the jobs that cannot grow,
and their entities' weights go to those entities' other jobs. The answer is
the analytic center of ``{c_i . x_i >= final level_i}``.

With no entities named and equal priority weights this is plain water
filling. Identical jobs of one entity are merged into classes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from hadar.arrays import BoolArray, FloatArray
from hadar.model.state import Allocation, SchedulerState
from hadar.policies.gavel.common import GavelPolicy, Inputs, finish, proportional_throughputs
from hadar.policies.gavel.problem import ClassProblem, fattened
from hadar.policies.registry import register
from hadar.solve.lp import base_constraints, demand_rows, solve_lp

_LOOSEN = 1e-9  # slack granted to levels found by an earlier LP
_DELTA = 1e-2  # cap on the excess u_i in the bottleneck test, relative to the target
_GROWS = 1e-6  # u_i above this (relative to the target) means "can grow"


def _entity_ids(state: SchedulerState, weights: Mapping[str, float]) -> tuple[FloatArray, FloatArray]:
    """Per job: an entity index (jobs naming none get their own) and that entity's weight."""
    names: dict[str, int] = {}
    ids, wts = [], []
    for job in state.jobs:
        if job.entity:
            idx = names.setdefault(job.entity, len(names))
            ids.append(float(idx))
            wts.append(float(weights.get(job.entity, 1.0)))
        else:
            ids.append(-1.0 - job.job_id)
            wts.append(float(job.priority_weight))
    return np.array(ids), np.array(wts)


def _rates(ent: FloatArray, ent_w: FloatArray, job_w: FloatArray, k: FloatArray, free: BoolArray) -> FloatArray:
    """Growth rate of each free class: its entity's weight split over the entity's free jobs by weight."""
    r = np.zeros(ent.size)
    for e in np.unique(ent[free]):
        members = free & (ent == e)
        total = float((k[members] * job_w[members]).sum())
        r[members] = ent_w[members] * job_w[members] / total
    return r


def _lp(prob: ClassProblem, targets: FloatArray, frozen: BoolArray, floors: FloatArray,
        slope: FloatArray | None, cand: BoolArray | None) -> FloatArray:
    """The fill LP (``slope`` given: max t, free rows ``>= targets + slope t``) or the bottleneck test
    (``cand`` given: max sum k u over candidates, ``>= targets + u``); returns the solution vector."""
    var = prob.var
    free = ~frozen
    extra = 1 if slope is not None else int(cand.sum()) if cand is not None else 0
    a_base, b_base = base_constraints(var, prob.k * prob.s, prob.capacities, extra_cols=extra)
    rows = np.nonzero(free)[0]
    grow = demand_rows(var, prob.a, rows, extra_cols=extra).tolil()
    c = np.zeros(var.count + extra)
    bounds = np.zeros((var.count + extra, 2))
    bounds[:, 1] = np.inf
    if slope is not None:
        for r, i in enumerate(rows):
            grow[r, var.count] = slope[i]
        c[-1] = -1.0
    elif cand is not None:
        pos = {int(i): n for n, i in enumerate(np.nonzero(cand)[0])}
        for r, i in enumerate(rows):
            if int(i) in pos:
                grow[r, var.count + pos[int(i)]] = 1.0
                bounds[var.count + pos[int(i)], 1] = _DELTA * max(abs(targets[i]), 1e-12)
                c[var.count + pos[int(i)]] = -prob.k[i]
    fixed = np.nonzero(frozen)[0]
    blocks = [a_base, grow.tocsr(), demand_rows(var, prob.a, fixed, extra_cols=extra)]
    loose = targets - _LOOSEN * np.abs(targets)
    rhs = np.concatenate([b_base, -loose[rows],
                          -(floors[fixed] - _LOOSEN * np.abs(floors[fixed]))])
    res = solve_lp(c, sp.vstack(blocks).tocsr(), rhs, bounds, "hierarchical water-filling LP")
    out: FloatArray = res.x
    return out


def hierarchical_fill(prob: ClassProblem, ent: FloatArray, ent_w: FloatArray,
                      job_w: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``(levels, x)``: the classes' final levels (scaled units) by progressive filling with re-weighting,
    and the last fill LP's point, which attains them."""
    level = np.zeros(prob.size)
    x = np.zeros(prob.a.shape)
    frozen = np.zeros(prob.size, dtype=bool)
    while not frozen.all():
        free = ~frozen
        slope = _rates(ent, ent_w, job_w, prob.k, free)
        z = _lp(prob, level, frozen, level, slope, None)
        t, x = float(z[-1]), prob.var.to_matrix(z)
        target = np.where(free, level + slope * t, level)
        cand = free.copy()
        while cand.any():
            u = _lp(prob, target, frozen, level, None, cand)[prob.var.count:]
            grows = np.zeros(prob.size, dtype=bool)
            grows[np.nonzero(cand)[0]] = u > _GROWS * np.maximum(np.abs(target[cand]), 1e-12)
            if not grows.any():
                break
            cand &= ~grows
        stuck = cand if cand.any() else free  # numerical safety: never loop without progress
        level = target
        frozen |= stuck
    return level, x


def normalized_coefficients(rates: FloatArray, inp: Inputs) -> FloatArray:
    """``c_ij = s_i T_ij / prop_i`` (no priority weight: weights act through the growth rates)."""
    prop = proportional_throughputs(rates, inp.capacities)
    scale = np.divide(inp.scale_factors, prop, out=np.zeros_like(prop), where=prop > 0)
    return rates * scale[:, None]


@register("hierarchical_water_filling_perf", "water filling between entities (teams) in their weights' ratio, "
          "then between each entity's jobs; normalized throughput", type_aware=True)
@register("hierarchical_water_filling", "water filling between entities (teams) in their weights' ratio, "
          "then between each entity's jobs; GPU-time shares (type-agnostic)", type_aware=False)
class HierarchicalWaterFilling(GavelPolicy):
    NAMES: ClassVar[tuple[str, ...]] = ("hierarchical_water_filling_perf", "hierarchical_water_filling")
    PARAMS: ClassVar[Mapping[str, str]] = {
        "entity_weights": "entity name -> weight (> 0): entities share in these weights' ratio; entities not "
                          "listed weigh 1; a job naming no entity stands alone with its priority weight",
    }

    def __init__(self, *, type_aware: bool = True, entity_weights: Mapping[str, Any] | None = None) -> None:
        super().__init__(type_aware=type_aware)
        if entity_weights is not None and not isinstance(entity_weights, Mapping):
            raise ValueError(f"entity_weights must be a mapping of entity name to weight, got {entity_weights!r}")
        weights = dict(entity_weights or {})
        for name, w in weights.items():
            if isinstance(w, bool) or not isinstance(w, int | float) or not np.isfinite(w) or w <= 0:
                raise ValueError(f"entity_weights: the weight of {name!r} must be a positive number, got {w!r}")
        self.entity_weights = {str(k): float(v) for k, v in weights.items()}

    def solve(self, state: SchedulerState, inp: Inputs, throughputs: FloatArray) -> Allocation:
        m, _ = inp.shape
        rates = throughputs if self.type_aware else np.ones(inp.shape)
        ent, ent_w = _entity_ids(state, self.entity_weights)
        prob = ClassProblem.build(normalized_coefficients(rates, inp), inp.scale_factors, inp.capacities, inp.active,
                                  extra_features=(ent, ent_w, inp.weights), centering=inp.centering)
        if prob.size == 0:
            return finish(state, np.zeros(inp.shape), inp.active)
        take = prob.classes.take
        level, x_opt = hierarchical_fill(prob, take(ent), take(ent_w), take(inp.weights))
        x_cls = prob.centered(np.asarray(fattened(level)), x_opt)
        return finish(state, prob.expand(x_cls, m), inp.active)
