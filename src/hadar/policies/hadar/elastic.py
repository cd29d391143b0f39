"""Elastic jobs under Hadar: each round, every elastic job's GPU count in its range, chosen by goodput.

A job with a ``gpu_range`` may run on any count of it. Goodput at ``k`` GPUs is ``G(k)``: the best rate
at ``k`` over the GPU types with at least ``k`` GPUs (reference steps/s: the table's rate times the job's
``gain``). Rigid jobs keep their counts and are counted first: the GPUs they ask for are taken, every
elastic job starts at its least count, and the GPUs left (``spare``) go, one step at a time, to the jump
``k -> k'`` with the most speedup per added GPU, ``(S(k') - S(k)) / (k' - k)`` with ``S(k) = G(k) / G(least)``
(counts the job cannot run on left out; ``least``: the least count it can)
(each job's speedup counts alike: the average-JCT objective), while it is positive and fits. A job that ran
last round on ``p`` GPUs pays its restart to move: any other count's goodput is discounted by the share of a
round its restore costs (``1 - restart_s / round``), so a change happens only where it is worth its restart.
Ties: the larger score, then the job first in the state, then the smaller count. The sized views then go
through Hadar's round unchanged: it places each job as a gang of the chosen count.
"""

from __future__ import annotations

from dataclasses import replace

from hadar.model.state import JobView, SchedulerState


def sized(state: SchedulerState) -> SchedulerState:
    """``state`` with every elastic job's view at the count chosen (``state`` itself when none is elastic)."""
    elastic = [i for i, j in enumerate(state.jobs) if j.gpu_range is not None]
    if not elastic:
        return state
    capacity = int(state.capacities().sum())
    spare = capacity - sum(j.scale_factor for j in state.jobs if j.gpu_range is None)
    options = {i: _options(state, state.jobs[i]) for i in elastic}
    counts = {i: min(options[i]) for i in elastic}
    spare -= sum(counts.values())
    while spare > 0:
        best: tuple[float, int, int] | None = None  # (-score, job index, count): the smallest wins
        for i in elastic:
            here, worth = counts[i], options[i]
            for k, s in worth.items():
                if here < k <= here + spare:
                    gain = (s - worth[here]) / (k - here)
                    if gain > 1e-12 and (best is None or (-gain, i, k) < best):
                        best = (-gain, i, k)
        if best is None:
            break
        _, i, k = best
        spare -= k - counts[i]
        counts[i] = k
    jobs = list(state.jobs)
    for i in elastic:
        if counts[i] != jobs[i].scale_factor:
            jobs[i] = _at(state, jobs[i], counts[i])
    return replace(state, jobs=tuple(jobs))


def _goodput(state: SchedulerState, job: JobView, k: int) -> float:
    """Best reference steps/s of ``job`` on ``k`` GPUs of one type that has that many."""
    rates = [state.table.rate_on(job.job_type, k, t) for t in state.gpu_types if state.cluster.count(t) >= k]
    return max(rates, default=0.0) * job.gain


def _options(state: SchedulerState, job: JobView) -> dict[int, float]:
    """Count -> speedup ``S`` over the least count the job can run on (restart-discounted where the job
    would move); counts it cannot run on (no rate on any type) are left out."""
    assert job.gpu_range is not None
    lo, hi = job.gpu_range
    goodput = {k: g for k in range(lo, hi + 1) if (g := _goodput(state, job, k)) > 0}
    if not goodput:
        return {job.scale_factor: 1.0}
    base = goodput[min(goodput)]
    ran = len(job.previous_gpus)
    keep = 1.0 - min(job.restart_s / state.round_s, 1.0) if ran else 1.0
    return {k: g / base if k == ran else g / base * keep for k, g in goodput.items()}


def _at(state: SchedulerState, job: JobView, k: int) -> JobView:
    """``job``'s view as a gang of ``k`` GPUs: its rates there (times its gain)."""
    rates = tuple([state.table.rate_on(job.job_type, k, t) * job.gain for t in state.gpu_types])
    return replace(job, scale_factor=k, throughputs=rates)
