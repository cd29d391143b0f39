"""Elastic and adaptive jobs under Hadar: each round, every such job's GPU count (and batch) chosen by goodput.

Elastic jobs (a ``gpu_range``, no ``batch_range``) get their GPU type and count from ``water.py``: the GPUs
water-filled by each job's rate of finishing its remaining work, each job's view then pinned to its type.
Rigid jobs keep their counts and are counted first: the GPUs they ask for are taken. The sized views then
go through Hadar's round unchanged: it places each job as a gang of the chosen count.

Adaptive jobs (a ``batch_range``; Sia's meaning: count and batch both adapt) with a ``gpu_range`` go
through the same water-filling, each (type, count) valued at its best batch there: goodput at ``(type, k,
B)`` is ``batch_rate`` at ``B`` on ``k`` GPUs of the type (``model/batch.py``) times the job's ``r(B)`` at its
current progress (``Efficiency.gain``), over the batch candidates of its range (``water.batched``). An
adaptive job without a ``gpu_range`` keeps its count, counted with the rigid jobs. Its view gives, on its
type (every type where it keeps its count), its rate at its best batch there (times its mean gain over the
work left, as every profiled job's view), and after Hadar's placement ``batches_for`` gives it the best
batch on the count and types it got. Its hysteresis is the elastic jobs': an option other than the one it
ran at last round (count, type and batch, the batch remembered in the memo) is discounted by ``H / (H +
restart_s)``, ``H`` the time the change's gain is expected to last (``water.discount``, ``water.hold_s``).
Ties: the larger goodput, then the smaller batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from hadar.model.batch import batch_rate, candidates
from hadar.model.state import JobView, SchedulerState
from hadar.policies.hadar import water

BATCHES = "hadar.batches"  # memo: job id -> the batch each adaptive job was given last round


def sized(state: SchedulerState) -> tuple[SchedulerState, dict[str, Any]]:
    """``state`` with every elastic and ranged adaptive job's view on the type and count chosen
    (``water.py``), every adaptive job's at its best batch (``state`` itself when none is elastic or
    adaptive), and what the next round's memo keeps of it (``water.HELD``)."""
    sizing = [i for i, j in enumerate(state.jobs) if j.gpu_range is not None or j.batch_range is not None]
    if not sizing:
        return state, {}
    before = _before(state)
    capacity = int(state.capacities().sum())
    spare = capacity - sum(j.scale_factor for j in state.jobs if j.gpu_range is None)
    ranged = [i for i in sizing if state.jobs[i].gpu_range is not None]
    picks = water.picks(state, ranged, spare, before)
    jobs = list(state.jobs)
    for i in sizing:
        r, k = picks.get(i, (-1, jobs[i].scale_factor))
        if jobs[i].batch_range is None:
            jobs[i] = water.on(state, jobs[i], r, k)
        else:  # an adaptive job without a range keeps its count, on any type
            jobs[i] = _at_batch(state, jobs[i], k, before[i], r if jobs[i].gpu_range is not None else None)
    return replace(state, jobs=tuple(jobs)), ({water.HELD: water.held(state, picks)} if picks else {})


def _before(state: SchedulerState) -> dict[int, float]:
    """Job index -> the batch each adaptive job ran at last round (the memo's, else its own)."""
    memo: Mapping[int, float] = state.memo.get(BATCHES) or {}
    return {i: memo.get(j.job_id, j.efficiency.batch) for i, j in enumerate(state.jobs)
            if j.batch_range is not None and j.efficiency is not None}


def best_batch(state: SchedulerState, job: JobView, k: int, types: tuple[str, ...],
               before: float) -> tuple[float, float, float]:
    """(restart-discounted goodput, goodput, batch) of an adaptive job's best batch on ``k`` GPUs of
    ``types`` (several: the slowest type's rate, as a gang in sync); ``before``: the batch it ran at."""
    eff = job.efficiency
    assert eff is not None and job.batch_range is not None
    fraction = job.done_steps / job.total_steps if job.total_steps > 0 else 0.0
    ran = len(job.previous_gpus)
    hold = water.hold_s(state, job) if ran else 0.0  # once, not per candidate batch
    out = (0.0, 0.0, before)
    for b in candidates(state.table, job.job_type, eff.batch, *job.batch_range):
        g = min(batch_rate(state.table, job.job_type, eff.batch, b, k, t) for t in types) * eff.gain(fraction, b)
        if g <= 0:
            continue
        d = g
        if ran and (k, b) != (ran, before):
            d = g * water.discount(job.remaining_steps / g, hold, job.restart_s)
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


def _at_batch(state: SchedulerState, job: JobView, k: int, before: float, only: int | None) -> JobView:
    """An adaptive job's view as a gang of ``k`` GPUs: on each type (type index ``only``'s alone where
    given; -1: none), its rate at its best batch there times its mean gain at that batch over the work left
    (as a rigid job's view counts its gain)."""
    eff = job.efficiency
    assert eff is not None
    rates = []
    for q, t in enumerate(state.gpu_types):
        if only is not None and q != only:
            rates.append(0.0)
            continue
        b = best_batch(state, job, k, (t,), before)[2]
        rates.append(batch_rate(state.table, job.job_type, eff.batch, b, k, t) * _mean_gain(job, b))
    return replace(job, scale_factor=k, throughputs=tuple(rates))
