"""Assemble and run real training: the library entry point behind ``hadar run``.

Same Engine, policy, planner and ledger as ``hadar.sim.run.simulate``; only
the executor (``RayExecutor``) and the clock (``WallClock``) differ.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hadar.build import policy_for_run, wire
from hadar.clock import WallClock, elapsed_s
from hadar.engine import RunStats
from hadar.errors import InputError
from hadar.mechanism.admission import validate_jobs
from hadar.metrics.summary import JobRow, job_rows, summarize
from hadar.model.cluster import Cluster
from hadar.model.job import Job
from hadar.model.plan import RoundPlan
from hadar.model.throughput import ThroughputTable
from hadar.policies.base import Policy
from hadar.policies.profiles import PolicySpec
from hadar.runtime import aggregate, emulation, session, workloads
from hadar.runtime.executor import JobProgress, RayExecutor, RoundStats
from hadar.runtime.nodes import NodeWatcher
from hadar.runtime.pool import WorkerPool
from hadar.runtime.tracker import ThroughputTracker
from hadar.sources import Workload

log = logging.getLogger(__name__)
RESOLVE_ON_CHANGE = 0.25  # re-solve when a measured rate moves this much (relative) from what the policy saw


@dataclass(slots=True)
class RuntimeResult:
    summary: dict[str, Any]
    rows: list[JobRow]
    quality: dict[int, JobProgress]
    measured: ThroughputTable  # moving averages: the policies' final view
    measured_mean: ThroughputTable  # whole-run means (what a simulation of this run should use)
    prior: ThroughputTable
    rounds: list[RoundStats]
    stats: RunStats
    events: list[dict[str, Any]] = field(default_factory=list)


def resolve_jobs(jobs: list[Job]) -> list[Job]:
    """Map job-type aliases (``resnet``, ``lstm``, ...) to registered workload names."""
    return [dataclasses.replace(j, job_type=workloads.resolve(j.job_type)) for j in jobs]


def calibrate(job_types: list[str], seconds: float = 0.3) -> dict[str, float]:
    """Native steps/s of one single-threaded worker per job type (measured here, in this process)."""
    import torch

    torch.set_num_threads(1)
    rates = {}
    for jt in job_types:
        wl = workloads.get(jt)
        state = wl.new_state(seed=0)
        for _ in range(3):
            wl.train_step(state, 0, 1, 0)
        n, t0 = 0, elapsed_s()
        while elapsed_s(t0) < seconds:
            wl.train_step(state, 0, 1, 0)
            n += 1
        rates[jt] = n / elapsed_s(t0)
    return rates


def run(jobs: list[Job], cluster: Cluster | None, policy: str | Policy, *, round_s: float = 10.0,
        address: str | None = None, seed: int = 0, checkpoint_dir: Path | None = None,
        throughputs: ThroughputTable | None = None, dashboard_host: str | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None, on_progress: Callable[[int], None] | None = None,
        on_dispatch: Callable[[int, RoundPlan], None] | None = None, on_pool: Callable[[WorkerPool], None] | None = None,
        grace_s: float = 30.0, dilation: float | None = None, fork_optimizer: str = "largest",
        profiles: Mapping[str, PolicySpec] | None = None) -> RuntimeResult:
    """Train ``jobs`` for real under ``policy``; returns the same summary as ``simulate`` (real seconds).

    ``dilation`` (emulation only): stretch every step this much on top of
    the GPU type's speed factor; default ``GPUs / cores`` (at least 1), so
    the emulated workers never need more CPU than the machine has.
    ``fork_optimizer`` (HadarE): the merged optimizer state of a forked job is the ``largest`` copy's
    (most samples) or the copies' ``average``.
    """
    if round_s <= 0:
        raise InputError(f"round length must be positive, got {round_s}")
    if not jobs:
        raise InputError("no jobs to run")
    if fork_optimizer not in aggregate.OPTIMIZER_POLICIES:
        raise InputError(f"fork optimizer policy must be one of {', '.join(aggregate.OPTIMIZER_POLICIES)}, "
                         f"got {fork_optimizer!r}")
    jobs = resolve_jobs(jobs)
    run_policy = policy_for_run(policy, seed=seed, profiles=profiles)
    pol = run_policy.policy
    spans = pol.traits.spans_types
    if cluster is not None:  # reject impossible jobs before starting anything
        validate_jobs(jobs, cluster, throughputs or _shape_table(jobs, cluster), spans_types=spans)
    if address is None:
        if cluster is None:
            raise InputError("a local (emulated) run needs a cluster")
        sess = session.start_local(cluster, dashboard_host=dashboard_host)
    else:
        sess = session.connect(address, cluster)
    cluster = sess.cluster
    events: list[dict[str, Any]] = []
    emit = _tee(events, on_event)
    pool = WorkerPool(cluster, sess.pins)
    try:
        dil, factors, prior = _speeds(jobs, sess, throughputs, dilation)
        validate_jobs(jobs, cluster, prior, spans_types=spans)
        pool.start()
        if on_pool is not None:
            on_pool(pool)
        clock = WallClock()  # t = 0 once every worker is up
        tracker = ThroughputTracker(prior)
        executor = RayExecutor(cluster, pool, clock, checkpoint_dir=checkpoint_dir or Path(tempfile.mkdtemp(
            prefix="hadar-ckpt-")), speed=(lambda jt, k, t: factors.get((jt, k, t), 1.0)) if factors else None,
            tracker=tracker, on_event=emit, on_dispatch=on_dispatch,
            grace_s=grace_s, seed=seed, fork_optimizer=fork_optimizer)
        executor.nodes = NodeWatcher(pool, joins=address is not None)  # dead nodes leave the view, new ones join
        engine, ledger = wire(pol, cluster, prior, executor, clock, round_s=round_s, seed=seed, on_event=emit,
                              on_progress=on_progress)
        executor.on_table = lambda t: ledger.update_table(t, resolve_if_moved=RESOLVE_ON_CHANGE)  # measured rates
        stats = engine.run(Workload(jobs))
    finally:
        pool.shutdown()
        if sess.owned:
            session.shutdown()
    rows = job_rows(ledger)
    summary = summarize(ledger, rows, policy=run_policy.label, wall_s=stats.wall_s)
    summary.update(_runtime_summary(stats, executor, pool, sess, round_s))
    summary["emulation_dilation"] = dil
    return RuntimeResult(summary, rows, executor.jobs, tracker.table(), tracker.mean_table(), prior, executor.rounds,
                         stats, events)


def _shape_table(jobs: list[Job], cluster: Cluster) -> ThroughputTable:
    """A table with the right keys (job type, GPU count) and dummy rates: enough to validate jobs."""
    return emulation.prior_table({jt: 1.0 for jt in {j.job_type for j in jobs}}, cluster, ThroughputTable.load())


def _speeds(jobs: list[Job], sess: session.RaySession, throughputs: ThroughputTable | None,
            dilation: float | None) -> tuple[float, dict[tuple[str, int, str], float], ThroughputTable]:
    """(dilation, emulated speed factors, the scheduler's starting table)."""
    gavel = ThroughputTable.load()
    job_types = sorted({j.job_type for j in jobs})
    cluster = sess.cluster
    if not sess.emulated:
        return 1.0, {}, throughputs or emulation.prior_table(calibrate(job_types), cluster, gavel)
    dil = dilation or emulation.dilation(cluster.num_gpus, os.cpu_count() or 1)
    factors = {key: f / dil for key, f in emulation.speed_factors(gavel, job_types, cluster).items()}
    return dil, factors, throughputs or emulation.prior_table(calibrate(job_types), cluster, gavel, factors)


def _tee(events: list[dict[str, Any]], extra: Callable[[dict[str, Any]], None] | None) -> Callable[[dict[str, Any]], None]:
    def emit(e: dict[str, Any]) -> None:
        events.append(e)
        if extra is not None:
            extra(e)

    return emit


def _runtime_summary(stats: RunStats, executor: RayExecutor, pool: WorkerPool, sess: session.RaySession,
                     round_s: float) -> dict[str, Any]:
    rounds = executor.rounds
    n = max(1, len(rounds))
    decision = sum(stats.per_round_decision_s) / max(1, len(stats.per_round_decision_s))  # re-solves included
    dispatch = sum(r.dispatch_s for r in rounds) / n
    restore = sum(r.restore_s for r in rounds) / n
    save = sum(r.save_s for r in rounds) / n
    better = [q for q in executor.jobs.values() if q.final is not None and q.initial is not None]
    return {
        "round_s": round_s,
        "decision_s_per_round": decision,
        "dispatch_s_per_round": dispatch,
        "restore_s_per_round": restore,
        "checkpoint_s_per_round": save,
        "overhead_fraction": (decision + dispatch + restore + save) / round_s,
        "failed_leases": sum(r.failed for r in rounds),
        "worker_replacements": pool.replaced,
        "leases_continued_in_memory": sum(r.continued for r in rounds),
        "merge_s_per_round": sum(r.merge_s for r in rounds) / n,
        "forked_job_rounds": sum(r.forked_jobs for r in rounds),
        "jobs_improved": sum(1 for q in better if (q.final > q.initial if q.higher_is_better else q.final < q.initial)),
        "emulated": sess.emulated,
        "ray_auth": sess.auth,
    }


def quality_rows(result: RuntimeResult) -> list[dict[str, Any]]:
    """Per job: its final model quality next to the untrained value, and its checkpoint."""
    out = []
    for row in result.rows:
        q = result.quality.get(row.job_id)
        out.append({"job_id": row.job_id, "job_type": row.job_type, "metric": q.metric if q else "",
                    "initial": q.initial if q else None, "final": q.final if q else None,
                    "restores": q.restores if q else 0, "failures": q.failures if q else 0,
                    "checkpoint": str(q.checkpoint) if q else ""})
    return out


def write_outputs(result: RuntimeResult, out: Path) -> None:
    """summary.json, jobs.csv (simulate's columns + model quality), events.jsonl, and throughputs.json
    (the measured whole-run mean steps/s, in Gavel's format: ``hadar simulate --throughputs`` reads it)."""
    import csv

    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(result.summary, indent=2) + "\n")
    quality = {q["job_id"]: q for q in quality_rows(result)}
    extra = ["metric", "initial", "final", "restores", "failures", "checkpoint"]
    with (out / "jobs.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([fl.name for fl in dataclasses.fields(JobRow)] + [f"quality_{k}" if k in ("initial", "final")
                                                                       else k for k in extra])
        for row in result.rows:
            q = quality[row.job_id]
            w.writerow(["" if v is None else v for v in dataclasses.asdict(row).values()]
                       + ["" if q[k] is None else q[k] for k in extra])
    with (out / "events.jsonl").open("w") as f:
        for e in result.events:
            f.write(json.dumps(e) + "\n")
    (out / "throughputs.json").write_text(json.dumps(to_gavel_json(result.measured_mean), indent=2) + "\n")


def to_gavel_json(table: ThroughputTable) -> dict[str, dict[str, dict[str, float]]]:
    """Gavel's nested format (``ThroughputTable.load`` reads it back): feed a simulation with what was measured."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for (jt, k), row in table.rates.items():
        for t, v in row.items():
            out.setdefault(t, {})[f"('{jt}', {k})"] = {"null": v}
    return out
