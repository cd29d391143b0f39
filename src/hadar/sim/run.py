"""Assemble and run one simulation: the library entry point behind ``hadar simulate``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hadar.clock import VirtualClock
from hadar.engine import Engine, RunStats
from hadar.errors import InfeasibleError, InputError
from hadar.mechanism.ledger import JobLedger
from hadar.mechanism.rounds import GavelRoundPlanner
from hadar.metrics.bound import bound_summary
from hadar.metrics.summary import JobRow, job_rows, summarize
from hadar.model.cluster import Cluster
from hadar.model.job import Job
from hadar.model.throughput import ThroughputTable
from hadar.policies import create
from hadar.policies.base import Policy
from hadar.policies.registry import factory
from hadar.sim.executor import SimulatedExecutor
from hadar.sim.workload import Workload


@dataclass(slots=True)
class SimResult:
    summary: dict[str, Any]
    rows: list[JobRow]
    events: list[dict[str, Any]] = field(default_factory=list)
    stats: RunStats | None = None


def validate_jobs(jobs: list[Job], cluster: Cluster, table: ThroughputTable, *, spans_types: bool) -> None:
    """Reject jobs the table does not know or that no GPU of the cluster can ever run."""
    missing = [t for t in cluster.gpu_types if t not in table.gpu_types]
    if missing:
        raise InputError(f"unknown GPU type(s) {', '.join(missing)}: no throughputs for them in "
                         f"{table.source or 'the table'} (known: {', '.join(table.gpu_types)})")
    for job in jobs:
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


def make_planner(policy: Policy, cluster: Cluster, seed: int) -> Any:
    factory = getattr(policy, "make_planner", None)
    if factory is not None:
        return factory(cluster, seed)
    return GavelRoundPlanner(cluster, shuffle_types=policy.type_agnostic,
                             skip_zero_priority=getattr(policy, "skip_zero_priority", False), seed=seed)


def simulate(source: list[Job] | Iterator[Job], cluster: Cluster, table: ThroughputTable, policy: str | Policy, *,
             round_s: float = 360.0, seed: int = 0, gavel_compat: bool = False, window: tuple[int, int] | None = None,
             limit: int | None = None, record_events: bool = False, progress: Any = None,
             policy_kwargs: dict[str, Any] | None = None, rate_model: str | None = None) -> SimResult:
    """Run ``policy`` on the workload; returns the summary and per-job rows of measured jobs.

    ``rate_model`` (``sync`` or ``additive``) is how the executor paces a
    lease spanning GPU types; default: the policy's own ``rate_model``, else sync.
    The summary carries the limits of spec/hadar.md section 5 (metrics/bound.py); for a
    forking policy (``forks = True``: HadarE) TTD is taken against the forking limit.
    """
    if round_s <= 0:
        raise InputError(f"round length must be positive, got {round_s}")
    kwargs = dict(policy_kwargs or {})
    if isinstance(policy, str) and gavel_compat and getattr(factory(policy), "reference_solver", False):
        kwargs.setdefault("solver", "ecos")  # Gavel's solver: reproduce ECOS's point, not just an optimum
    pol = create(policy, **kwargs) if isinstance(policy, str) else policy
    spans = getattr(pol, "spans_types", False)
    if isinstance(source, list):
        validate_jobs(source, cluster, table, spans_types=spans)
    else:
        validate_jobs([], cluster, table, spans_types=spans)
    workload = Workload(source, window=window, limit=limit)
    ledger = JobLedger(cluster, table, round_s, track_copies=record_events or getattr(pol, "forks", False))
    events: list[dict[str, Any]] = []
    executor = SimulatedExecutor(cluster, table, rate_model or getattr(pol, "rate_model", "sync"))
    engine = Engine(pol, make_planner(pol, cluster, seed), executor, VirtualClock(),
                    ledger, gavel_compat=gavel_compat, on_event=events.append if record_events else None,
                    on_progress=progress)
    stats = engine.run(workload)
    measured = {j.job_id for j in workload.jobs if workload.measured(j.job_id)}
    rows = job_rows(ledger, measured)
    summary = summarize(ledger, rows, policy=pol.name, wall_s=stats.wall_s)
    summary.update(bound_summary([j for j in workload.jobs if j.job_id in measured], cluster, table,
                                 avg_jct_s=summary["avg_jct_s"], makespan_s=summary["makespan_s"],
                                 start_s=ledger.first_arrival_s, forking=getattr(pol, "forks", False)))
    summary["decision_s_per_round"] = (sum(stats.per_round_decision_s) / len(stats.per_round_decision_s)
                                       if stats.per_round_decision_s else 0.0)
    summary["solve_s_total"] = stats.solve_s
    return SimResult(summary, rows, events, stats)


def write_outputs(result: SimResult, out: Path) -> None:
    """summary.json, jobs.csv (one row per job), events.jsonl."""
    import csv
    from dataclasses import asdict, fields

    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(result.summary, indent=2) + "\n")
    with (out / "jobs.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([fl.name for fl in fields(JobRow)])
        for row in result.rows:
            w.writerow(["" if v is None else v for v in asdict(row).values()])
    with (out / "events.jsonl").open("w") as f:
        for e in result.events:
            f.write(json.dumps(e) + "\n")
