"""The service's training back end: Ray, the worker pool, the executor, the throughput tracker.

The same pieces ``hadar run`` assembles (``runtime.run``), built once for a
server that does not know its jobs in advance: the scheduler's starting
table covers every registered workload, the checkpoints live in the state
directory and carry the store's run id (so a restarted server restores
them), the measured throughputs come back from the store, and a node
watcher follows the Ray cluster's nodes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hadar.clock import Clock, WallClock
from hadar.model.cluster import Cluster, Node
from hadar.model.throughput import ThroughputTable
from hadar.runtime import emulation, session, workloads
from hadar.runtime.executor import RayExecutor
from hadar.runtime.nodes import NodeWatcher
from hadar.runtime.pool import WorkerPool
from hadar.runtime.tracker import ThroughputTracker

log = logging.getLogger(__name__)
GAVEL_TYPES = ("v100", "p100", "k80")


class ServiceClock(WallClock):
    """Service time: seconds since the service's first start, continuing across restarts from ``start_s``."""

    def __init__(self, start_s: float = 0.0) -> None:
        super().__init__()
        self.start_s = float(start_s)

    def now(self) -> float:
        return self.start_s + super().now()


@dataclass(slots=True)
class Backend:
    """What trains: the Ray session, its workers, the executor and the tracker of measured rates."""

    sess: session.RaySession
    pool: WorkerPool
    executor: RayExecutor
    tracker: ThroughputTracker
    prior: ThroughputTable

    def close(self) -> None:
        self.pool.shutdown()
        if self.sess.owned:
            session.shutdown()


def shape_table(cluster: Cluster) -> ThroughputTable:
    """Every workload's (job type, GPU count) keys with dummy rates: enough to check a submission
    before Ray is up (the real table has the same keys)."""
    return emulation.prior_table(dict.fromkeys(workloads.names(), 1.0), _with_types(cluster),
                                 ThroughputTable.load())


def _with_types(cluster: Cluster) -> Cluster:
    """``cluster`` plus a placeholder node of each of Gavel's types it lacks, so the starting table also
    has rates for nodes of those types that join later."""
    extra = tuple(Node(f"_{t}", t, 1) for t in GAVEL_TYPES if t not in cluster.gpu_types)
    return Cluster(cluster.nodes + extra)


def start_session(cluster: Cluster | None, address: str | None) -> session.RaySession:
    if address is not None:
        return session.connect(address, cluster)
    assert cluster is not None
    return session.start_local(cluster)


def start_backend(sess: session.RaySession, clock: Clock, checkpoint_dir: Path, *, seed: int, run_id: str,
                  on_event: Callable[[dict[str, Any]], None], measured: list[Any], dilation: float | None = None,
                  grace_s: float = 30.0) -> Backend:
    """Workers up, table calibrated, the tracker holding what the store measured before."""
    from hadar.runtime.run import calibrate

    cluster = sess.cluster
    job_types = list(workloads.names())
    gavel = ThroughputTable.load()
    factors: dict[tuple[str, int, str], float] = {}
    if sess.emulated:
        dil = dilation or emulation.dilation(cluster.num_gpus, os.cpu_count() or 1)
        factors = {key: f / dil for key, f in emulation.speed_factors(gavel, job_types, cluster).items()}
    native = calibrate(job_types)
    prior = emulation.prior_table(native, _with_types(cluster), gavel, factors or None)
    tracker = ThroughputTracker(prior)
    restore_tracker(tracker, measured)
    pool = WorkerPool(cluster, sess.pins)
    pool.start()
    executor = RayExecutor(cluster, pool, clock, checkpoint_dir=checkpoint_dir,
                           speed=(lambda jt, k, t: factors.get((jt, k, t), 1.0)) if factors else None,
                           tracker=tracker, on_event=on_event, grace_s=grace_s, seed=seed)
    executor.run_id = run_id  # checkpoints of this service's earlier lives are its own
    executor.nodes = NodeWatcher(pool, joins=sess.address is not None)
    return Backend(sess, pool, executor, tracker, prior)


def restore_tracker(tracker: ThroughputTracker, rows: list[Any]) -> None:
    """Measured rates the store kept (``throughputs`` rows) back into a fresh tracker."""
    for r in rows:
        key = (str(r["job_type"]), int(r["k"]), str(r["gpu_type"]))
        tracker.measured[key] = float(r["rate"])
        tracker.samples[key] = int(r["samples"])
        tracker.totals[key] = (float(r["steps"]), float(r["seconds"]))


def tracker_rows(tracker: ThroughputTracker) -> list[tuple[str, int, str, float, int, float, float]]:
    return [(jt, k, t, rate, tracker.samples.get((jt, k, t), 0), *tracker.totals.get((jt, k, t), (0.0, 0.0)))
            for (jt, k, t), rate in sorted(tracker.measured.items())]


def checkpoint_steps(path: Path, run_id: str) -> float:
    """Progress (table steps) in a job's checkpoint written by this service, else 0."""
    from hadar.runtime import checkpoint

    try:
        ckpt = checkpoint.load(path)
    except (OSError, RuntimeError, ValueError, EOFError) as e:
        log.warning("unreadable checkpoint %s (%s): the job starts over", path, e)
        return 0.0
    if ckpt is None or ckpt.get("run_id") != run_id:
        return 0.0
    return float(ckpt.get("steps", 0.0))
