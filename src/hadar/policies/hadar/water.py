"""Elastic jobs' GPU type and count under Hadar: the GPUs water-filled by each job's rate of finishing.

An elastic job (a ``gpu_range``, no ``batch_range``) may run on any count ``k`` of its range on one GPU type
``t`` with at least ``k`` GPUs. Its goodput there is ``G(t, k)``, the table's rate times its ``gain``
(reference steps/s), and ``R`` its remaining work (reference steps): ``G / R`` is the rate at which it
finishes its work. What the average JCT rewards is heSRPT's rule (Berg, Vesilo and Harchol-Balter: the
optimal shares of a pool for parallel jobs of known sizes, each of speedup ``k^p``): the optimal shares go
by each job's rank in size, not by how much smaller it is, the ``i``-th longest of ``n`` getting
``(i/n)^q - ((i-1)/n)^q`` of the GPUs, ``q = 1 / (1 - p)``: the shortest most, the longer ones still some,
so that every job's GPUs earn. Those shares are the optimum of ``sum_i c_i s_i(k_i)`` with ``c_i = (i^q -
(i-1)^q)^(1-p)``: here each job's value is its speedup over its own smallest pick, ``V = G / G1`` (``G1``:
its best goodput at its least count, restore discounts included), times ``c`` at its rank in time left
``R / G1`` (``ranked``; ``p = SPEEDUP_P`` = 0.5, ``c = sqrt(2 i - 1)``). Every job starts with nothing; the
GPUs go, one jump at a time, to the jump ``(t, k) -> (t', k')``, ``k' > k`` (``k = 0`` from nothing, any
type), of most ``(V(t', k') - V(t, k)) / (k' - k)``, while it is positive and fits both the GPUs the rigid
jobs leave and ``t'``'s GPUs not given yet. So the count is sized on the rate of the type the job will run
on, the fast types go to the jobs that gain most there, and a job may get nothing this round (its view then
has no rate: Hadar does not place it).

A job that ran last round on ``(t, k)`` pays its restore ``restart_s`` to run anywhere else: its goodput
there is discounted by ``H / (H + restart_s)``, the restore spread over the time ``H`` the move's gain
lasts: the time the rest of its work takes there (``T = R / G``), or, where sooner, the time until the next
change takes the new placement away. That time is not known; its estimate is the job's own record: a
placement that has held for ``h`` seconds is taken to hold ``h`` more (at least a round), so ``H = min(T,
max(round, h))``. A move happens where it would finish the job sooner, restore paid, over what it can expect
to keep; a job that moved recently is moved again only for a large gain, one that has held its GPUs for
hours for a small one. Against other jobs, a job that ran counts the restore that staying saves it (being
given nothing costs it one too, when it resumes): each of its values ``G / R`` is divided by the discount it
would pay to leave where it is, ``H / (H + restart_s)`` with ``H = min(T, max(round, h))`` there, which
shortens the time left its rank is taken at (the values' scale itself cancels in ``G / G1``; keeping it on
top of the rank weight was worse on all four dev runs). A job that has not run pays its first restore
anywhere: no discount. Since when each job has held its pick is the policy's
memory (``HELD``). Ties: the larger value per GPU, then the job first in the state, the type first in
``state.gpu_types``, the smaller count; of two jobs with as much time left, the one first in the state
counts as the shorter. The views then go through Hadar's round: each job's view has its
rate on its type only, so it is placed there as a gang of its count.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import replace

from hadar.model.batch import batch_rate, candidates
from hadar.model.state import JobView, SchedulerState

HELD = "hadar.held"  # memo: job id -> ((GPU type index, GPUs) given, since when it has held that pick)
Pick = tuple[int, int]  # (GPU type index, GPUs)
SPEEDUP_P = 0.5  # heSRPT's speedup exponent for the rank weights (chosen on the dev pair; module docstring)
NONE: Pick = (-1, 0)  # no GPUs
Jump = tuple[float, int, int, int]  # (-value per added GPU, job index, type index, GPUs): the smallest wins


def picks(state: SchedulerState, elastic: list[int], spare: int,
          before: Mapping[int, float] | None = None) -> dict[int, Pick]:
    """Job index -> (type index, GPUs) of each of the ``elastic`` jobs given GPUs; ``spare``: the GPUs the
    rigid jobs leave; ``before``: job index -> the batch each adaptive one ran at. A jump only loses worth
    as GPUs are given, so the best jumps wait in a heap and each is re-checked when it comes up."""
    free = [state.cluster.count(t) for t in state.gpu_types]
    before = before or {}
    worth = ranked({i: values(state, state.jobs[i], hold_s(state, state.jobs[i]), before.get(i)) for i in elastic})
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


def ranked(worth: Mapping[int, Mapping[Pick, float]], p: float = SPEEDUP_P) -> dict[int, dict[Pick, float]]:
    """Each job's values ``G / R`` turned into its speedup over its own smallest pick, ``G / G1``, weighted by
    its rank in time left (``R / G1``, the longest first: rank 1) as heSRPT's optimal shares weight it:
    ``c_i = (i^q - (i - 1)^q)^(1 - p)``, ``q = 1 / (1 - p)`` (module docstring). Ties: the job first in the
    state counts as the shorter."""
    q = 1.0 / (1.0 - p)
    first = {i: _smallest(v) for i, v in worth.items()}
    order = sorted((i for i in worth if first[i] > 0), key=lambda i: (first[i], -i))  # most time left first
    out: dict[int, dict[Pick, float]] = {i: {} for i in worth}
    for rank, i in enumerate(order, start=1):
        c = (rank ** q - (rank - 1) ** q) ** (1.0 - p)
        out[i] = {pick: c * v / first[i] for pick, v in worth[i].items()}
    return out


def _smallest(values: Mapping[Pick, float]) -> float:
    """The best value among a job's picks of its smallest GPU count (0: none)."""
    if not values:
        return 0.0
    k = min(k for _, k in values)
    return max(v for (_, kk), v in values.items() if kk == k)


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


def values(state: SchedulerState, job: JobView, hold: float = float("inf"),
           before: float | None = None) -> dict[Pick, float]:
    """(type index, GPUs) -> ``V = G / R`` of the job there, ``G`` restore-discounted where it would move
    (over ``min(T, hold)``); pairs it cannot run on (no rate, or more GPUs than the type has) left out. An
    adaptive job (``before``: the batch it ran at) is valued at its best batch there (``batched``)."""
    assert job.gpu_range is not None
    lo, hi = job.gpu_range
    work = max(job.remaining_steps * (job.gain if before is None else 1.0), 1e-9)
    ran = _ran(state, job)
    out = {}
    for r, t in enumerate(state.gpu_types):
        for k in range(lo, min(hi, state.cluster.count(t)) + 1):
            if before is not None:
                g = batched(state, job, k, t, (ran is not None, (r, k) == ran, before), hold)
            else:
                g = state.table.rate_on(job.job_type, k, t) * job.gain
                if g > 0 and ran is not None and (r, k) != ran:
                    g *= discount(work / g, hold, job.restart_s)
            if g > 0:
                out[(r, k)] = g / work
    if ran is not None and ran in out and job.restart_s > 0:  # against other jobs: staying saves a restore
        saves = 1.0 / discount(1.0 / out[ran], hold, job.restart_s)
        out = {p: v * saves for p, v in out.items()}
    return out


def discount(t_left: float, hold: float, restart_s: float) -> float:
    """A move's worth per unit of goodput: the restore spread over the time its gain lasts."""
    lasts = min(t_left, hold)
    return lasts / (lasts + restart_s)


def batched(state: SchedulerState, job: JobView, k: int, t: str, where: tuple[bool, bool, float],
            hold: float) -> float:
    """An adaptive job's best restore-discounted goodput on ``k`` GPUs of type ``t`` (reference steps/s): at
    each candidate batch ``B`` its rate there times ``r(B)`` at its progress; ``where``: (it ran last
    round, on this type and count, at batch ...): any other option pays its restore (``discount``)."""
    eff = job.efficiency
    assert eff is not None and job.batch_range is not None
    ran, here, before = where
    fraction = job.done_steps / job.total_steps if job.total_steps > 0 else 0.0
    best = 0.0
    for b in candidates(state.table, job.job_type, eff.batch, *job.batch_range):
        g = batch_rate(state.table, job.job_type, eff.batch, b, k, t) * eff.gain(fraction, b)
        if g > 0 and ran and not (here and b == before):
            g *= discount(job.remaining_steps / g, hold, job.restart_s)
        best = max(best, g)
    return best


def _ran(state: SchedulerState, job: JobView) -> Pick | None:
    """(type index, GPUs) the job held last round (its first GPU's type), else None."""
    if not job.previous_gpus:
        return None
    return state.gpu_types.index(state.cluster.gpu_type_of[job.previous_gpus[0]]), len(job.previous_gpus)


def hold_s(state: SchedulerState, job: JobView) -> float:
    """How long a move of ``job`` is expected to keep its new placement: as long as its placement of last
    round has held already, at least a round (a job that did not run: a round)."""
    ran = _ran(state, job)
    if ran is None:
        return state.round_s
    return max(state.round_s, state.now_s - _since(state, job, ran))


def _since(state: SchedulerState, job: JobView, ran: Pick) -> float:
    """Since when ``job`` has held ``ran``: the memo's, where it gave that pick, else since last round."""
    got = (state.memo.get(HELD) or {}).get(job.job_id)
    return float(got[1]) if got is not None and tuple(got[0]) == ran else state.now_s - state.round_s


def held(state: SchedulerState, given: Mapping[int, Pick]) -> dict[int, tuple[Pick, float]]:
    """The memo's ``HELD`` after a round that gave ``given`` (job index -> pick): a pick the job already
    held keeps its start, any other starts now."""
    out = {}
    for i, pick in given.items():
        job = state.jobs[i]
        ran = _ran(state, job)
        out[job.job_id] = (pick, _since(state, job, ran) if ran == pick else state.now_s)
    return out


def on(state: SchedulerState, job: JobView, r: int, k: int) -> JobView:
    """``job``'s view as a gang of ``k`` GPUs of type index ``r`` only (its rate there times its gain, 0 on
    the others); ``r = -1``: no rate anywhere (given nothing this round)."""
    rates = tuple(state.table.rate_on(job.job_type, k, t) * job.gain if q == r else 0.0
                  for q, t in enumerate(state.gpu_types))
    return replace(job, scale_factor=k, throughputs=rates)
