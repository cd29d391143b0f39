"""The service's training back end: Ray, the worker pool and the executor (which owns the throughput tracker).

The same pieces ``hadar run`` assembles (``runtime.run``), built once for a server that does
not know its jobs in advance: each job is registered with the executor when it enters the
scheduler (its row joins the tracker's table then), the checkpoints and per-job logs live in
the state directory, the executor carries the store's run id (so a restarted server resumes
from its own checkpoints), the measured throughputs come back from the store, and a node
watcher follows the Ray cluster's nodes.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hadar.clock import Clock, WallClock
from hadar.model.cluster import Cluster
from hadar.model.job import Job
from hadar.model.throughput import ThroughputTable
from hadar.runtime import checkpoint, emulation, session
from hadar.runtime.executor import RayExecutor
from hadar.runtime.nodes import NodeWatcher
from hadar.runtime.pool import WorkerPool
from hadar.runtime.progress import JobProgress
from hadar.runtime.tracker import ThroughputTracker
from hadar.service.store import ThroughputRow

log = logging.getLogger(__name__)


class ServiceClock(WallClock):
    """Service time: seconds since the service's first start, continuing across restarts from ``start_s``."""

    def __init__(self, start_s: float = 0.0) -> None:
        super().__init__()
        self.start_s = float(start_s)

    def now(self) -> float:
        return self.start_s + super().now()


@dataclass(slots=True)
class Backend:
    """What trains: the Ray session, its workers and the executor (``executor.tracker``: measured rates)."""

    sess: session.RaySession
    pool: WorkerPool
    executor: RayExecutor

    @property
    def tracker(self) -> ThroughputTracker:
        return self.executor.tracker

    def close(self) -> None:
        self.pool.shutdown()
        if self.sess.owned:
            session.shutdown()


def shape_table(jobs: Sequence[Job], cluster: Cluster) -> ThroughputTable:
    """A table with every job's row (job type, GPU count) on the cluster's types, all rates positive:
    enough to check that a submission fits before it is stored (the tracker's table has the same keys)."""
    tracker = ThroughputTracker(cluster.gpu_types)
    for job in jobs:
        tracker.add(job.job_type, job.scale_factor)
    return tracker.table()


def start_session(cluster: Cluster | None, address: str | None) -> session.RaySession:
    if address is not None:
        return session.connect(address, cluster)
    assert cluster is not None
    return session.start_local(cluster)


def start_backend(sess: session.RaySession, clock: Clock, checkpoint_dir: Path, log_dir: Path, *, seed: int,
                  run_id: str, on_event: Callable[[dict[str, Any]], None], measured: Sequence[Any],
                  dilation: float | None = None, grace_s: float = 30.0) -> Backend:
    """Workers up, the executor built (checkpoints tagged with ``run_id``), its tracker holding what the
    store measured before (``measured``: rows of the ``throughputs`` table)."""
    cluster = sess.cluster
    dil = (dilation or emulation.dilation(cluster.num_gpus, os.cpu_count() or 1)) if sess.emulated else None
    pool = WorkerPool(cluster, sess.pins)
    try:
        pool.start()
        executor = RayExecutor(cluster, pool, clock, checkpoint_dir=checkpoint_dir, log_dir=log_dir,
                               ratios=emulation.SpeedRatios(ThroughputTable.load(), cluster.gpu_types),
                               dilation=dil, on_event=on_event, grace_s=grace_s, seed=seed, run_id=run_id,
                               nodes=NodeWatcher(pool, joins=sess.address is not None))
        restore_tracker(executor.tracker, measured)
    except BaseException:
        pool.shutdown()
        raise
    return Backend(sess, pool, executor)


def restore_tracker(tracker: ThroughputTracker, rows: Sequence[Any]) -> None:
    """Measured rates the store kept (``throughputs`` rows) back into a fresh tracker."""
    for r in rows:
        key = (str(r["job_type"]), int(r["k"]), str(r["gpu_type"]))
        tracker.restore(key, float(r["rate"]), int(r["samples"]), float(r["steps"]), float(r["seconds"]))


def tracker_rows(tracker: ThroughputTracker) -> list[ThroughputRow]:
    """The tracker's measured entries as rows of the store's ``throughputs`` table."""
    return [(jt, k, t, rate, samples, steps, seconds)
            for (jt, k, t), rate, samples, steps, seconds in tracker.measurements()]


@dataclass(frozen=True, slots=True)
class Saved:
    """What a job's committed checkpoint holds: its progress (steps) and the next step number."""

    steps: float
    iteration: int


def saved_progress(path: Path, run_id: str, job_id: int) -> Saved | None:
    """The progress in job ``job_id``'s committed checkpoint if this service wrote it (its run id), else None
    (no checkpoint, another run's, or unreadable: the job starts over)."""
    try:
        meta = checkpoint.meta_of(checkpoint.load(path))
    except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError) as e:
        log.warning("unreadable checkpoint %s (%s): the job starts over", path, e)
        return None
    if meta.get("run_id") != run_id or meta.get("job_id") != job_id:
        return None
    return Saved(float(meta.get("steps", 0.0)), int(meta.get("iteration", 0)))


def resume(info: JobProgress, saved: Saved) -> None:
    """Set a registered job's runtime progress to its committed checkpoint's: its next lease restores that
    file (``saved_steps``) and continues counting steps from there."""
    info.steps, info.iteration, info.saved_steps = saved.steps, saved.iteration, saved.steps
