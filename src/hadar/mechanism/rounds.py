"""Gavel's round mechanism: turn time fractions into leases for one round.

Per GPU type (v100, p100, k80, then any other type; shuffled every round
for type-agnostic policies), jobs are ranked by priority = x_ij / (time
received on j since the last reset), ties by deficit, then x_ij, then job id; a greedy
scan gives each job ``scale_factor`` GPUs of at most one type. Placement
keeps a job on the exact GPUs it held last round when they are free
(lease extension), then fills the rest server by server. Like Gavel, a job
that is active but absent from the allocation (it arrived after the last
re-solve) can be picked by the scan, which holds its GPUs idle this round,
and is not placed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from hadar.model.plan import Lease, RoundPlan
from hadar.model.state import Allocation, JobView, SchedulerState


class GavelRoundPlanner:
    """Gavel's priority/deficit round planner.

    ``shuffle_types``: walk GPU types in a random order each round (Gavel does
    this for type-agnostic policies; seeded with ``seed + 5`` like Gavel).
    ``skip_zero_priority``: never run a job with zero priority on a type
    (Gavel's FIFO policies); otherwise spare GPUs go to such jobs too.
    """

    def __init__(self, *, shuffle_types: bool = False, skip_zero_priority: bool = False, seed: int = 0) -> None:
        self.shuffle_types = shuffle_types
        self.skip_zero_priority = skip_zero_priority
        self._rng = random.Random(seed + 5)

    def plan(self, state: SchedulerState, allocation: Allocation | None, previous: RoundPlan | None) -> RoundPlan:
        types = list(state.gpu_types)
        if self.shuffle_types:
            self._rng.shuffle(types)
        chosen = self._choose(state, allocation, types)
        cluster = state.cluster
        leases: list[Lease] = []
        for t in types:
            order = tuple(g for n in cluster.nodes_of_type(t) for g in cluster.gpus_of_node(n))
            leases.extend(self._place(order, chosen[t], allocation))
        return RoundPlan(start_s=state.now_s, duration_s=state.round_s, leases=tuple(leases))

    # -- choosing who runs ------------------------------------------------------
    def _choose(self, state: SchedulerState, allocation: Allocation | None,
                types: Sequence[str]) -> dict[str, list[JobView]]:
        index = {t: i for i, t in enumerate(state.gpu_types)}
        queue: list[tuple[str, JobView, float]] = []
        alloc_index = {t: i for i, t in enumerate(allocation.gpu_types)} if allocation is not None else {}
        rows = [allocation.row(job.job_id) if allocation is not None else None for job in state.jobs]
        for t in types:
            j = index[t]
            a = alloc_index.get(t)
            entries = []
            for job, row in zip(state.jobs, rows, strict=True):
                x = row[a] if (row is not None and a is not None) else 0.0
                prio = x / job.received_s[j] if (x > 0 and job.throughputs[j] > 0) else 0.0
                entries.append((prio, job.deficit_s[j], x, job))
            entries.sort(key=lambda e: (-e[0], -e[1], -e[2], e[3].job_id))  # exact ties: lowest id first
            queue.extend((t, e[3], e[0]) for e in entries)
        left = {t: state.cluster.count(t) for t in types}
        taken: set[int] = set()
        chosen: dict[str, list[JobView]] = {t: [] for t in types}
        for t, job, prio in queue:
            if left[t] == 0 or job.job_id in taken:
                continue
            if job.throughputs[index[t]] <= 0:
                continue
            if self.skip_zero_priority and prio <= 0:
                continue
            if job.scale_factor > left[t]:
                continue
            left[t] -= job.scale_factor
            taken.add(job.job_id)
            chosen[t].append(job)
        return chosen

    # -- placement --------------------------------------------------------------
    def _place(self, order: tuple[int, ...], jobs: list[JobView], allocation: Allocation | None) -> list[Lease]:
        """Leases on the type whose up GPUs, server by server (Gavel's strided fill order), are ``order``."""
        type_gpus = frozenset(order)
        ptr = 0
        assigned: set[int] = set()
        placed: dict[int, tuple[int, ...]] = {}
        for sf in sorted({j.scale_factor for j in jobs}, reverse=True):
            group = [j for j in jobs if j.scale_factor == sf]
            for job in group:  # keep previous GPUs when all are free
                prev = job.previous_gpus
                if prev and len(prev) == sf and type_gpus.issuperset(prev) and assigned.isdisjoint(prev):
                    placed[job.job_id] = prev
                    assigned.update(prev)
            for job in group:
                if job.job_id in placed or allocation is None or job.job_id not in allocation:
                    continue
                got: list[int] = []
                while len(got) < sf and ptr < len(order):
                    g = order[ptr]
                    ptr += 1
                    if g not in assigned:
                        got.append(g)
                        assigned.add(g)
                placed[job.job_id] = tuple(sorted(got))
        by_id = {j.job_id: j for j in jobs}
        leases = []
        for jid, gpus in placed.items():
            job = by_id[jid]
            leases.append(Lease(job_id=jid, job_type=job.job_type, scale_factor=job.scale_factor, gpus=gpus,
                                max_steps=job.remaining_steps, extended=gpus == job.previous_gpus,
                                restart_s=job.restart_s, owed_s=job.owed_s(gpus)))
        return leases
