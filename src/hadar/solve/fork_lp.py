"""HadarE's forking LP with copies worth what an estimate says: the least time T in which the remaining work
finishes when a job's t-th copy adds only its marginal worth.

A job's m copies at one copy's rate x each are credited ``worth[m] x x`` (``worth[1] = 1``; ideal forking:
``worth[m] = m``). An LP cannot choose m, so the worth is laid out in **tiers**: the upper concave hull of
``worth`` over m = 0..M, cut at m = 1, 2, 4, 8, ... (never more than 1 + log2 M tiers, so the LP stays small);
tier t is worth the hull's chord slope ``g_t`` (falling with t: the LP fills tiers in order) per GPU-second at
the job's best per-GPU rate, and holds at most ``size_t`` GPUs at once (the first: one copy of W GPUs; the
others: their copies x a copy's GPUs). Tiers end where the slope is no longer positive: a job whose copies
cannot speed it up (no noise scale: ``worth[m] <= 1``) has one tier, W GPUs, Hadar's.

    min T  s.t.  sum_{r,t} g_jt x rate_jr x y_jrt >= N_j           (demand)
                 sum_{j,t} y_jrt <= C_r T                          (capacity of type r)
                 sum_t y_jrt <= cap_jr T                           (one copy per node of type r)
                 sum_r y_jrt <= size_jt T                          (tier t's GPUs)

``rel[j, r]`` (how well type r fits job j): the best tier's ``mu_j g_jt rate_jr / (p_r + q_jr + s_jt)``
capped at 1, from the duals (``bounds.lp_efficiency``'s rule with the tier's own price): 1 on every type the
optimum uses for j, lower by how much of a GPU-second j would waste on r, 0 where j cannot run.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from hadar.arrays import FloatArray
from hadar.errors import InfeasibleError
from hadar.model.cluster import Cluster

#: (slope, GPUs at once) of each tier of one job, the first tier first
Tiers = list[tuple[float, float]]


def worth_tiers(worth: Sequence[float], first_gpus: float, copy_gpus: float) -> Tiers:
    """A job's tiers (module docstring) from ``worth[m]``, m = 0..M (``worth[0] = 0``, ``worth[1] = 1``):
    chords of the upper concave hull over [0, 1], [1, 2], [2, 4], ... [.., M]; consecutive tiers of equal
    slope (relative 1e-12) merged; none from the first slope <= 1e-9 on."""
    top = len(worth) - 1
    hull = [0]
    for m in range(1, top + 1):
        while len(hull) >= 2 and ((worth[hull[-1]] - worth[hull[-2]]) * (m - hull[-2])
                                  <= (worth[m] - worth[hull[-2]]) * (hull[-1] - hull[-2])):
            hull.pop()
        hull.append(m)
    height = np.interp(np.arange(top + 1), hull, [worth[m] for m in hull])
    cuts = [0, 1]
    while cuts[-1] < top:
        cuts.append(min(top, 2 * cuts[-1]))
    tiers: Tiers = []
    for lo, hi in pairwise(cuts):
        slope = float(height[hi] - height[lo]) / (hi - lo)
        if slope <= 1e-9:
            break
        gpus = first_gpus if lo == 0 else (hi - lo) * copy_gpus
        if tiers and abs(tiers[-1][0] - slope) <= 1e-12 * max(abs(slope), 1.0):
            tiers[-1] = (tiers[-1][0], tiers[-1][1] + gpus)
        else:
            tiers.append((slope, gpus))
    return tiers


def tiered_lp(per_gpu: FloatArray, steps: FloatArray, cluster: Cluster, caps: FloatArray,
              tiers: Sequence[Tiers]) -> tuple[float, FloatArray]:
    """(T, rel) of the forking LP whose jobs' copies are worth ``tiers`` (module docstring); ``per_gpu[j, r]``:
    the best steps per GPU-second of one of job j's copies on type r, ``caps[j, r]``: the most GPUs its
    copies hold there at once (``bounds.copy_limits``)."""
    m, n = per_gpu.shape
    if m == 0:
        return 0.0, np.zeros((0, n))
    if np.any(per_gpu.max(axis=1) <= 0):
        raise InfeasibleError("a job has zero throughput on every GPU type of the cluster: no finite TTD bound")
    cap = np.array([cluster.count(t) for t in cluster.gpu_types], dtype=float)
    cols = [(j, r, t) for j in range(m) for r in range(n) if per_gpu[j, r] > 0 for t in range(len(tiers[j]))]
    nv = len(cols) + 1
    rows: list[int] = []
    idx: list[int] = []
    vals: list[float] = []
    for v, (j, r, t) in enumerate(cols):
        rows += [j, m + r]
        idx += [v, v]
        vals += [-tiers[j][t][0] * per_gpu[j, r], 1.0]
    rows += [m + r for r in range(n)]
    idx += [nv - 1] * n
    vals += list(-cap)
    extra = _cap_rows(cols, caps, cap, tiers, m + n)
    for row, members, bound in extra:
        rows += [row] * (len(members) + 1)
        idx += [*members, nv - 1]
        vals += [1.0] * len(members) + [-bound]
    nrows = m + n + len(extra)
    a_ub = sparse.csr_matrix((vals, (rows, idx)), shape=(nrows, nv))
    b = np.concatenate([-np.asarray(steps, dtype=float), np.zeros(nrows - m)])
    c = np.zeros(nv)
    c[-1] = 1.0
    res = linprog(c, A_ub=a_ub, b_ub=b, bounds=[(0, None)] * nv, method="highs")
    if res.status != 0:
        raise InfeasibleError(f"forking LP failed: {res.message}")
    return float(res.x[-1]), _rel(per_gpu, tiers, -np.asarray(res.ineqlin.marginals), extra, cols)


def _cap_rows(cols: list[tuple[int, int, int]], caps: FloatArray, cap: FloatArray, tiers: Sequence[Tiers],
              first: int) -> list[tuple[int, list[int], float]]:
    """(row, columns, GPUs) of each binding-able cap row from row ``first`` on: per (job, type) where its cap
    is below the type's GPUs, then per (job, tier) where the tier holds fewer GPUs than the job's caps allow."""
    by_type: dict[tuple[int, int], list[int]] = {}
    by_tier: dict[tuple[int, int], list[int]] = {}
    for v, (j, r, t) in enumerate(cols):
        by_type.setdefault((j, r), []).append(v)
        by_tier.setdefault((j, t), []).append(v)
    out: list[tuple[int, list[int], float]] = []
    reach = np.minimum(caps, cap[None, :]).sum(axis=1)
    for (j, r), members in by_type.items():
        if caps[j, r] < cap[r]:
            out.append((first + len(out), members, float(caps[j, r])))
    for (j, t), members in by_tier.items():
        if tiers[j][t][1] < reach[j]:
            out.append((first + len(out), members, float(tiers[j][t][1])))
    return out


def _rel(per_gpu: FloatArray, tiers: Sequence[Tiers], marg: FloatArray,
         extra: list[tuple[int, list[int], float]], cols: list[tuple[int, int, int]]) -> FloatArray:
    """rel[j, r] from the LP's duals (``marg``: minus HiGHS's marginals, one per row)."""
    m, n = per_gpu.shape
    price = np.zeros(len(cols))  # each column's GPU-second price: its type's, its type cap's and its tier's
    for v, (_j, r, _t) in enumerate(cols):
        price[v] = marg[m + r]
    for row, members, _bound in extra:
        price[members] += marg[row]
    gain = np.array([marg[j] * tiers[j][t][0] * per_gpu[j, r] for j, r, t in cols])
    scale = max(float(price.max(initial=0.0)), float(gain.max(initial=0.0)), 1e-300)
    fit = np.where(price > 1e-9 * scale, gain / np.maximum(price, 1e-300), 1.0)
    rel = np.zeros((m, n))
    for v, (j, r, _t) in enumerate(cols):
        rel[j, r] = max(rel[j, r], min(float(fit[v]), 1.0))
    return rel
