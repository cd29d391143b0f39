"""YARN capacity scheduler (YARN-CS), the baseline of Hadar's IPDPS paper.

FIFO, non-preemptive, gang-scheduled on one GPU type, blind to types:

- a running job keeps its GPUs until it finishes (never preempted or moved);
- waiting jobs are served strictly in arrival order (ties by id): the head
  job gets ``scale_factor`` free GPUs of one type, chosen without regard to
  speed (a seeded random pick among the types with enough free GPUs that
  can run the job at all); if no type has room the head waits and so does
  everyone behind it (YARN reserves capacity for the head; no backfill).

It re-decides every round (trait ``resolve="every_round"``), as a real
YARN resource manager reacts to every heartbeat; the placement planner
turns its GPU counts into leases, keeping a running job on its GPUs.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from hadar.model.state import Allocation, SchedulerState
from hadar.policies.base import PolicyTraits
from hadar.policies.registry import register


@register("yarn_cs", "YARN capacity scheduler: FIFO, non-preemptive, gang on one GPU type, blind to types")
class YarnCapacityScheduler:
    TRAITS: ClassVar[PolicyTraits] = PolicyTraits(type_aware=False, resolve="every_round", planner="placement")
    ADVANCED: ClassVar[Mapping[str, str]] = {
        "seed": "seed of the random pick among the GPU types with room for the head job (a run passes its "
                "`--seed`)",
    }
    name: ClassVar[str] = "yarn_cs"
    traits: ClassVar[PolicyTraits] = TRAITS

    def __init__(self, *, seed: int = 0) -> None:
        self.seed = int(seed)

    def allocate(self, state: SchedulerState) -> Allocation:
        types = state.gpu_types
        cluster = state.cluster
        free = {t: cluster.count(t) for t in types}
        counts: dict[int, dict[str, int]] = {}
        up = set(cluster.up_gpus)
        for job in state.jobs:  # running jobs keep their GPUs (while their node is up)
            if len(job.previous_gpus) == job.scale_factor and up.issuperset(job.previous_gpus):
                t = cluster.gpu_type_of[job.previous_gpus[0]]
                counts[job.job_id] = {t: job.scale_factor}
                free[t] -= job.scale_factor
        waiting = sorted((j for j in state.jobs if j.job_id not in counts), key=lambda j: (j.arrival_s, j.job_id))
        for job in waiting:
            fits = [t for r, t in enumerate(types) if job.throughputs[r] > 0 and free[t] >= job.scale_factor]
            if not fits:
                break  # head-of-line job waits; FIFO: nobody overtakes it
            t = random.Random(self.seed * 1_000_003 + job.job_id).choice(fits)
            counts[job.job_id] = {t: job.scale_factor}
            free[t] -= job.scale_factor
        index = {jid: i for i, jid in enumerate(state.job_ids)}
        fractions = np.zeros((len(state.jobs), len(types)))
        for jid, c in counts.items():
            for t in c:
                fractions[index[jid], types.index(t)] = 1.0
        return Allocation.for_state(state, fractions, counts=counts)
