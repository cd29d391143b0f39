"""The Ray wiring, once: a session, its worker pool and the executor that trains on it.

``hadar run`` (``runtime.run``) and ``hadar serve`` (``service.runtime``) both start their
training back end here: Ray started locally (an emulated cluster) or joined (``--address``),
one worker per GPU, the ``RayExecutor`` with a node watcher following the Ray cluster's nodes.
What differs between them is in ``BackendOptions``: the service tags checkpoints with its store's
run id; ``hadar run`` may be given known throughputs, starts space sharing's second workers
eagerly if asked, and listens for each round's dispatch and for the pool.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hadar.clock import Clock
from hadar.errors import InputError
from hadar.model.cluster import Cluster
from hadar.model.plan import RoundPlan
from hadar.model.throughput import ThroughputTable
from hadar.runtime import emulation, session
from hadar.runtime.executor import RayExecutor
from hadar.runtime.nodes import NodeWatcher
from hadar.runtime.pool import WorkerPool
from hadar.runtime.tracker import ThroughputTracker


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """How the executor is built: where checkpoints and per-job logs go, the seed, the run id its
    checkpoints carry (None: a fresh one), the emulation's ``dilation`` (None: GPUs / cores, at least 1),
    the grace a lease gets past its round, known throughputs (``given``), HadarE's ``fork_optimizer``,
    whether space sharing's second workers start with the others (``eager_partners``), and the listeners:
    events, each round's dispatch, the pool once it is up."""

    checkpoint_dir: Path
    log_dir: Path | None = None
    seed: int = 0
    run_id: str | None = None
    dilation: float | None = None
    grace_s: float = 30.0
    given: ThroughputTable | None = None
    fork_optimizer: str = "largest"
    eager_partners: bool = False
    on_event: Callable[[dict[str, Any]], None] | None = None
    on_dispatch: Callable[[int, RoundPlan], None] | None = None
    on_pool: Callable[[WorkerPool], None] | None = None


@dataclass(slots=True)
class Backend:
    """What trains: the Ray session, its workers and the executor (``executor.tracker``: measured rates);
    ``dilation``: the emulation's stretch (None on real GPUs)."""

    sess: session.RaySession
    pool: WorkerPool
    executor: RayExecutor
    dilation: float | None = None

    @property
    def tracker(self) -> ThroughputTracker:
        return self.executor.tracker

    def close(self) -> None:
        self.pool.shutdown()
        if self.sess.owned:
            session.shutdown()


def start_session(cluster: Cluster | None, address: str | None, dashboard_host: str | None = None
                  ) -> session.RaySession:
    """Join the Ray cluster at ``address``, or start a local one emulating ``cluster``."""
    if address is not None:
        return session.connect(address, cluster)
    if cluster is None:
        raise InputError("a local (emulated) run needs a cluster")
    return session.start_local(cluster, dashboard_host=dashboard_host)


def start_backend(sess: session.RaySession, clock: Callable[[], Clock], o: BackendOptions) -> Backend:
    """Workers up, then the executor on ``clock()`` (called once the workers are up: a fresh wall clock
    starts at 0 there); the workers are shut down again if anything fails on the way."""
    cluster = sess.cluster
    dil = (o.dilation or emulation.dilation(cluster.num_gpus, os.cpu_count() or 1)) if sess.emulated else None
    pool = WorkerPool(cluster, sess.pins)
    try:
        pool.start(partners=o.eager_partners)
        if o.on_pool is not None:
            o.on_pool(pool)
        executor = RayExecutor(cluster, pool, clock(), checkpoint_dir=o.checkpoint_dir, log_dir=o.log_dir,
                               ratios=emulation.SpeedRatios(ThroughputTable.load(), cluster.gpu_types), dilation=dil,
                               given=o.given, on_event=o.on_event, on_dispatch=o.on_dispatch, grace_s=o.grace_s,
                               seed=o.seed, fork_optimizer=o.fork_optimizer, run_id=o.run_id,
                               nodes=NodeWatcher(pool, joins=sess.address is not None))  # dead nodes leave, new join
    except BaseException:
        pool.shutdown()
        raise
    return Backend(sess, pool, executor, dil)
