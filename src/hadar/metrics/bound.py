"""Physical limits of a workload on a cluster (spec/hadar.md section 5).

No scheduler can beat these; every summary reports where a run stands
against them:

- **JCT bound**: mean over jobs of the isolated time on the job's best GPU
  type, ``N_j / max_r X[type_j, W_j, r]`` (no non-forking scheduler can
  finish a job sooner). ``stretch = avg JCT / JCT bound`` (1.0 is perfect).
- **TTD bound** (no forking): the larger of
  (a) the LP bound: the least T such that fractional GPU-time serves every
  job's steps, a GPU-second of type r earning ``X[type, W, r] / W`` steps
  for the job, within ``capacity_r * T`` GPU-seconds per type; and
  (b) ``max_j (arrival_j + isolated best-type time_j) - first arrival``.
- **TTD bound with forking** (HadarE): the LP where a GPU-second of type r
  earns ``X[type, 1, r]`` steps (a one-GPU copy) and no job is served
  before it arrives (time split at the arrivals).

Times are seconds measured from the first arrival, like the summary's
``makespan_s``. The LPs are solved with scipy's HiGHS.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from hadar.errors import InfeasibleError
from hadar.model.cluster import Cluster
from hadar.model.job import Job
from hadar.model.throughput import ThroughputTable


@dataclass(frozen=True, slots=True)
class Bounds:
    """``jct_bound_s``: mean best-type isolated time; ``ttd_bound_s`` = max(LP, arrival-limited)."""

    jct_bound_s: float
    ttd_bound_s: float
    ttd_lp_s: float
    ttd_arrival_s: float

    def as_dict(self) -> dict[str, float]:
        return {"jct_bound_s": self.jct_bound_s, "ttd_bound_s": self.ttd_bound_s,
                "ttd_lp_bound_s": self.ttd_lp_s, "ttd_arrival_bound_s": self.ttd_arrival_s}


def _rates(jobs: Sequence[Job], cluster: Cluster, table: ThroughputTable, k_of: str = "W") -> np.ndarray:
    """m x n whole-job steps/s on ``W`` (or 1) GPUs of each cluster type."""
    types = cluster.gpu_types
    return np.array([[table.get(j.job_type, j.scale_factor if k_of == "W" else 1, t) for t in types]
                     for j in jobs], dtype=float).reshape(len(jobs), len(types))


def isolated_best_s(jobs: Sequence[Job], cluster: Cluster, table: ThroughputTable) -> np.ndarray:
    """Per job: total steps / best whole-job rate over the cluster's types (inf if none)."""
    x = _rates(jobs, cluster, table)
    best = x.max(axis=1) if len(jobs) else np.zeros(0)
    steps = np.array([j.total_steps for j in jobs], dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(best > 0, steps / np.where(best > 0, best, 1.0), np.inf)


def jct_bound_s(jobs: Sequence[Job], cluster: Cluster, table: ThroughputTable) -> float:
    """Mean over jobs of the isolated best-type time."""
    if not jobs:
        return 0.0
    return float(np.mean(isolated_best_s(jobs, cluster, table)))


def ttd_lp_bound_s(jobs: Sequence[Job], cluster: Cluster, table: ThroughputTable) -> float:
    """Least T with every job's steps served by GPU-time within capacity x T (arrivals ignored).

    Variables y_jr (GPU-seconds of type r for job j) and T; minimize T s.t.
    sum_r y_jr * X[j,W,r]/W >= N_j and sum_j y_jr <= C_r * T.
    """
    per_gpu = _rates(jobs, cluster, table) / np.array([j.scale_factor for j in jobs], dtype=float)[:, None] \
        if jobs else np.zeros((0, 0))
    return _min_time_lp(per_gpu, np.array([j.total_steps for j in jobs], dtype=float), cluster)


def ttd_forking_bound_s(jobs: Sequence[Job], cluster: Cluster, table: ThroughputTable) -> float:
    """TTD limit with forking: GPU-second of type r earns X[type,1,r]; no service before arrival."""
    if not jobs:
        return 0.0
    return _min_time_lp(_rates(jobs, cluster, table, k_of="1"), np.array([j.total_steps for j in jobs], dtype=float),
                        cluster, arrivals=np.array([j.arrival_s for j in jobs], dtype=float))


def _min_time_lp(per_gpu: np.ndarray, steps: np.ndarray, cluster: Cluster,
                 arrivals: np.ndarray | None = None) -> float:
    return min_time_lp(per_gpu, steps, cluster, arrivals)[0]


def min_time_lp(per_gpu: np.ndarray, steps: np.ndarray, cluster: Cluster,
                arrivals: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """min T over GPU-seconds y[j, r, segment]; segments split time at the arrivals (if given).

    Returns T and the capacity duals summed over segments: the value of one
    GPU-second of each type at the optimum (the LP's prices).

    Segment k spans [a_k, a_{k+1}) (the last one [a_K, first + T)); a job may
    use segment k only if it arrived by a_k. Capacity of segment k on type r
    is C_r x its length; the last segment's length is T - (a_K - first).
    """
    m, n = per_gpu.shape
    if m == 0:
        return 0.0, np.zeros(n)
    if np.any(per_gpu.max(axis=1) <= 0):
        raise InfeasibleError("a job has zero throughput on every GPU type of the cluster: no finite TTD bound")
    cap = np.array([cluster.count(t) for t in cluster.gpu_types], dtype=float)
    if arrivals is None:
        arrivals = np.zeros(m)
    first = float(arrivals.min())
    points = np.unique(arrivals - first)  # segment starts, relative to the first arrival
    seg = len(points)
    # variable layout: y[j, r, k] for k >= segment of j's arrival, then T (last)
    cols: list[tuple[int, int, int]] = []
    for j in range(m):
        k0 = int(np.searchsorted(points, arrivals[j] - first))
        for r in range(n):
            if per_gpu[j, r] > 0:
                cols.extend((j, r, k) for k in range(k0, seg))
    nv = len(cols) + 1
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
    a_ub = sparse.csr_matrix((vals, (rows, cidx)), shape=(m + seg * n, nv))
    c = np.zeros(nv)
    c[-1] = 1.0
    res = linprog(c, A_ub=a_ub, b_ub=np.array(b), bounds=[(0, None)] * nv, method="highs")
    if res.status != 0:
        raise InfeasibleError(f"TTD bound LP failed: {res.message}")
    duals = -np.asarray(res.ineqlin.marginals)[m:].reshape(seg, n).sum(axis=0)
    return float(res.x[-1]), duals


def compute_bounds(jobs: Sequence[Job], cluster: Cluster, table: ThroughputTable,
                   start_s: float | None = None) -> Bounds:
    """JCT and (non-forking) TTD bounds of ``jobs`` on ``cluster``.

    TTD is measured from ``start_s`` (default: the first arrival among
    ``jobs``); a windowed run passes the run's first arrival.
    """
    if not jobs:
        return Bounds(0.0, 0.0, 0.0, 0.0)
    iso = isolated_best_s(jobs, cluster, table)
    arrivals = np.array([j.arrival_s for j in jobs], dtype=float)
    start = float(arrivals.min()) if start_s is None else float(start_s)
    arrival_limited = float(np.max(arrivals + iso) - start)
    lp = ttd_lp_bound_s(jobs, cluster, table)
    return Bounds(float(np.mean(iso)), max(lp, arrival_limited), lp, arrival_limited)


def bound_summary(jobs: Sequence[Job], cluster: Cluster, table: ThroughputTable, *, avg_jct_s: float | None,
                  makespan_s: float | None, start_s: float | None = None) -> dict[str, float | None]:
    """The summary keys: both limits and where a run stands against them.

    ``stretch`` = avg JCT / JCT bound; ``ttd_over_bound`` = TTD / TTD bound.
    """
    b = compute_bounds(jobs, cluster, table, start_s)
    out: dict[str, float | None] = dict(b.as_dict())
    out["stretch"] = avg_jct_s / b.jct_bound_s if avg_jct_s is not None and b.jct_bound_s > 0 else None
    out["ttd_over_bound"] = makespan_s / b.ttd_bound_s if makespan_s is not None and b.ttd_bound_s > 0 else None
    return out
