"""Profiling leases (``profile: true``): measure a job on the GPU types it has not run on, with idle GPUs.

Each round, GPUs the plan leaves idle may run short leases of jobs that asked to be profiled,
on a type (at their own GPU count) whose throughput entry is still an estimate and has not
been tried before. A profiling lease runs the job's function from its last saved state for a
few seconds (``ctx.profiling`` is True); what it saves is thrown away and its steps do not
count: only its steps/s go to the throughput tracker. It never takes a GPU the plan uses.
"""

from __future__ import annotations

from collections.abc import Mapping

from hadar.model.cluster import Cluster
from hadar.model.plan import Lease, RoundPlan
from hadar.runtime.progress import JobProgress
from hadar.runtime.tracker import ThroughputTracker


def pick_profiles(plan: RoundPlan, jobs: Mapping[int, JobProgress], tracker: ThroughputTracker,
                  cluster: Cluster) -> list[Lease]:
    """The profiling leases this round: jobs in id order, each on at most one unprofiled type, gangs on one node."""
    busy = {g for lease in plan.leases for g in lease.gpus}
    idle: dict[str, dict[int, list[int]]] = {}  # type -> node -> idle GPU ids
    for g in range(cluster.num_gpus):
        if g not in busy:
            idle.setdefault(cluster.gpu_type_of[g], {}).setdefault(cluster.node_of[g], []).append(g)
    out: list[Lease] = []
    for jid in sorted(jobs):
        info = jobs[jid]
        job = info.job
        if (not info.spec.profile or info.profile_off or info.ended or job.arrival_s > plan.start_s
                or info.steps >= job.total_steps):
            continue
        for t in cluster.gpu_types:
            if t in info.profiled or tracker.kind(job.job_type, job.scale_factor, t) != "estimated":
                continue
            gpus = _gang(idle.get(t, {}), job.scale_factor)
            if gpus is None:
                continue
            info.profiled.add(t)
            out.append(Lease(jid, job.job_type, job.scale_factor, gpus, max_steps=float(job.total_steps)))
            break
    return out


def _gang(nodes: dict[int, list[int]], k: int) -> tuple[int, ...] | None:
    """``k`` idle GPUs of one node (taken out of ``nodes``), or None."""
    for node, free in sorted(nodes.items()):
        if len(free) >= k:
            gpus, nodes[node] = free[:k], free[k:]
            return tuple(gpus)
    return None
