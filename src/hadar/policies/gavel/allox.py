"""AlloX (Gavel's ``allox``): jobs matched to GPU time slots at least total completion time.

A GPU that runs several jobs one after the other delays every job after the
first by the first one's processing time: the job that runs ``k``-th from the
end of a GPU's queue contributes ``k`` times its processing time to the sum of
completion times. AlloX builds that assignment problem: rows are the waiting
jobs, columns are (GPU, position-from-the-end ``k``) slots, a cell costs
``k * p_ij + d_i`` where ``p_ij`` is the job's remaining processing time on the
GPU's type (remaining steps / throughput) and ``d_i`` the time it has waited
(the same for every column of a row: it does not change which matching is
optimal). A min-cost perfect matching of the jobs (scipy's
``linear_sum_assignment``) orders each GPU's queue; the job in the highest
position of a GPU starts there now and keeps that GPU's type (``x = 1``) until it
finishes: AlloX is non-preemptive, so the allocation is carried from one solve
to the next in ``Allocation.memo``. The other jobs get ``x = 0`` and wait for
the next solve (the round mechanism still lends them idle GPUs, as Gavel's
does).

``move_up`` (default; off under ``--gavel-compat``): before the matching, a
started job moves to a type where it runs faster if that type has enough
free GPUs (largest speed-up first, ties by job id), freeing its GPUs for the
matching. It is not a preemption: no job loses GPUs to another. Gavel gets
this effect from its round scan, which walks V100s first and hands a job an
idle faster GPU before it reaches the type its allocation names; hadar's
scan outside ``--gavel-compat`` serves positive shares first, so without
this a job matched to a K80 keeps it while faster GPUs sit idle (medium_test,
4:4:4: makespan 54,031 s without, 27,948 s with; docs/policies.md).

``alpha``: only the oldest ``max(alpha * waiting jobs, free GPUs)`` waiting jobs
take part in a solve (Gavel's ``allox_alpha=A``; 1 = every waiting job).

Multi-GPU jobs (Gavel's AlloX asserts that every job asks for one GPU): a job
of scale factor ``s`` is matched to one GPU slot like any other, its
processing time counted in GPU-seconds (``s`` x its time on ``s`` GPUs of the
type), so that it weighs what it keeps from others. When it heads a GPU's
queue it starts only if ``s`` GPUs of that type are free once the jobs placed
before it (GPUs in the matrix's order) are counted; otherwise it waits for the
next solve. A type with fewer GPUs in all than the job asks for is as
expensive for it as a type it cannot run on (throughput ``1e-10``, Gavel's
stand-in for 0). For 1-GPU jobs this is Gavel's algorithm exactly.

Cost: the matrix is ``jobs x (free GPUs x positions)``; positions run to the
number of jobs in the solve (Gavel's), capped so the matrix stays under
``_MAX_CELLS`` entries but never below ``ceil(jobs / free GPUs)`` (enough slots
for every job). Only very large queues reach the cap; it then limits how deep
each GPU's queue is modelled, which can change the matching from Gavel's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from scipy.optimize import linear_sum_assignment

from hadar.arrays import FloatArray, IntArray
from hadar.model.state import Allocation, JobView, SchedulerState
from hadar.policies.base import PolicyTraits
from hadar.policies.gavel.common import empty_allocation, tie_order
from hadar.policies.registry import register

_ZERO_RATE = 1e-10  # Gavel's stand-in for a throughput of 0
_MAX_CELLS = 4_000_000
MEMO_KEY = "allox"


def _held(state: SchedulerState) -> dict[int, str]:
    """Jobs still active that a previous solve started: job id -> its GPU type."""
    memo: Mapping[int, str] = state.memo.get(MEMO_KEY, {})
    active = set(state.job_ids)
    return {jid: t for jid, t in memo.items() if jid in active and t in state.gpu_types}


def _free_workers(state: SchedulerState, held: Mapping[int, str], order: IntArray) -> IntArray:
    """One entry per GPU not held by a started job: the index of its type, types in ``order``."""
    used = dict.fromkeys(state.gpu_types, 0)
    for job in state.jobs:
        if job.job_id in held:
            used[held[job.job_id]] += job.scale_factor
    caps = state.capacities()
    out = [np.full(max(0, int(caps[j]) - used[state.gpu_types[j]]), j) for j in order]
    return np.concatenate(out).astype(int) if out else np.zeros(0, dtype=int)


def _move_up(state: SchedulerState, held: dict[int, str]) -> dict[int, str]:
    """Started jobs moved to faster types whose GPUs are free, largest speed-up first (ties: job id)."""
    col = {t: j for j, t in enumerate(state.gpu_types)}
    jobs = {j.job_id: j for j in state.jobs if j.job_id in held}
    out = dict(held)
    free = {t: int(c) for t, c in zip(state.gpu_types, state.capacities(), strict=True)}
    for jid, t in out.items():
        free[t] -= jobs[jid].scale_factor
    while True:
        best: tuple[float, int, str] | None = None
        for jid in sorted(out):
            job, now = jobs[jid], job_rate(jobs[jid], col[out[jid]])
            for t in state.gpu_types:
                gain = job_rate(job, col[t]) / now if now > 0 else 0.0
                if free[t] >= job.scale_factor and gain > 1.0 and (best is None or gain > best[0]):
                    best = (gain, jid, t)
        if best is None:
            return out
        _, jid, t = best
        free[out[jid]] += jobs[jid].scale_factor
        free[t] -= jobs[jid].scale_factor
        out[jid] = t


def job_rate(job: JobView, col: int) -> float:
    """The job's whole-job steps/s on the type in column ``col``."""
    return float(job.throughputs[col])


def _matching(p: FloatArray, wait: FloatArray) -> list[list[tuple[int, int]]]:
    """Min-cost assignment of ``p``'s rows to (worker, position) slots: per worker, its jobs as
    (row, position) with the position counted from the front (0 starts now)."""
    m, n = p.shape
    positions = min(m, max(-(-m // n), _MAX_CELLS // (m * n)))  # at least enough slots for every job
    q = np.concatenate([p] + [k * p for k in range(2, positions + 1)], axis=1) + wait[:, None]
    rows, cols = linear_sum_assignment(q)
    per_worker: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
        per_worker[c % n].append((r, c // n))
    out = []
    for slots in per_worker:
        ranked = [(r, len(slots) - 1 - k) for r, k in slots]
        out.append(sorted(ranked, key=lambda s: s[1]))
    return out


@register("allox", "AlloX: min-cost matching of jobs to GPU time slots by processing time, non-preemptive (Gavel)")
class AlloX:
    """Gavel's ``AlloXPolicy`` (``allox``); multi-GPU jobs as in the module docstring."""

    TRAITS: ClassVar[PolicyTraits] = PolicyTraits()
    PARAMS: ClassVar[Mapping[str, str]] = {
        "alpha": "share of the waiting jobs (oldest first) matched at each solve; at least as many as free GPUs "
                 "(Gavel's `allox_alpha=A`)",
    }
    ADVANCED: ClassVar[Mapping[str, str]] = {
        "move_up": "at each solve, started jobs move to faster GPU types that are free before the matching "
                   "(`--gavel-compat` sets false: Gavel's round scan does such moves instead)",
    }
    GAVEL_COMPAT: ClassVar[Mapping[str, Any]] = {"move_up": False}
    name: ClassVar[str] = "allox"
    traits: ClassVar[PolicyTraits] = TRAITS

    def __init__(self, *, alpha: float = 1.0, move_up: bool = True) -> None:
        if not (isinstance(alpha, int | float) and 0.0 < alpha <= 1.0):
            raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
        self.alpha = float(alpha)
        self.move_up = bool(move_up)

    def allocate(self, state: SchedulerState) -> Allocation:
        if not state.jobs:
            return empty_allocation(state, memo={MEMO_KEY: {}})
        held = _held(state)
        if self.move_up:
            held = _move_up(state, held)
        order = tie_order(state)
        workers = _free_workers(state, held, order)
        waiting = sorted((j for j in state.jobs if j.job_id not in held),
                         key=lambda j: (-(state.now_s - j.arrival_s), j.job_id))
        waiting = waiting[: max(int(self.alpha * len(waiting)), workers.size)]
        started = dict(held)
        if waiting and workers.size:
            started.update(self._start(state, waiting, workers))
        col = {t: j for j, t in enumerate(state.gpu_types)}
        x = np.zeros((len(state.jobs), len(state.gpu_types)))
        for i, job in enumerate(state.jobs):
            if job.job_id in started:
                x[i, col[started[job.job_id]]] = 1.0
        return Allocation.for_state(state, x, memo={MEMO_KEY: dict(sorted(started.items()))})

    def _start(self, state: SchedulerState, waiting: list[JobView], workers: IntArray) -> dict[int, str]:
        """Match the waiting jobs to the free GPUs; the head of each GPU's queue starts if it fits."""
        caps = state.capacities()
        p = np.zeros((len(waiting), workers.size))
        for i, job in enumerate(waiting):
            for w, j in enumerate(workers.tolist()):
                rate = job.throughputs[j] if caps[j] >= job.scale_factor else 0.0
                p[i, w] = job.scale_factor * (job.remaining_steps / (rate if rate != 0.0 else _ZERO_RATE))
        wait = np.array([state.now_s - j.arrival_s for j in waiting])
        free = {j: int((workers == j).sum()) for j in set(workers.tolist())}
        out: dict[int, str] = {}
        for w, queue in enumerate(_matching(p, wait)):
            if not queue:
                continue
            job = waiting[queue[0][0]]
            j = int(workers[w])
            if job.job_id in out or free[j] < job.scale_factor or job.throughputs[j] <= 0.0:
                continue
            free[j] -= job.scale_factor
            out[job.job_id] = state.gpu_types[j]
        return out
