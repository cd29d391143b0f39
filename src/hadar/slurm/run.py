"""Run a job file on a Slurm cluster: the library entry point behind ``hadar run --slurm``.

The same engine, policy, planner and ledger as ``hadar run`` on Ray; the executor is
``SlurmExecutor`` and the cluster is what ``sinfo`` says (a partition's nodes with typed GPUs).
Everything that can be checked is checked before the first job is submitted: Slurm reachable, the
partition known, every node's GPUs typed, every job's entrypoint found and every job fitting.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hadar.build import policy_for_run, wire
from hadar.clock import WallClock
from hadar.engine import Hooks
from hadar.errors import InputError
from hadar.mechanism.admission import validate_jobs
from hadar.metrics.summary import job_rows, summarize
from hadar.model.fork_efficiency import IDEAL
from hadar.model.job import Job
from hadar.model.throughput import ThroughputTable
from hadar.policies.profiles import PolicySpec
from hadar.runtime import outputs
from hadar.runtime.run import RuntimeResult, check_writable, prepare_jobs
from hadar.runtime.tracker import ThroughputTracker
from hadar.slurm import accounting
from hadar.slurm.commands import Slurm
from hadar.slurm.executor import SlurmExecutor, SlurmOptions
from hadar.sources import Workload


@dataclass(slots=True)
class SlurmResult:
    """A run's result as ``hadar run`` gives it, and one record per lease (its Slurm job, node, GPU type)."""

    result: RuntimeResult
    leases: list[dict[str, Any]]
    partition: str | None
    usage: list[accounting.UsageRecord] = field(default_factory=list)  # sacct's, one row per Slurm job and GPU type


@dataclass(frozen=True, slots=True)
class SlurmRun:
    """``run_on_slurm``'s settings: the work folder (leases and checkpoints: every node must see it), the
    partition (None: every partition's GPU nodes), ``SLURM_CONF`` (None: as the environment says), the round
    length, the seed, a throughput table given up front, the leases' device and the grace after a deadline."""

    work_dir: Path
    partition: str | None = None
    conf: str | None = None
    round_s: float = 30.0
    seed: int = 0
    throughputs: ThroughputTable | None = None
    device: str = "auto"
    grace_s: float = 30.0


def run_on_slurm(jobs: list[Job], policy: str, run: SlurmRun, *,
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 profiles: Mapping[str, PolicySpec] | None = None) -> SlurmResult:
    """Train ``jobs`` on Slurm under ``policy``. A lease that finds no CUDA device (``device`` ``auto``; or
    ``cpu``) runs on the CPU as an emulated GPU: its type's speed factor stretches its steps, with the
    dilation of the cluster's GPUs over this machine's cores, as the Ray demo does."""
    if not jobs:
        raise InputError("no jobs to run")
    round_s, seed = run.round_s, run.seed
    if not round_s > 0:
        raise InputError(f"round length must be a positive number of seconds, got {round_s}")
    slurm = Slurm(run.conf)
    work_dir = check_writable(Path(run.work_dir), "work folder")
    jobs = prepare_jobs(jobs)
    run_policy = policy_for_run(policy, seed=seed, profiles=profiles)
    pol = run_policy.policy
    events: list[dict[str, Any]] = []

    def emit(e: dict[str, Any]) -> None:
        events.append(e)
        if on_event is not None:
            on_event(e)

    clock = WallClock()
    options = SlurmOptions(work_dir, partition=run.partition, device=run.device, dilation="auto",  # (ignored on CUDA)
                           given=run.throughputs, grace_s=run.grace_s, seed=seed)
    executor = SlurmExecutor(slurm, clock, options, on_event=emit)
    cluster = executor.cluster
    shape = ThroughputTracker(cluster.gpu_types)
    for job in jobs:
        shape.add(job.job_type, job.scale_factor)
    validate_jobs(jobs, cluster, shape.table(), spans_types=pol.traits.spans_types)
    prior = executor.admit(list(jobs))
    # the executor's reports carry the measured rates for the policy (no restart costs: its estimates
    # hold each lease's start)
    engine, ledger = wire(pol, cluster, prior, executor, clock, round_s=round_s, seed=seed,
                          hooks=Hooks(on_event=emit), fork_efficiency=IDEAL)
    stats = engine.run(Workload(jobs))
    rows = job_rows(ledger)
    summary = summarize(ledger, rows, policy=run_policy.label, wall_s=stats.wall_s)
    summary.update(outputs.runtime_summary(stats, executor, ledger, 0, round_s))
    usage, why = accounting.of_leases(slurm, executor.records)  # sacct's typed records (why not: none kept)
    summary.update(emulation_dilation=executor.dilation, slurm_partition=run.partition,
                   slurm_jobs=len(executor.records), gpu_seconds=gpu_seconds(executor.records),
                   sacct_gpu_seconds=None if why else accounting.by_job(usage), **({"sacct_error": why} if why else {}))
    result = RuntimeResult(summary, rows, executor.jobs, executor.tracker.table(), executor.tracker.mean_table(),
                           prior, executor.rounds, stats, events, executor.tracker.entries())
    return SlurmResult(result, list(executor.records), run.partition, usage)


def gpu_seconds(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Job id -> GPU type -> GPU-seconds its leases held (lease seconds x GPUs), from the lease records."""
    out: dict[str, dict[str, float]] = {}
    for r in records:
        by_type = out.setdefault(str(r["job"]), {})
        by_type[r["gpu_type"]] = by_type.get(r["gpu_type"], 0.0) + r["seconds"] * r["gpus"]
    return out


def write_outputs(res: SlurmResult, folder: Path) -> None:
    """``hadar run``'s outputs, plus ``leases.jsonl``: one line per lease (its Slurm job id, node, GPU type), and
    ``accounting.csv`` where Slurm keeps accounting (sacct's GPU-seconds per Slurm job and GPU type)."""
    outputs.write_outputs(res.result, folder)
    if res.usage:
        accounting.write_csv(res.usage, Path(folder) / accounting.CSV)
    with (Path(folder) / "leases.jsonl").open("w") as f:
        for rec in res.leases:
            f.write(json.dumps(rec) + "\n")
