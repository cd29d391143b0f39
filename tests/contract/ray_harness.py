"""The Ray executor under the executor contract: what ``test_executor_contract.ray_executor`` is built from.

``RayExecutor`` runs on the contract's cluster (``tests.helpers.two_type_cluster``: two emulated nodes,
2 V100 + 2 K80) in the test session's Ray instance. Its job is the runtime tests' user job
(``tests/runtime/jobs/regression.py``) with ``step_s``: every step sleeps ``STEP_S`` on top of a tiny
linear-regression update, so a step's time is dominated by a sleep, not by how busy the shared cores
are, and measured rates stay steady. The emulation stretches each step by the GPU type's speed factor
(the average Gavel row: K80 ~0.3 of V100) and by the dilation ``hadar run`` would use (GPUs / cores).

Starting four worker actors (each imports torch) takes seconds on a small machine, so the pool is
started once for the contract tests (``conftest.ray_contract_pool``); every test gets a fresh executor (its
own run id, checkpoints and tracker) on it. The pool is also where the rates come from: warm-up rounds
measure the job on each GPU type with 1 and 2 GPUs, and the executor's own table of those measurements
(``ThroughputTracker.mean_table``) is the harness's table and every test executor's ``given`` table,
as a ``hadar run --throughputs`` of an earlier run would be.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from hadar.clock import WallClock
from hadar.model.job import Job, TrainSpec
from hadar.model.plan import Lease, RoundPlan
from hadar.model.throughput import ThroughputTable
from hadar.runtime import emulation
from hadar.runtime.executor import RayExecutor
from hadar.runtime.pool import WorkerPool
from tests.helpers import two_type_cluster

JOB_FILE = Path(__file__).resolve().parent.parent / "runtime" / "jobs" / "regression.py"
JOB_TYPE = "contract-regression"
STEP_S = 0.02  # seconds each step sleeps: the step time is this, stretched by the emulated GPU's speed
SPEC = TrainSpec(entrypoint=f"{JOB_FILE}:train", name=JOB_TYPE, args_json=json.dumps({"step_s": STEP_S}))
WARM_UP_S = 3.0  # each warm-up round: ~60 steps on a V100, ~20 on a K80 (rates from >= 2 s of steps)
GRACE_S = 30.0  # the executor's grace past a lease's deadline (its default): a lease only fails by overrunning it
READY_S = 120.0  # how long a worker actor may take to start (it imports torch) on a busy machine


@dataclass(frozen=True)
class WarmPool:
    """The session's worker pool on the contract's cluster and what its warm-up rounds measured."""

    pool: WorkerPool
    table: ThroughputTable  # the job's measured steps/s on every GPU type, 1 and 2 GPUs (whole-lease means)
    dilation: float


def resolve(job: Job) -> Job:
    """A contract job (of ``JOB_TYPE``) as the runtime runs it: with its ``train(ctx)`` function."""
    return replace(job, train=SPEC)


def executor(warm: WarmPool, checkpoint_dir: Path, given: ThroughputTable | None) -> RayExecutor:
    """A fresh executor (new run id, clock, tracker) on the session's pool."""
    cluster = warm.pool.cluster
    return RayExecutor(cluster, warm.pool, WallClock(), checkpoint_dir=checkpoint_dir,
                       ratios=emulation.SpeedRatios(ThroughputTable.load(), cluster.gpu_types),
                       dilation=warm.dilation, given=given, grace_s=GRACE_S)


def start(folder: Path) -> WarmPool:
    """Start the pool and measure the job: one round of four 1-GPU leases, one of two 2-GPU leases."""
    cluster = two_type_cluster()
    pool = WorkerPool(cluster, ready_timeout_s=READY_S)
    pool.start()
    warm = WarmPool(pool, ThroughputTable({}), emulation.dilation(cluster.num_gpus, os.cpu_count() or 1))
    ex = executor(warm, folder, given=None)
    ones = tuple(Lease(g, JOB_TYPE, 1, (g,), 1e12) for g in range(cluster.num_gpus))
    twos = tuple(Lease(10 + n, JOB_TYPE, 2, cluster.gpus_of_node(n), 1e12) for n in range(len(cluster.nodes)))
    for leases in (ones, twos):
        for le in leases:
            ex.register(resolve(Job(le.job_id, JOB_TYPE, le.scale_factor, le.max_steps)))
        report = ex.run_round(RoundPlan(ex.clock.now(), WARM_UP_S, leases))
        failed = [r.error for r in report.results if r.failed]
        assert not failed, f"a warm-up lease failed: {failed}"
    assert all(ex.tracker.kind(JOB_TYPE, k, t) == "measured" for k in (1, 2) for t in cluster.gpu_types)
    return replace(warm, table=ex.tracker.mean_table())


def kill(pool: WorkerPool, gpu: int) -> None:
    """Kill the worker actor of ``gpu`` and wait until Ray says it is dead: the next lease there fails."""
    import ray

    actor = pool.actor(gpu)
    pool.kill(gpu)
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        try:
            ray.get(actor.info.remote(), timeout=READY_S)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError(f"the worker of GPU {gpu} was killed but still answers")


def revive(pool: WorkerPool) -> None:
    """After a test: every GPU has a live, started worker (a dead one is replaced), so that the next test's
    first leases do not wait for an actor to start."""
    import ray

    for g in range(pool.cluster.num_gpus):
        try:
            ray.get(pool.actor(g).info.remote(), timeout=READY_S)
        except ray.exceptions.RayActorError:
            pool.replace(g)
            ray.get(pool.actor(g).info.remote(), timeout=READY_S)
