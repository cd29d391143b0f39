"""First-in first-out (Gavel's ``fifo`` and ``fifo_perf``); no solver.

Jobs in arrival order (ties by id, i.e. Gavel's job-id order) each get one
whole GPU type (``x = 1``) while some type with a positive throughput for the
job still has at least ``s_i`` free GPUs; the first job that fits nowhere
stops the scan (no job jumps the queue).

* ``fifo_perf`` recomputes from scratch at every call and gives each job the
  fastest type with room (ties: Gavel's alphabetical type order).
* ``fifo`` is a *correct* agnostic FIFO, not Gavel's buggy one (spec/gavel.md
  section 6, bug 2): a job keeps its type until it completes (memory in
  ``Allocation.memo``), and a newly started job gets a type drawn uniformly
  among those with room. The draw uses ``numpy.random.default_rng((seed,
  job_id))``, so the allocation is a pure function of the state and the seed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from hadar.arrays import FloatArray, IntArray
from hadar.model.state import Allocation, SchedulerState
from hadar.policies.base import PolicyTraits
from hadar.policies.gavel.common import Inputs, empty_allocation, tie_order
from hadar.policies.registry import register

MEMO_ASSIGNED = "fifo/assigned_type"


def arrival_order(state: SchedulerState) -> list[int]:
    return sorted(range(len(state.jobs)), key=lambda i: (state.jobs[i].arrival_s, state.jobs[i].job_id))


def _fastest(throughputs: FloatArray, room: FloatArray, ties: IntArray) -> int:
    """Index of the fastest type with room; ties go to the first in ``ties`` (``tie_order``: the
    alphabetically first type under Gavel's order, as Gavel; else the run's label-free order)."""
    best, best_rate = -1, -1.0
    for j in ties:
        if room[j] and throughputs[j] > best_rate:
            best, best_rate = int(j), float(throughputs[j])
    return best


@register("fifo_perf", "FIFO, heterogeneity-aware: each job in arrival order gets the fastest type with room (Gavel)")
class FifoPerf:
    TRAITS: ClassVar[PolicyTraits] = PolicyTraits(skip_zero_priority=True)  # never run a job where x = 0
    name: ClassVar[str] = "fifo_perf"
    traits: ClassVar[PolicyTraits] = TRAITS

    def allocate(self, state: SchedulerState) -> Allocation:
        if not state.jobs:
            return empty_allocation(state)
        inp = Inputs.of(state)
        free = inp.capacities.copy()
        x = np.zeros(inp.shape)
        ties = tie_order(state)
        for i in arrival_order(state):
            room = inp.active[i] & (free >= inp.scale_factors[i])
            if not room.any():
                break
            j = _fastest(inp.throughputs[i], room, ties)
            x[i, j] = 1.0
            free[j] -= inp.scale_factors[i]
        return Allocation.for_state(state, x)


@register("fifo", "FIFO, type-agnostic: a random type with room, kept until the job completes")
class Fifo:
    TRAITS: ClassVar[PolicyTraits] = PolicyTraits(type_aware=False, skip_zero_priority=True)
    ADVANCED: ClassVar[Mapping[str, str]] = {
        "seed": "seed of the GPU type drawn for each job when it starts (a run passes its `--seed`)",
    }
    name: ClassVar[str] = "fifo"
    traits: ClassVar[PolicyTraits] = TRAITS

    def __init__(self, *, seed: int = 0) -> None:
        self.seed = int(seed)

    def _draw(self, job_id: int, room: FloatArray) -> int:
        choices = np.nonzero(room)[0]
        rng = np.random.default_rng((self.seed, int(job_id)))
        return int(choices[rng.integers(choices.size)])

    def allocate(self, state: SchedulerState) -> Allocation:
        if not state.jobs:
            return empty_allocation(state, memo={MEMO_ASSIGNED: {}})
        inp = Inputs.of(state)
        previous = state.memo.get(MEMO_ASSIGNED, {})
        free = inp.capacities.copy()
        x = np.zeros(inp.shape)
        order = arrival_order(state)
        kept: set[int] = set()
        for i in order:  # running jobs keep their type while it still fits
            t = previous.get(state.jobs[i].job_id)
            j = state.gpu_types.index(t) if t in state.gpu_types else -1
            if j >= 0 and inp.active[i, j] and free[j] >= inp.scale_factors[i]:
                x[i, j] = 1.0
                free[j] -= inp.scale_factors[i]
                kept.add(i)
        for i in order:
            if i in kept:
                continue
            room = inp.active[i] & (free >= inp.scale_factors[i])
            if not room.any():
                break
            j = self._draw(state.jobs[i].job_id, room)
            x[i, j] = 1.0
            free[j] -= inp.scale_factors[i]
        assigned = {state.jobs[i].job_id: state.gpu_types[int(np.argmax(x[i]))] for i in range(len(state.jobs))
                    if x[i].any()}
        return Allocation.for_state(state, x, memo={MEMO_ASSIGNED: assigned})


#: a queued job joins a running one when their normalized co-located throughputs sum above this (Gavel)
PACKING_THRESHOLD = 1.5


@register("fifo_packed", "FIFO with space sharing: fifo_perf, then each queued job shares the GPUs of the first "
                         "running job it packs well with (normalized pair throughput > 1.5, Gavel)")
class FifoPacked:
    TRAITS: ClassVar[PolicyTraits] = PolicyTraits(skip_zero_priority=True)
    name: ClassVar[str] = "fifo_packed"
    traits: ClassVar[PolicyTraits] = TRAITS

    def allocate(self, state: SchedulerState) -> Allocation:
        base = FifoPerf().allocate(state)
        if not state.jobs:
            return base
        x = np.array(base.fractions)
        inp = Inputs.of(state)
        order = arrival_order(state)
        alone = [i for i in order if x[i].any()]  # running jobs still alone, in arrival order
        pairs: dict[tuple[int, int], tuple[float, ...]] = {}
        for b in (i for i in order if not x[i].any()):
            for a in alone:
                j = int(np.argmax(x[a]))
                if inp.scale_factors[a] != inp.scale_factors[b] or inp.throughputs[b, j] <= 0:
                    continue
                ja, jb = state.jobs[a], state.jobs[b]
                ra, rb = state.table.pair_rates(ja.job_type, jb.job_type, ja.scale_factor, state.gpu_types[j])
                if ra / inp.throughputs[a, j] + rb / inp.throughputs[b, j] > PACKING_THRESHOLD:
                    x[a, j] = 0.0
                    share = [0.0] * len(state.gpu_types)
                    share[j] = 1.0
                    pairs[(ja.job_id, jb.job_id)] = tuple(share)
                    alone.remove(a)
                    break
        return Allocation.for_state(state, x, pairs=pairs)
