"""HadarE's forked jobs on the runtime: splitting a job's steps over its copies, and merging them back.

Several leases of one job in a round are its copies. Each starts from the job's canonical
checkpoint, reads its own disjoint shards of every global batch and trains its share of the
job's remaining steps, in proportion to its expected rate (so the copies together never
exceed the job's sample budget). After the round the job tracker (``aggregate``) averages
the copies that saved into the canonical checkpoint; a copy that failed is left out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hadar.model.plan import Lease, RoundPlan


@dataclass(frozen=True, slots=True)
class Fork:
    """A copy's place among its job's copies this round."""

    copies: int
    shard_offset: int
    shards: int
    max_steps: float  # this copy's share of the job's remaining steps


def split(plan: RoundPlan, rate: Callable[[Lease], float]) -> dict[int, Fork]:
    """Lease index -> its place among its job's copies, for the jobs with several leases this round."""
    by_job: dict[int, list[int]] = {}
    for i, lease in enumerate(plan.leases):
        by_job.setdefault(lease.job_id, []).append(i)
    out: dict[int, Fork] = {}
    for idx in by_job.values():
        if len(idx) < 2:
            continue
        order = sorted(idx, key=lambda i: plan.leases[i].copy)
        rates = [rate(plan.leases[i]) for i in order]
        total = sum(rates)
        shards = sum(len(plan.leases[i].gpus) for i in order)
        offset = 0
        for i, r in zip(order, rates):
            share = r / total if total > 0 else 1 / len(order)
            out[i] = Fork(len(order), offset, shards, plan.leases[i].max_steps * share)
            offset += len(plan.leases[i].gpus)
    return out
