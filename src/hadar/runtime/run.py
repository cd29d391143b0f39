"""Assemble and run real training: the library entry point behind ``hadar run``.

Same Engine, policy, planner and ledger as ``hadar.sim.run.simulate``; only the executor
(``RayExecutor``) and the clock (``WallClock``) differ. Every job is a ``train(ctx)``
function (``hadar.job``): a job file's bundled ``job_type`` is resolved into one first.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hadar.build import policy_for_run
from hadar.clock import WallClock
from hadar.engine import Hooks, RunStats
from hadar.errors import InputError
from hadar.job.entrypoint import check as check_entrypoint
from hadar.mechanism.admission import validate_jobs
from hadar.metrics.summary import JobRow, job_rows, summarize
from hadar.model.cluster import Cluster
from hadar.model.fork_efficiency import IDEAL
from hadar.model.fork_model import ForkSetting
from hadar.model.job import Job
from hadar.model.plan import RoundPlan
from hadar.model.throughput import ThroughputTable
from hadar.policies.base import Policy
from hadar.policies.profiles import PolicySpec
from hadar.runtime import aggregate, backend, builder, emulation, outputs, session, workloads
from hadar.runtime.pool import WorkerPool
from hadar.runtime.progress import JobProgress
from hadar.runtime.records import RoundStats
from hadar.runtime.tracker import shape_table
from hadar.sources import Workload

log = logging.getLogger(__name__)
MAX_ARRIVAL_S = 86_400.0  # hadar run waits for arrivals in real time: at most a day
PAIR_WORKERS = ("lazy", "eager")  # when each GPU's second worker (space sharing) starts


@dataclass(slots=True)
class RuntimeResult:
    summary: dict[str, Any]
    rows: list[JobRow]
    quality: dict[int, JobProgress]  # the runtime's record of every job: metrics, failures, checkpoint, log
    measured: ThroughputTable  # moving averages and estimates: the policies' final view
    measured_mean: ThroughputTable  # whole-run means (what a simulation of this run should use)
    prior: ThroughputTable  # the table the run started from (estimates, or what --throughputs gave)
    rounds: list[RoundStats]
    stats: RunStats
    events: list[dict[str, Any]] = field(default_factory=list)
    throughputs: list[dict[str, Any]] = field(default_factory=list)  # the final table, entry by entry, with kinds


def prepare_jobs(jobs: Sequence[Job], *, max_arrival_s: float | None = MAX_ARRIVAL_S) -> list[Job]:
    """The jobs as the runtime runs them, checked before anything starts (``InputError`` naming the problem):
    bundled job types resolved into entrypoints, every entrypoint found without running it, ``emulate_as``
    rows known, jobs sharing a name (their throughput key) identical, arrivals within ``max_arrival_s``."""
    ratios = emulation.SpeedRatios(_gavel_table(), ())
    out: list[Job] = []
    seen: dict[str, Job] = {}
    checked: set[tuple[str, tuple[str, ...]]] = set()  # each entrypoint is read once, however many jobs name it
    for given in jobs:
        job = workloads.resolve_job(given)
        assert job.train is not None
        where = job.origin or f"job {job.job_id}"
        if max_arrival_s is not None and job.arrival_s > max_arrival_s:
            raise InputError(f"{where}: arrival_s {job.arrival_s:g} is more than {max_arrival_s:g} s away; hadar run "
                             "waits for arrivals in real time")
        if (job.train.entrypoint, job.train.search_path) not in checked:
            try:
                check_entrypoint(job.train.entrypoint, job.train.search_path)
            except InputError as e:
                raise InputError(f"{where}: {e}") from None
            checked.add((job.train.entrypoint, job.train.search_path))
        ratios.check(job.train.emulate_as, where)
        other = seen.setdefault(job.job_type, job)
        if _identity(other) != _identity(job):
            raise InputError(f"{where}: another job is named {job.train.name!r} with a different entrypoint, args or "
                             "emulate_as; jobs of one name share throughput measurements: give them distinct names")
        out.append(job)
    return out


@functools.cache
def _gavel_table() -> ThroughputTable:
    """Gavel's bundled table, read once (it is immutable): the service checks every submission with it."""
    return ThroughputTable.load()


def _identity(job: Job) -> tuple[str, str, str]:
    assert job.train is not None
    return job.train.entrypoint, job.train.args_json, job.train.emulate_as


def check_writable(folder: Path, what: str) -> Path:
    """Create ``folder`` if needed and check a file can be written there; ``InputError`` naming ``what`` if not."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{what} {folder} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".hadar-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise InputError(f"{what} {folder} is not writable: {e.strerror or e}") from None
    return folder


@dataclass(frozen=True, slots=True)
class RunOptions:
    """Everything of one real run but its jobs, cluster and policy; checked when made (``InputError``).

    ``dilation`` (emulation only): stretch every step this much on top of the GPU type's speed factor;
    default ``GPUs / cores`` (at least 1), so the emulated workers never need more CPU than the machine has.
    HadarE: ``fork_optimizer``, the merged optimizer state is the ``largest`` copy's (most steps) or the
    copies' ``average``; ``fork_efficiency``, what copies are worth to the forking planner (default ideal).
    ``log_dir``: one log per job. ``pair_workers``: space sharing's second workers start lazily or eagerly.
    ``on_event``, ``on_progress``, ``on_dispatch``, ``on_pool``: listeners (events, jobs ended, a round's
    leases dispatched, the worker pool once up)."""

    round_s: float = 10.0
    address: str | None = None
    seed: int = 0
    checkpoint_dir: Path | None = None
    log_dir: Path | None = None
    throughputs: ThroughputTable | None = None
    dashboard_host: str | None = None
    on_event: Callable[[dict[str, Any]], None] | None = None
    on_progress: Callable[[int], None] | None = None
    on_dispatch: Callable[[int, RoundPlan], None] | None = None
    on_pool: Callable[[WorkerPool], None] | None = None
    grace_s: float = 30.0
    dilation: float | None = None
    fork_optimizer: str = "largest"
    profiles: Mapping[str, PolicySpec] | None = None
    pair_workers: str = "lazy"
    fork_efficiency: ForkSetting | None = None

    def __post_init__(self) -> None:
        _check_options(self.round_s, self.fork_optimizer, self.dilation, self.pair_workers)


def run(jobs: list[Job], cluster: Cluster | None, policy: str | Policy, **options: Any) -> RuntimeResult:
    """Train ``jobs`` for real under ``policy``; returns the same summary as ``simulate`` (real seconds).
    ``options``: the fields of ``RunOptions``."""
    return run_with(jobs, cluster, policy, RunOptions(**options))


def run_with(jobs: list[Job], cluster: Cluster | None, policy: str | Policy, o: RunOptions) -> RuntimeResult:
    """``run`` with its options made."""
    if not jobs:
        raise InputError("no jobs to run")
    jobs = prepare_jobs(jobs)
    ckpt = check_writable(o.checkpoint_dir or Path(tempfile.mkdtemp(prefix="hadar-ckpt-")), "checkpoint folder")
    if o.log_dir is not None:
        check_writable(o.log_dir, "log folder")
    run_policy = policy_for_run(policy, seed=o.seed, profiles=o.profiles)
    pol = run_policy.policy
    if cluster is not None:  # reject impossible jobs before starting anything
        validate_jobs(jobs, cluster, shape_table(jobs, cluster), spans_types=pol.traits.spans_types)
    sess = backend.start_session(cluster, o.address, o.dashboard_host)
    recorder = builder.MemoryRecorder(o.on_event)  # the run's events; its files come from them
    be: backend.Backend | None = None
    try:
        validate_jobs(jobs, sess.cluster, shape_table(jobs, sess.cluster), spans_types=pol.traits.spans_types)
        be = backend.start_backend(sess, WallClock, backend.BackendOptions(  # t = 0 once every worker is up
            checkpoint_dir=ckpt, log_dir=o.log_dir, seed=o.seed, dilation=o.dilation, grace_s=o.grace_s,
            given=o.throughputs, fork_optimizer=o.fork_optimizer, eager_partners=o.pair_workers == "eager",
            on_event=recorder, on_dispatch=o.on_dispatch, on_pool=o.on_pool))
        executor = be.executor
        prior = executor.admit(list(jobs))  # every job registered from the start: the table the run starts from
        engine, ledger = builder.build_engine(  # the service's builder: the file's jobs as the source, in memory
            pol, be, builder.EngineOptions(round_s=o.round_s, seed=o.seed, fork_efficiency=o.fork_efficiency or IDEAL),
            Hooks(on_event=recorder, on_progress=o.on_progress, recorder=recorder))
        stats = engine.run(Workload(jobs))
    finally:
        if be is not None:
            be.close()
        elif sess.owned:
            session.shutdown()
    assert be is not None  # it ran
    rows = job_rows(ledger)
    summary = summarize(ledger, rows, policy=run_policy.label, wall_s=stats.wall_s)
    summary.update(outputs.runtime_summary(stats, executor, ledger, be.pool.replaced, o.round_s))
    summary.update(emulated=sess.emulated, ray_auth=sess.auth, emulation_dilation=be.dilation or 1.0)
    return RuntimeResult(summary, rows, executor.jobs, executor.tracker.table(), executor.tracker.mean_table(), prior,
                         executor.rounds, stats, recorder.events, executor.tracker.entries())


def _check_options(round_s: float, fork_optimizer: str, dilation: float | None, pair_workers: str = "lazy") -> None:
    if pair_workers not in PAIR_WORKERS:
        raise InputError(f"pair workers must be one of {', '.join(PAIR_WORKERS)}, got {pair_workers!r}")
    if not (math.isfinite(round_s) and round_s > 0):
        raise InputError(f"round length must be a positive number of seconds, got {round_s}")
    if fork_optimizer not in aggregate.OPTIMIZER_POLICIES:
        raise InputError(f"fork optimizer policy must be one of {', '.join(aggregate.OPTIMIZER_POLICIES)}, "
                         f"got {fork_optimizer!r}")
    if dilation is not None and not (math.isfinite(dilation) and dilation >= 1):
        raise InputError(f"dilation must be a number >= 1, got {dilation}")


quality_rows = outputs.quality_rows
write_outputs = outputs.write_outputs
to_gavel_json = outputs.to_gavel_json
__all__ = ["RunOptions", "RuntimeResult", "check_writable", "prepare_jobs", "quality_rows", "run", "run_with",
           "to_gavel_json", "write_outputs"]

