"""Elastic jobs' GPU type and count under Hadar: the GPUs water-filled by each job's rate of finishing.

An elastic job (a ``gpu_range``, no ``batch_range``) may run on any count ``k`` of its range on one GPU type
``t`` with at least ``k`` GPUs. Its goodput there is ``G(t, k)``, the table's rate times its ``gain``
(reference steps/s), and ``R`` its remaining work (reference steps): ``G / R`` is the rate at which it
finishes its work, what the average JCT rewards (a job of little work left gains most from a GPU). Every
job starts with nothing; the GPUs go, one jump at a time, to the jump ``(t, k) -> (t', k')``, ``k' > k``
(``k = 0`` from nothing, any type), of most ``(V(t', k') - V(t, k)) / (k' - k)`` with ``V = G / R``,
while it is positive and fits both the GPUs the rigid jobs leave and ``t'``'s GPUs not given yet. So the
count is sized on the rate of the type the job will run on, the fast types go to the jobs that gain most
there, and a job may get nothing this round (its view then has no rate: Hadar does not place it).

A job that ran last round on ``(t, k)`` pays its restore ``restart_s`` to run anywhere else: its goodput
there is discounted by ``T / (T + restart_s)`` with ``T = R / G`` (the restore spread over the time the
rest of its work takes there): a move happens where it would finish the job sooner, restore paid, and
the discount tends to 1 as the work left grows against the restore. A job that has not run pays its first
restore anywhere: no discount. Ties: the larger value per GPU, then the job first in the state, the type
first in ``state.gpu_types``, the smaller count. The views then go through Hadar's round: each job's view
has its rate on its type only, so it is placed there as a gang of its count.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import replace

from hadar.model.state import JobView, SchedulerState

Pick = tuple[int, int]  # (GPU type index, GPUs)
NONE: Pick = (-1, 0)  # no GPUs
Jump = tuple[float, int, int, int]  # (-value per added GPU, job index, type index, GPUs): the smallest wins


def picks(state: SchedulerState, elastic: list[int], spare: int) -> dict[int, Pick]:
    """Job index -> (type index, GPUs) of each of the ``elastic`` jobs given GPUs; ``spare``: the GPUs the
    rigid jobs leave. A jump only loses worth as GPUs are given, so the best jumps wait in a heap and each
    is re-checked when it comes up."""
    free = [state.cluster.count(t) for t in state.gpu_types]
    worth = {i: values(state, state.jobs[i]) for i in elastic}
    got: dict[int, Pick] = dict.fromkeys(elastic, NONE)
    heap = [e for i in elastic if (e := _jump(worth[i], got[i], free, spare, i)) is not None]
    heapq.heapify(heap)
    while heap and spare > 0:
        top = heapq.heappop(heap)
        i = top[1]
        now = _jump(worth[i], got[i], free, spare, i)
        if now is None:
            continue
        if now != top:
            heapq.heappush(heap, now)
            continue
        (r0, k0), (r, k) = got[i], (now[2], now[3])
        if k0:
            free[r0] += k0
        free[r] -= k
        spare -= k - k0
        got[i] = (r, k)
        if (e := _jump(worth[i], got[i], free, spare, i)) is not None:
            heapq.heappush(heap, e)
    return {i: p for i, p in got.items() if p != NONE}


def _jump(worth: Mapping[Pick, float], here: Pick, free: list[int], spare: int, i: int) -> Jump | None:
    """Job ``i``'s best jump from ``here`` that fits the ``spare`` GPUs and each type's ``free`` ones."""
    r0, k0 = here
    base = worth.get(here, 0.0)
    best: Jump | None = None
    for (r, k), v in worth.items():
        if k0 < k <= k0 + spare and k <= free[r] + (k0 if r == r0 else 0):
            gain = (v - base) / (k - k0)
            if gain > 0 and (best is None or (-gain, i, r, k) < best):
                best = (-gain, i, r, k)
    return best


def values(state: SchedulerState, job: JobView) -> dict[Pick, float]:
    """(type index, GPUs) -> ``V = G / R`` of the job there, ``G`` restore-discounted where it would move;
    pairs it cannot run on (no rate, or more GPUs than the type has) left out."""
    assert job.gpu_range is not None
    lo, hi = job.gpu_range
    work = max(job.remaining_steps * job.gain, 1e-9)
    ran = _ran(state, job)
    out = {}
    for r, t in enumerate(state.gpu_types):
        for k in range(lo, min(hi, state.cluster.count(t)) + 1):
            g = state.table.rate_on(job.job_type, k, t) * job.gain
            if g <= 0:
                continue
            if ran is not None and (r, k) != ran:
                g *= (work / g) / (work / g + job.restart_s)
            out[(r, k)] = g / work
    return out


def _ran(state: SchedulerState, job: JobView) -> Pick | None:
    """(type index, GPUs) the job held last round (its first GPU's type), else None."""
    if not job.previous_gpus:
        return None
    return state.gpu_types.index(state.cluster.gpu_type_of[job.previous_gpus[0]]), len(job.previous_gpus)


def on(state: SchedulerState, job: JobView, r: int, k: int) -> JobView:
    """``job``'s view as a gang of ``k`` GPUs of type index ``r`` only (its rate there times its gain, 0 on
    the others); ``r = -1``: no rate anywhere (given nothing this round)."""
    rates = tuple(state.table.rate_on(job.job_type, k, t) * job.gain if q == r else 0.0
                  for q, t in enumerate(state.gpu_types))
    return replace(job, scale_factor=k, throughputs=rates)
