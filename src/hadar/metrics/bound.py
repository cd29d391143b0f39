"""Physical limits of a workload on a cluster (spec/hadar.md section 5).

No scheduler can beat these; every summary reports where a run stands
against them:

- **JCT bound**: mean over jobs of the isolated time on the job's best GPU
  type, ``N_j / max_r X[type_j, W_j, r]`` (no non-forking scheduler can
  finish a job sooner). ``stretch = avg JCT / JCT bound`` (1.0 is perfect).
  An elastic job counts at its best count (per GPU, for the TTD LP) of its
  range; a job with an efficiency profile, as the table steps it needs.
- **TTD bound** (no forking): the larger of
  (a) the LP bound: the least T such that fractional GPU-time serves every
  job's steps, a GPU-second of type r earning ``X[type, W, r] / W`` steps
  for the job, within ``capacity_r * T`` GPU-seconds per type; and
  (b) ``max_j (arrival_j + isolated best-type time_j) - first arrival``.
- **TTD bound with forking** (HadarE): the LP where a GPU-second of type r
  earns ``X[type, 1, r]`` steps (a one-GPU copy; on nodes of several GPUs
  the best per-GPU rate of any copy that fits, ``max_k X[type, k, r] / k``
  for k <= min(W, node GPUs), since a few table entries are superlinear),
  a job holds at most ``min(W, g_n)`` GPUs of node n at once (one copy per
  node) and no job is served before it arrives (time split at the arrivals).

Times are seconds measured from the first arrival, like the summary's
``makespan_s``. The LPs are solved with scipy's HiGHS.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from hadar.arrays import FloatArray, IntArray
from hadar.errors import InfeasibleError
from hadar.model.cluster import Cluster
from hadar.model.job import Job
from hadar.model.throughput import ThroughputTable
from hadar.solve.bounds import copy_limits, min_time_lp


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


def _rates(jobs: Sequence[Job], cluster: Cluster, table: ThroughputTable, per_gpu: bool = False) -> FloatArray:
    """m x n whole-job steps/s on ``W`` GPUs of each cluster type (``per_gpu``: divided by ``W``); an
    elastic job (``gpu_range``) at its best count of the range that the type has GPUs for."""
    types = cluster.gpu_types
    out = np.array([[table.get(j.job_type, j.scale_factor, t) for t in types]
                    for j in jobs], dtype=float).reshape(len(jobs), len(types))
    if per_gpu:
        out = out / np.array([j.scale_factor for j in jobs], dtype=float)[:, None] if jobs else out
    for i, j in enumerate(jobs):
        if j.gpu_range is not None:
            for r, t in enumerate(types):
                ks = range(j.gpu_range[0], min(j.gpu_range[1], cluster.count(t)) + 1)
                out[i, r] = max((table.rate_on(j.job_type, k, t) / (k if per_gpu else 1) for k in ks),
                                default=out[i, r])
    return out


def isolated_durations_s(jobs: Sequence[Job], cluster: Cluster, table: ThroughputTable) -> FloatArray:
    """m x n: seconds each job takes alone on ``W`` GPUs of each cluster type (inf where it cannot run)."""
    rates = _rates(jobs, cluster, table)
    steps = np.array([j.table_steps for j in jobs], dtype=float)
    return np.where(rates > 0, steps[:, None] / np.where(rates > 0, rates, 1.0), np.inf)


def isolated_best_s(jobs: Sequence[Job], cluster: Cluster, table: ThroughputTable) -> FloatArray:
    """Per job: total steps / best whole-job rate over the cluster's types (inf if none)."""
    return isolated_durations_s(jobs, cluster, table).min(axis=1)


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
    per_gpu = _rates(jobs, cluster, table, per_gpu=True) if jobs else np.zeros((0, 0))
    return min_time_lp(per_gpu, np.array([j.table_steps for j in jobs], dtype=float), cluster)[0]


def ttd_forking_bound_s(jobs: Sequence[Job], cluster: Cluster, table: ThroughputTable, *,
                        max_segments: int | None = 128) -> float:
    """TTD limit with forking (from the first arrival among ``jobs``).

    A GPU-second of type r earns the best per-GPU rate of a copy that fits
    a node of type r (``X[type,1,r]`` on one-GPU nodes); job j holds at most
    ``sum over nodes of type r of min(W_j, g_n)`` GPUs of type r at once;
    no service before arrival. More than ``max_segments`` distinct arrivals
    are grouped (a job may then use its group from the group's start: a
    weaker, still valid limit).
    """
    if not jobs:
        return 0.0
    per_gpu, caps = copy_limits(jobs, cluster, table)
    return min_time_lp(per_gpu, np.array([j.table_steps for j in jobs], dtype=float), cluster,
                       np.array([j.arrival_s for j in jobs], dtype=float), job_caps=caps,
                       max_segments=max_segments)[0]


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
                  makespan_s: float | None, start_s: float | None = None,
                  forking: bool = False) -> dict[str, float | None]:
    """The summary keys: both limits and where a run stands against them.

    ``stretch`` = avg JCT / JCT bound; ``ttd_over_bound`` = TTD / TTD bound.
    With ``forking`` (HadarE) the summary also carries
    ``ttd_forking_bound_s`` and ``ttd_over_bound`` is taken against it
    (forking can beat the non-forking limit).
    """
    b = compute_bounds(jobs, cluster, table, start_s)
    out: dict[str, float | None] = dict(b.as_dict())
    out["stretch"] = avg_jct_s / b.jct_bound_s if avg_jct_s is not None and b.jct_bound_s > 0 else None
    ttd_bound = b.ttd_bound_s
    if forking and jobs:
        first = min(j.arrival_s for j in jobs)
        ttd_bound = ttd_forking_bound_s(jobs, cluster, table) + first - (first if start_s is None else start_s)
        out["ttd_forking_bound_s"] = ttd_bound
    out["ttd_over_bound"] = makespan_s / ttd_bound if makespan_s is not None and ttd_bound > 0 else None
    return out


def jct_floor_s(jobs: Sequence[Job], cluster: Cluster, table: ThroughputTable, *, slot_s: float = 360.0,
                tail: bool = True) -> float:
    """A lower bound on the avg JCT any non-forking scheduler reaches on ``jobs`` together (the JCT
    bound counts each job alone; this one counts the contention for GPUs).

    A fluid relaxation, time-indexed in slots of ``slot_s`` and a last slot
    without end: ``f[j, r, t]`` is the share of job j done on type r in slot
    t. Running on W GPUs of r, j finishes in ``d_jr = N_j / X[type, W, r]``;
    in slot t type r serves at most ``C_r x slot`` GPU-seconds (``sum_j f
    d_jr W_j``), j runs at most the part of the slot after its arrival
    (``sum_r f d_jr``), every job is done (``sum f = 1``). Any schedule,
    preemptive and mixing types as it likes, is such a plan (a gang spanning
    types at its slowest type's pace does no more than its GPUs would on
    their own types). Its completion obeys, with ``d_j`` the best-type time
    and ``s_jt`` the later of the slot's start and j's arrival:

    - ``C_j >= a_j + d_j``;
    - ``C_j >= M_j + d_j / 2``, where ``M_j`` is the mean time at which j's
      work is done (j works at most at its best rate, so its last ``d_j``
      before C_j hold at most all of it). The share ``w`` done in slot t is
      done no faster than in ``w d_j`` seconds from ``s_jt``, so
      ``M_j >= sum_t w (s_jt + w d_j / 2)``; the square enters through two
      tangents;
    - with ``tail`` (the default), for every slot t:
      ``C_j >= l_jt (1 - G_jt) + s_jt G_jt + B_jt`` with
      ``l_jt = min(s_jt, a_j + d_j)``, where ``G_jt`` is the share of j
      done from slot t on and ``B_jt`` the time j runs from then on. A job
      not done by ``s_jt`` ends no sooner than ``s_jt + B_jt``, which is at
      least the right side (``s_jt >= l_jt``); a done one has ``G = B = 0``
      and ``C_j >= a_j + d_j >= l_jt``. This is what stops the plan from
      spreading a job thin over a slow type, or parking part of its work
      early, at the price of the mean alone.

    The LP minimizes the mean of ``C_j - a_j``; finer slots tighten it (and
    cost more; the tail makes it several times larger).
    """
    if not jobs:
        return 0.0
    dur = isolated_durations_s(jobs, cluster, table)
    if np.any(np.isinf(dur.min(axis=1))):
        raise InfeasibleError("a job has zero throughput on every GPU type of the cluster: no finite JCT floor")
    if slot_s <= 0:
        raise ValueError(f"slot length must be positive, got {slot_s}")
    grid = _Grid.build(jobs, cluster, table, dur, slot_s)
    rows = _Rows()
    _floor_rows(grid, rows)
    if tail:
        _tail_rows(grid, rows)
    return _solve_floor(grid, rows, grid.k + grid.m + (3 if tail else 1) * grid.cells)


def _solve_floor(grid: _Grid, rows: _Rows, width: int) -> float:
    """Minimize the sum of completions over the rows built; the mean JCT (from each job's arrival)."""
    rr, cc, vals, b_ub = rows.arrays()
    keep = np.isfinite(b_ub)
    a_ub = sparse.csr_matrix((vals, (rr, cc)), shape=(rows.top, width))[keep]
    a_eq = sparse.csr_matrix((np.ones(grid.k), (grid.jj, np.arange(grid.k))), shape=(grid.m, width))
    c = np.zeros(width)
    c[grid.c_col:grid.c_col + grid.m] = 1.0
    bounds = np.column_stack([np.zeros(width), np.full(width, np.inf)])
    bounds[grid.c_col:grid.c_col + grid.m, 0] = grid.arrival + grid.best
    res = linprog(c, A_ub=a_ub, b_ub=b_ub[keep], A_eq=a_eq, b_eq=np.ones(grid.m), bounds=bounds, method="highs")
    if res.status != 0:
        raise InfeasibleError(f"JCT floor LP failed: {res.message}")
    return float(res.fun - grid.arrival.sum()) / grid.m


@dataclass(frozen=True, slots=True)
class _Grid:
    """The index sets of ``jct_floor_s``'s relaxation.

    Slots ``0..slots-1`` start at ``start[t]`` (the last one has no end); a *cell* is a (job, slot)
    after the job's arrival (``cj``, ``ct``: job-major, slots ascending; ``cell[j, t]``: its index or
    -1); an *f column* is a (job, type, slot) with the job runnable on the type (``jj``, ``rr``,
    ``tt``; ``d``: the job's isolated time on the type; ``fc``: its cell). Columns of the LP: f (k),
    C (m), q (cells), then with the tail B (cells) and G (cells).
    """

    slot_s: float
    scale: FloatArray  # (m,) GPUs per job
    arrival: FloatArray  # (m,) seconds after the first arrival
    best: FloatArray  # (m,) best-type isolated time
    cap: FloatArray  # (n,) GPUs per type
    timed: int  # slots with an end
    slots: int
    room: FloatArray  # (m, slots) seconds job j may run in slot t (inf in the last slot)
    at: FloatArray  # (m, slots) s_jt: the later of the slot's start and j's arrival
    cj: IntArray
    ct: IntArray
    cell: IntArray
    jj: IntArray
    rr: IntArray
    tt: IntArray
    d: FloatArray
    fc: IntArray

    @classmethod
    def build(cls, jobs: Sequence[Job], cluster: Cluster, table: ThroughputTable, dur: FloatArray,
              slot_s: float) -> _Grid:
        scale = np.array([j.scale_factor for j in jobs], dtype=float)
        arrival = np.array([j.arrival_s for j in jobs], dtype=float)
        arrival -= arrival.min()
        best = dur.min(axis=1)
        cap = np.array([cluster.count(t) for t in cluster.gpu_types], dtype=float)
        m = dur.shape[0]
        # timed slots past the moment everything could be done, then one open slot (any schedule fits)
        end = 1.25 * max(float((arrival + best).max()), ttd_lp_bound_s(jobs, cluster, table))
        timed = int(np.ceil(end / slot_s))
        slots = timed + 1
        start = np.arange(slots) * slot_s
        room = np.clip(start[None, :] + slot_s - np.maximum(start[None, :], arrival[:, None]), 0.0, slot_s)
        room[:, -1] = np.inf
        at = np.maximum(start[None, :], arrival[:, None])  # s_jt
        cj, ct = np.nonzero(room > 0)  # cells (job, slot) after the job's arrival, job-major, slots ascending
        cell = np.full((m, slots), -1)
        cell[cj, ct] = np.arange(cj.size)
        jj, rr, tt = np.nonzero(np.isfinite(dur)[:, :, None] & (room > 0)[:, None, :])
        return cls(slot_s, scale, arrival, best, cap, timed, slots, room, at, cj, ct, cell, jj, rr, tt,
                   dur[jj, rr], cell[jj, tt])

    @property
    def m(self) -> int:
        return int(self.scale.size)

    @property
    def n(self) -> int:
        return int(self.cap.size)

    @property
    def k(self) -> int:
        return int(self.jj.size)

    @property
    def cells(self) -> int:
        return int(self.cj.size)

    @property
    def c_col(self) -> int:
        return self.k

    @property
    def q_col(self) -> int:
        return self.k + self.m

    @property
    def b_col(self) -> int:
        return self.k + self.m + self.cells

    @property
    def g_col(self) -> int:
        return self.k + self.m + 2 * self.cells


class _Rows:
    """Sparse ``A_ub x <= b_ub`` rows, added block by block."""

    def __init__(self) -> None:
        self.parts: list[tuple[IntArray, IntArray, FloatArray]] = []
        self.rhs: list[FloatArray] = []
        self.top = 0

    def block(self, rows: int, entries: list[tuple[IntArray, IntArray, FloatArray]], b: FloatArray) -> None:
        """``rows`` new rows; ``entries``: (row within the block, column, value) arrays; ``b``: their bounds."""
        self.parts.extend((self.top + r, c, v) for r, c, v in entries)
        self.rhs.append(b)
        self.top += rows

    def arrays(self) -> tuple[IntArray, IntArray, FloatArray, FloatArray]:
        """(row ids, column ids, values, right-hand sides) of every block so far."""
        rows, cols, vals = (np.concatenate(x) for x in zip(*self.parts, strict=True))
        return rows, cols, vals, np.concatenate(self.rhs)


def _floor_rows(g: _Grid, rows: _Rows) -> None:
    """Capacity per type and slot, job time per cell, the mean-time bound and its two tangents."""
    k, m, cells, timed = g.k, g.m, g.cells, g.timed
    cj, ct, fc = g.cj, g.ct, g.fc
    f_col = np.arange(k)
    timed_f = g.tt < timed
    rows.block(g.n * timed, [(g.rr[timed_f] * timed + g.tt[timed_f], f_col[timed_f], (g.d * g.scale[g.jj])[timed_f])],
               np.repeat(g.cap, timed) * g.slot_s)  # capacity
    timed_c = ct < timed
    rows.block(cells, [(fc[timed_f], f_col[timed_f], g.d[timed_f])],
               np.where(timed_c, g.room[cj, ct], np.inf))  # job time
    rows.block(m, [(g.jj, f_col, g.at[g.jj, g.tt]), (cj, g.q_col + np.arange(cells), np.ones(cells)),
                   (np.arange(m), np.full(m, g.c_col) + np.arange(m), -np.ones(m))], -g.best / 2)  # mean time
    for frac in (1.0, 0.5):  # q >= tangents of w^2 d_j / 2 (w: the share done in the slot)
        w0 = np.minimum(1.0, frac * g.room[cj, ct] / g.best[cj])
        rows.block(cells, [(fc, f_col, (w0 * g.best[cj])[fc]),
                           (np.arange(cells), g.q_col + np.arange(cells), -np.ones(cells))],
                   w0 ** 2 * g.best[cj] / 2)


def _tail_rows(g: _Grid, rows: _Rows) -> None:
    """B and G (the time run and the share done from each slot on) and ``C_j >= l (1 - G) + s G + B``."""
    k, cells, slots = g.k, g.cells, g.slots
    cj, ct, fc = g.cj, g.ct, g.fc
    f_col = np.arange(k)
    later = g.cell[cj, np.minimum(ct + 1, slots - 1)]
    has = ct + 1 < slots
    for col0, per_f in ((g.b_col, g.d), (g.g_col, np.ones(k))):  # B_t >= this slot's + B_(t+1); G alike
        rows.block(cells, [(fc, f_col, per_f), (np.nonzero(has)[0], col0 + later[has], np.ones(int(has.sum()))),
                           (np.arange(cells), col0 + np.arange(cells), -np.ones(cells))], np.zeros(cells))
    low = np.minimum(g.at[cj, ct], (g.arrival + g.best)[cj])  # C_j >= low (1 - G) + s G + B
    rows.block(cells, [(np.arange(cells), g.g_col + np.arange(cells), g.at[cj, ct] - low),
                       (np.arange(cells), g.b_col + np.arange(cells), np.ones(cells)),
                       (np.arange(cells), g.c_col + cj, -np.ones(cells))], -low)
