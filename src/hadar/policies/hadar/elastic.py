"""Elastic and adaptive jobs under Hadar: each round, every such job's GPU count (and batch) chosen by goodput.

Elastic jobs (a ``gpu_range``, no ``batch_range``) get their GPU type and count from ``water.py``: the GPUs
water-filled by each job's rate of finishing its remaining work, each job's view then pinned to its type.
Rigid jobs keep their counts and are counted first: the GPUs they ask for are taken. The sized views then
go through Hadar's round unchanged: it places each job as a gang of the chosen count.

Adaptive jobs (a ``batch_range``; Sia's meaning: count and batch both adapt) are sized on the GPUs the
rigid and elastic jobs leave, on the best batch at each count: goodput at ``(type, k, B)`` is
``batch_rate`` at ``B`` on ``k`` GPUs of the type (``model/batch.py``) times the job's ``r(B)`` at its
current progress (``Efficiency.gain``), over the batch candidates of its range, and ``G(k)`` its best over
the types with ``k`` GPUs. Every adaptive job with a ``gpu_range`` starts at its least count, and the GPUs
left go one step at a time to the jump ``k -> k'`` of most speedup per added GPU, ``(S(k') - S(k)) /
(k' - k)`` with ``S(k) = G(k) / G(least)``, while it is positive and fits (ties: the larger score, the job
first, the smaller count); an adaptive job without a ``gpu_range`` keeps its count. Its view gives, on each
type, its rate at its best batch there
(times its mean gain over the work left, as every profiled job's view), and after Hadar's placement
``batches_for`` gives it the best batch on the count and types it got. Its hysteresis is its finish
time: an option other than the one it ran at last round (count and batch, the batch remembered in the
memo) is discounted by ``T / (T + restart_s)`` with ``T`` the time its remaining work takes there
(``R / G``), so that it changes only where the change would finish it sooner than staying, restart paid,
were the option kept to the end. Ties: the larger goodput, then the smaller batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from hadar.model.batch import batch_rate, candidates
from hadar.model.state import JobView, SchedulerState
from hadar.policies.hadar import water

BATCHES = "hadar.batches"  # memo: job id -> the batch each adaptive job was given last round


def sized(state: SchedulerState) -> SchedulerState:
    """``state`` with every elastic job's view on the type and count chosen (``water.py``), every adaptive
    job's at its best batch on each type (``state`` itself when none is elastic or adaptive)."""
    sizing = [i for i, j in enumerate(state.jobs) if j.gpu_range is not None or j.batch_range is not None]
    if not sizing:
        return state
    before = _before(state)
    capacity = int(state.capacities().sum())
    spare = capacity - sum(j.scale_factor for j in state.jobs if j.gpu_range is None)
    typed = [i for i in sizing if state.jobs[i].batch_range is None]  # elastic, not adaptive
    picks = water.picks(state, typed, spare)
    spare -= sum(k for _, k in picks.values())
    adaptive = [i for i in sizing if state.jobs[i].batch_range is not None]
    counts = _adaptive_counts(state, adaptive, before, spare)
    jobs = list(state.jobs)
    for i in typed:
        r, k = picks.get(i, (-1, jobs[i].scale_factor))
        jobs[i] = water.on(state, jobs[i], r, k)
    for i in adaptive:
        jobs[i] = _at_batch(state, jobs[i], counts.get(i, jobs[i].scale_factor), before[i])
    return replace(state, jobs=tuple(jobs))


def _adaptive_counts(state: SchedulerState, adaptive: list[int], before: Mapping[int, float],
                     spare: int) -> dict[int, int]:
    """Job index -> GPU count of each adaptive job with a ``gpu_range``: every one at its least count, then the
    ``spare`` GPUs, one step at a time, to the jump of most speedup per added GPU (``_adaptive_options``)."""
    options = {i: _adaptive_options(state, state.jobs[i], before[i]) for i in adaptive
               if state.jobs[i].gpu_range is not None}
    counts = {i: min(o) for i, o in options.items()}
    spare -= sum(counts.values())
    while spare > 0:
        best: tuple[float, int, int] | None = None  # (-score, job index, count): the smallest wins
        for i, worth in options.items():
            here = counts[i]
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
    return counts


def _before(state: SchedulerState) -> dict[int, float]:
    """Job index -> the batch each adaptive job ran at last round (the memo's, else its own)."""
    memo: Mapping[int, float] = state.memo.get(BATCHES) or {}
    return {i: memo.get(j.job_id, j.efficiency.batch) for i, j in enumerate(state.jobs)
            if j.batch_range is not None and j.efficiency is not None}


def _adaptive_options(state: SchedulerState, job: JobView, before: float) -> dict[int, float]:
    """Count -> speedup over the least count's best goodput (restart-discounted) of an adaptive job: its best
    batch on its best type at each count of its ``gpu_range`` (else its own); counts it cannot run on left
    out."""
    lo, hi = job.gpu_range if job.gpu_range is not None else (job.scale_factor, job.scale_factor)
    worth: dict[int, float] = {}
    raw: dict[int, float] = {}
    for k in range(lo, hi + 1):
        for t in state.gpu_types:
            if state.cluster.count(t) >= k:
                d, g, _ = best_batch(state, job, k, (t,), before)
                if g > 0:
                    worth[k], raw[k] = max(worth.get(k, 0.0), d), max(raw.get(k, 0.0), g)
    if not worth:
        return {job.scale_factor: 1.0}
    base = raw[min(raw)]
    return {k: g / base for k, g in worth.items()}


def best_batch(state: SchedulerState, job: JobView, k: int, types: tuple[str, ...],
               before: float) -> tuple[float, float, float]:
    """(restart-discounted goodput, goodput, batch) of an adaptive job's best batch on ``k`` GPUs of
    ``types`` (several: the slowest type's rate, as a gang in sync); ``before``: the batch it ran at."""
    eff = job.efficiency
    assert eff is not None and job.batch_range is not None
    fraction = job.done_steps / job.total_steps if job.total_steps > 0 else 0.0
    ran = len(job.previous_gpus)
    out = (0.0, 0.0, before)
    for b in candidates(state.table, job.job_type, eff.batch, *job.batch_range):
        g = min(batch_rate(state.table, job.job_type, eff.batch, b, k, t) for t in types) * eff.gain(fraction, b)
        if g <= 0:
            continue
        d = g
        if ran and (k, b) != (ran, before):
            t_left = job.remaining_steps / g
            d = g * t_left / (t_left + job.restart_s)
        if d > out[0]:
            out = (d, g, b)
    return out


def batches_for(state: SchedulerState, counts: Mapping[int, Mapping[int, int]]) -> dict[int, float]:
    """Job id -> batch of every adaptive job placed (``counts``: job index -> GPU type index -> GPUs): its
    best batch (``best_batch``) on the count and types it was given."""
    before: Mapping[int, float] = state.memo.get(BATCHES) or {}
    out = {}
    for i, c in counts.items():
        job = state.jobs[i]
        if job.batch_range is None or job.efficiency is None or not any(c.values()):
            continue
        types = tuple(state.gpu_types[r] for r, n in sorted(c.items()) if n > 0)
        out[job.job_id] = best_batch(state, job, sum(c.values()), types,
                                     before.get(job.job_id, job.efficiency.batch))[2]
    return out


def _mean_gain(job: JobView, b: float) -> float:
    """Reference steps a step at batch ``b`` makes on average over the job's work left (``R / steps``)."""
    eff = job.efficiency
    assert eff is not None
    total, left = job.total_steps, job.remaining_steps
    need = eff.steps_for(total - left, left, total, b) if left > 0 else 0.0
    return left / need if need > 0 else eff.gain(1.0, b)


def _at_batch(state: SchedulerState, job: JobView, k: int, before: float) -> JobView:
    """An adaptive job's view as a gang of ``k`` GPUs: on each type, its rate at its best batch there times
    its mean gain at that batch over the work left (as a rigid job's view counts its gain)."""
    eff = job.efficiency
    assert eff is not None
    rates = []
    for t in state.gpu_types:
        b = best_batch(state, job, k, (t,), before)[2]
        rates.append(batch_rate(state.table, job.job_type, eff.batch, b, k, t) * _mean_gain(job, b))
    return replace(job, scale_factor=k, throughputs=tuple(rates))
