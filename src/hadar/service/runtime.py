"""The service's training back end: Ray, the worker pool and the executor (which owns the throughput tracker).

The same back end ``hadar run`` starts (``runtime.backend``, the one Ray wiring), for a server that
does not know its jobs in advance: each job is registered with the executor when it enters the
scheduler (its row joins the tracker's table then), the checkpoints and per-job logs live in
the state directory, the executor carries the store's run id (so a restarted server resumes
from its own checkpoints), the measured throughputs come back from the store, and a node
watcher follows the Ray cluster's nodes.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hadar.clock import Clock, WallClock
from hadar.model.cluster import Cluster
from hadar.runtime import backend, checkpoint, session
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


Backend = backend.Backend


def start_session(cluster: Cluster | None, address: str | None) -> session.RaySession:
    return backend.start_session(cluster, address)


def start_backend(sess: session.RaySession, clock: Clock, options: backend.BackendOptions,
                  measured: Sequence[Any]) -> Backend:
    """The runtime's back end (``runtime.backend``: workers up, the executor built, its checkpoints tagged
    with ``options.run_id``) on the service's clock, its tracker holding what the store measured before
    (``measured``: rows of the ``throughputs`` table)."""
    be = backend.start_backend(sess, lambda: clock, options)
    try:
        restore_tracker(be.tracker, measured)
    except BaseException:
        be.pool.shutdown()
        raise
    return be


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
    info.resume_at(saved.steps, saved.iteration)
