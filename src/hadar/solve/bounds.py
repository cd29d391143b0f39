"""The min-time LPs shared by the policies (HadarE's pace guard and LP fit) and the limits in
``hadar.metrics.bound``: the least time T in which fractional GPU-time serves every job's steps,
per-type capacities, optional per-job caps and arrival segments; solved with scipy's HiGHS."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from hadar.arrays import FloatArray
from hadar.errors import InfeasibleError
from hadar.model.cluster import Cluster
from hadar.model.throughput import ThroughputTable


class JobKind(Protocol):
    """What ``copy_limits`` reads of a job: a submitted ``Job`` or a ``JobView`` of the scheduler's state."""

    @property
    def job_type(self) -> str: ...

    @property
    def scale_factor(self) -> int: ...


def copy_limits(jobs: Sequence[JobKind], cluster: Cluster, table: ThroughputTable) -> tuple[FloatArray, FloatArray]:
    """Per (job, type): the best steps per GPU-second of one copy, and the most GPUs its copies hold at once."""
    types = cluster.gpu_types
    sizes = {t: [cluster.nodes[n].gpus for n in cluster.nodes_of_type(t)] for t in types}
    per_gpu = np.zeros((len(jobs), len(types)))
    caps = np.zeros((len(jobs), len(types)))
    for j, job in enumerate(jobs):
        for r, t in enumerate(types):
            top = min(job.scale_factor, max(sizes[t], default=0))
            per_gpu[j, r] = max((table.rate_on(job.job_type, k, t) / k for k in range(1, top + 1)), default=0.0)
            caps[j, r] = sum(min(job.scale_factor, g) for g in sizes[t])
    return per_gpu, caps


def _min_time_lp(per_gpu: FloatArray, steps: FloatArray, cluster: Cluster,
                 arrivals: FloatArray | None = None) -> float:
    return min_time_lp(per_gpu, steps, cluster, arrivals)[0]


def min_time_lp(per_gpu: FloatArray, steps: FloatArray, cluster: Cluster,
                arrivals: FloatArray | None = None, *, job_caps: FloatArray | None = None,
                max_segments: int | None = None) -> tuple[float, FloatArray]:
    """min T over GPU-seconds y[j, r, segment]; segments split time at the arrivals (if given).

    Returns T and the capacity duals summed over segments: the value of one
    GPU-second of each type at the optimum (the LP's prices).

    Segment k spans [a_k, a_{k+1}) (the last one [a_K, first + T)); a job may
    use segment k only if it arrived by a_k. Capacity of segment k on type r
    is C_r x its length; the last segment's length is T - (a_K - first).
    ``job_caps[j, r]`` (optional): GPUs of type r job j may hold at once
    (only caps below C_r add rows). ``max_segments``: group the arrivals
    into at most that many segments, each job allowed from the start of its
    group (a relaxation: the result stays a lower bound).
    """
    m, n = per_gpu.shape
    if m == 0:
        return 0.0, np.zeros(n)
    res, seg, _ = _solve_min_time(per_gpu, steps, cluster, arrivals, job_caps, max_segments)
    duals = -np.asarray(res.ineqlin.marginals)[m:m + seg * n].reshape(seg, n).sum(axis=0)
    return float(res.x[-1]), duals


def lp_efficiency(per_gpu: FloatArray, steps: FloatArray, cluster: Cluster,
                  job_caps: FloatArray | None = None) -> tuple[float, FloatArray]:
    """The min-time LP's T for ``steps`` (all jobs present now) and how well each (job, type) pair fits it.

    ``rel[j, r] = mu_j x rate_jr / (p_r + q_jr)`` capped at 1, from the
    min-time LP's duals: ``mu_j`` of job j's demand, ``p_r`` of type r's
    capacity, ``q_jr`` of j's cap on r. 1 on every type the optimum uses
    for j (zero reduced cost) and on types that cost nothing; below 1 by
    how much j would waste a GPU-second of r; 0 where j cannot run.
    """
    m, n = per_gpu.shape
    if m == 0:
        return 0.0, np.zeros((0, n))
    res, _, cap_rows = _solve_min_time(per_gpu, steps, cluster, None, job_caps, None)
    marg = -np.asarray(res.ineqlin.marginals)
    cost = np.tile(marg[m:m + n], (m, 1))
    for j, r, row in cap_rows:
        cost[j, r] += marg[row]
    gain = marg[:m, None] * per_gpu
    scale = max(float(cost.max()), float(gain.max()), 1e-300)
    rel = np.where(cost > 1e-9 * scale, gain / np.maximum(cost, 1e-300), 1.0)
    return float(res.x[-1]), np.where(per_gpu > 0, np.minimum(rel, 1.0), 0.0)


def _solve_min_time(per_gpu: FloatArray, steps: FloatArray, cluster: Cluster, arrivals: FloatArray | None,
                    job_caps: FloatArray | None, max_segments: int | None
                    ) -> tuple[Any, int, list[tuple[int, int, int]]]:
    """Build and solve min_time_lp's program: (scipy result, segments, (job, type, row) of each cap row)."""
    m, n = per_gpu.shape
    if np.any(per_gpu.max(axis=1) <= 0):
        raise InfeasibleError("a job has zero throughput on every GPU type of the cluster: no finite TTD bound")
    cap = np.array([cluster.count(t) for t in cluster.gpu_types], dtype=float)
    if arrivals is None:
        arrivals = np.zeros(m)
    first = float(arrivals.min())
    points = np.unique(arrivals - first)  # segment starts, relative to the first arrival
    if max_segments is not None and len(points) > max_segments:
        points = points[np.unique(np.linspace(0, len(points) - 1, max_segments).astype(int))]
    seg = len(points)
    # variable layout: y[j, r, k] for k >= segment of j's arrival, then T (last)
    cols: list[tuple[int, int, int]] = []
    for j in range(m):
        k0 = int(np.searchsorted(points, arrivals[j] - first, side="right")) - 1
        for r in range(n):
            if per_gpu[j, r] > 0:
                cols.extend((j, r, k) for k in range(k0, seg))
    nv = len(cols) + 1
    rows, cidx, vals, b = _demand_and_capacity_rows(per_gpu, steps, cap, points, cols)
    cap_rows: list[tuple[int, int, int]] = []
    if job_caps is not None:
        _cap_rows(cols, job_caps, cap, points, m + seg * n, nv, (rows, cidx, vals, b), cap_rows)
    a_ub = sparse.csr_matrix((vals, (rows, cidx)), shape=(m + seg * n + len(cap_rows), nv))
    c = np.zeros(nv)
    c[-1] = 1.0
    res = linprog(c, A_ub=a_ub, b_ub=np.array(b), bounds=[(0, None)] * nv, method="highs")
    if res.status != 0:
        raise InfeasibleError(f"TTD bound LP failed: {res.message}")
    return res, seg, cap_rows


def _demand_and_capacity_rows(per_gpu: FloatArray, steps: FloatArray, cap: FloatArray, points: FloatArray,
                              cols: list[tuple[int, int, int]]
                              ) -> tuple[list[int], list[int], list[float], list[float]]:
    """Sparse rows (row ids, column ids, values, right-hand sides): demand rows 0..m-1, capacity rows
    m + k*n + r; T is the last column."""
    m, n = per_gpu.shape
    seg, nv = len(points), len(cols) + 1
    rows, cidx, vals = [], [], []
    b: list[float] = []
    for v, (j, r, _k) in enumerate(cols):  # demand: -sum_r y * rate <= -N_j
        rows.append(j)
        cidx.append(v)
        vals.append(-per_gpu[j, r])
    b.extend(-steps)
    lengths = np.diff(points)
    for v, (_j, r, k) in enumerate(cols):  # capacity rows m + k*n + r
        rows.append(m + k * n + r)
        cidx.append(v)
        vals.append(1.0)
    for k in range(seg):
        for r in range(n):
            if k < seg - 1:
                b.append(cap[r] * lengths[k])
            else:  # last segment: sum y - C_r * T <= -C_r * a_K
                rows.append(m + k * n + r)
                cidx.append(nv - 1)
                vals.append(-cap[r])
                b.append(-cap[r] * points[-1])
    return rows, cidx, vals, b


def _cap_rows(cols: list[tuple[int, int, int]], job_caps: FloatArray, cap: FloatArray, points: FloatArray,
              nrows: int, nv: int, out: tuple[list[int], list[int], list[float], list[float]],
              cap_rows: list[tuple[int, int, int]]) -> None:
    """Rows y[j, r, k] <= job_caps[j, r] x segment length (the last: x (T - a_K)), appended to ``out``
    (row ids, column ids, values, right-hand sides) from row ``nrows`` on; ``cap_rows`` gets (j, r, row)."""
    rows, cidx, vals, b = out
    lengths = np.diff(points)
    last = len(points) - 1
    for v, (j, r, k) in enumerate(cols):
        if job_caps[j, r] >= cap[r]:
            continue
        cap_rows.append((j, r, nrows))
        rows.append(nrows)
        cidx.append(v)
        vals.append(1.0)
        if k < last:
            b.append(job_caps[j, r] * lengths[k])
        else:
            rows.append(nrows)
            cidx.append(nv - 1)
            vals.append(-job_caps[j, r])
            b.append(-job_caps[j, r] * points[-1])
        nrows += 1
