"""Admission: reject, before anything runs, jobs the table does not know or no GPU of the cluster can run."""

from __future__ import annotations

from collections.abc import Sequence

from hadar.errors import InfeasibleError, InputError
from hadar.model.cluster import Cluster
from hadar.model.job import Job
from hadar.model.throughput import ThroughputTable


def validate_cluster(cluster: Cluster, table: ThroughputTable) -> None:
    """Every GPU type of the cluster has throughputs in the table."""
    missing = [t for t in cluster.gpu_types if t not in table.gpu_types]
    if missing:
        raise InputError(f"unknown GPU type(s) {', '.join(missing)}: no throughputs for them in "
                         f"{table.source or 'the table'} (known: {', '.join(table.gpu_types)})")


def validate_jobs(jobs: Sequence[Job], cluster: Cluster, table: ThroughputTable, *, spans_types: bool) -> None:
    """Reject jobs the table does not know or that no GPU of the cluster can ever run.

    ``spans_types``: the policy may give one job GPUs of several types (then every type that can
    run the job counts towards its room; else only the largest such type)."""
    validate_cluster(cluster, table)
    for job in jobs:
        validate_job(job, cluster, table, spans_types=spans_types)


def validate_job(job: Job, cluster: Cluster, table: ThroughputTable, *, spans_types: bool) -> None:
    where = job.origin or f"job {job.job_id}"
    if not table.has(job.job_type, job.scale_factor):
        known = table.scale_factors(job.job_type)
        what = (f"scale factor {job.scale_factor} (table has {', '.join(map(str, known))})" if known
                else "job type")
        raise InputError(f"{where}: unknown {what} for {job.job_type!r} in {table.source or 'the table'}")
    rates = {t: table.get(job.job_type, job.scale_factor, t) for t in cluster.gpu_types}
    runnable = [t for t, r in rates.items() if r > 0]
    room = sum(cluster.count(t) for t in runnable) if spans_types else max(
        (cluster.count(t) for t in runnable), default=0)
    if room < job.scale_factor:
        raise InfeasibleError(f"{where}: {job.job_type!r} needs {job.scale_factor} GPUs but the cluster has "
                              f"only {room} it can run on{'' if spans_types else ' of one type'} "
                              f"({', '.join(f'{t}={cluster.count(t)}' for t in runnable) or 'none'})")
