"""Assemble and run one simulation: the library entry point behind ``hadar simulate``."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hadar.build import policy_for_run, team_params, wire
from hadar.clock import VirtualClock
from hadar.engine import Hooks, RunStats
from hadar.errors import InputError
from hadar.mechanism.admission import validate_jobs
from hadar.mechanism.tenants import Tenants
from hadar.metrics.bound import bound_summary
from hadar.metrics.summary import JobRow, job_rows, summarize
from hadar.model.cluster import Cluster
from hadar.model.fork_efficiency import IDEAL
from hadar.model.fork_model import ForkSetting
from hadar.model.job import Job, check_restart_s
from hadar.model.throughput import ThroughputTable
from hadar.model.world import World
from hadar.policies.base import Policy
from hadar.policies.gavel import center
from hadar.policies.profiles import PolicySpec
from hadar.sim.executor import SimulatedExecutor
from hadar.sim.trace import with_restart_s
from hadar.sources import Workload

#: Workloads of this many jobs or more re-solve hundreds to thousands of times (the bundled 96-job
#: traces 3-31 times, the steady state's 5,000 jobs 4,613): their centerings start compiled.
LONG_RUN_JOBS = 500


@dataclass(slots=True)
class SimResult:
    summary: dict[str, Any]
    rows: list[JobRow]
    events: list[dict[str, Any]] = field(default_factory=list)
    stats: RunStats | None = None
    #: job id -> the job's ``extra`` columns (a CSV job list's own columns), for ``jobs.csv``
    extra: dict[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SimOptions:
    """A simulation's settings besides its workload, cluster, table and policy (``simulate``)."""

    round_s: float = 360.0
    seed: int = 0
    gavel_compat: bool = False
    window: tuple[int, int] | None = None
    limit: int | None = None
    record_events: bool = False
    progress: Any = None
    policy_kwargs: dict[str, Any] | None = None
    world: World | None = None
    profiles: Mapping[str, PolicySpec] | None = None
    restart_s: float | None = None
    fork_estimate: ForkSetting | None = None
    tenants: Tenants | None = None
    min_run_s: float = 0.0


def simulate(source: list[Job] | Iterator[Job], cluster: Cluster, table: ThroughputTable, policy: str | Policy,
             **options: Any) -> SimResult:
    """Run ``policy`` (a registered name, a profile name from ``profiles``, or an instance) on the
    workload; returns the summary and per-job rows of measured jobs.

    ``world``: the simulated world's physics (``model/world.py``: how a gang spanning GPU types
    progresses, what forked copies are worth; default: sync gangs, ideal forks), the same whatever
    the policy; the executor charges each job's restart cost at every start and move, except under
    ``gavel_compat`` (Gavel charges none). ``fork_estimate``: what the forking planner counts a copy
    worth, its own estimate (default: ideal), never read from the world. The summary carries the limits
    of spec/hadar.md section 5 (metrics/bound.py); for a forking policy (HadarE) TTD is taken against
    the forking limit, and ``world``, the world it ran in. ``policy_kwargs`` set parameters of a policy
    given by name (as a profile would). ``restart_s``: the restart cost of jobs that give none
    (``--restart-s``; None = 0). ``tenants``: teams (``Job.entity``) held to quotas (``mechanism/quotas.py``).
    ``options``: the fields of ``SimOptions``.
    """
    o = SimOptions(**options)
    if not (o.round_s > 0 and math.isfinite(o.round_s)):
        raise InputError(f"round length must be positive and finite (seconds), got {o.round_s}")
    if o.restart_s is not None:
        check_restart_s(o.restart_s, "--restart-s")
        source = [with_restart_s(j, o.restart_s) for j in source] if isinstance(source, list) else (
            with_restart_s(j, o.restart_s) for j in source)
    params = {**team_params(policy, o.profiles, o.tenants), **(o.policy_kwargs or {})}
    run = policy_for_run(policy, seed=o.seed, gavel_compat=o.gavel_compat, profiles=o.profiles, params=params)
    pol, traits = run.policy, run.policy.traits
    validate_jobs(source if isinstance(source, list) else [], cluster, table, spans_types=traits.spans_types)
    workload = Workload(source, window=o.window, limit=o.limit)
    if max(workload.limit or 0, o.window[1] if o.window else 0) >= LONG_RUN_JOBS:
        center.expect_many(pol)
    events: list[dict[str, Any]] = []
    world = replace(o.world or World(), charge_restarts=not o.gavel_compat)
    eff = world.fork_efficiency
    executor = SimulatedExecutor(cluster, table, world)
    engine, ledger = wire(pol, cluster, table, executor, VirtualClock(), round_s=o.round_s, seed=o.seed,
                          gavel_compat=o.gavel_compat, track_copies=o.record_events,
                          hooks=Hooks(on_event=events.append if o.record_events else None, on_progress=o.progress),
                          fork_efficiency=o.fork_estimate or IDEAL, tenants=o.tenants, min_run_s=o.min_run_s)
    stats = engine.run(workload)
    measured = {j.job_id for j in workload.jobs if workload.measured(j.job_id)}
    rows = job_rows(ledger, measured)
    summary = summarize(ledger, rows, policy=run.label, wall_s=stats.wall_s)
    summary.update(bound_summary([j for j in workload.jobs if j.job_id in measured], cluster, table,
                                 avg_jct_s=summary["avg_jct_s"], makespan_s=summary["makespan_s"],
                                 start_s=ledger.first_arrival_s, forking=traits.forks))
    summary["decision_s_per_round"] = (sum(stats.per_round_decision_s) / len(stats.per_round_decision_s)
                                       if stats.per_round_decision_s else 0.0)
    summary["solve_s_total"] = stats.solve_s
    summary["world"] = world.describe()
    if not eff.ideal:
        summary["fork_efficiency"] = eff.source or "calibrated"
    cost = run_cost_usd(cluster, ledger.gpu_busy_s)
    if cost is not None:
        summary["cost_usd"] = cost
    summary.update(slo_summary([j for j in workload.jobs if j.job_id in measured], rows, cluster, table))
    extra = {j.job_id: _own_columns(j) for j in workload.jobs if j.job_id in measured and _own_columns(j)}
    return SimResult(summary, rows, events, stats, extra)


def run_cost_usd(cluster: Cluster, busy_s: list[float]) -> float | None:
    """What the GPUs' busy time cost at the cluster's prices ($): only where the cluster file gives
    ``prices`` (types it leaves out at Gavel's), and every type has one; else None."""
    if not cluster.prices:
        return None
    rate = [cluster.price(t) for t in cluster.gpu_type_of]
    if any(p is None for p in rate):
        return None
    return float(sum(b * p for b, p in zip(busy_s, rate, strict=False) if p is not None) / 3600.0)


def slo_summary(jobs: list[Job], rows: list[JobRow], cluster: Cluster, table: ThroughputTable) -> dict[str, int]:
    """``slo_jobs`` and ``slo_missed`` where some job has an SLO factor: a job misses it when its JCT exceeds
    the factor times its run time alone on its fastest type of the cluster (unfinished jobs miss it)."""
    with_slo = [j for j in jobs if j.slo is not None]
    if not with_slo:
        return {}
    jct = {r.job_id: r.jct_s for r in rows}
    missed = 0
    for j in with_slo:
        best = max(table.row(j.job_type, j.scale_factor, cluster.gpu_types), default=0.0)
        got = jct.get(j.job_id)
        if got is None or best <= 0 or got > (j.slo or 0.0) * j.table_steps / best:
            missed += 1
    return {"slo_jobs": len(with_slo), "slo_missed": missed}


def _own_columns(job: Job) -> tuple[tuple[str, str], ...]:
    """What ``jobs.csv`` carries of a job's input: the ``name`` it was given (a train field; an
    entrypoint job's name is its job type already), its entity, then a CSV's extra columns."""
    train = job.train
    named = (("name", train.name),) if train is not None and train.name and train.name != job.job_type else ()
    own = (("entity", job.entity),) if job.entity else ()
    return named + own + job.extra


def write_outputs(result: SimResult, out: Path) -> None:
    """summary.json, jobs.csv (one row per job; a job's name and a CSV job list's extra columns after JobRow's,
    those named like a JobRow column as ``src_NAME``), events.jsonl."""
    import csv
    from dataclasses import asdict, fields

    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(result.summary, indent=2) + "\n")
    own = [fl.name for fl in fields(JobRow)]
    extra = list(dict.fromkeys(k for cols in result.extra.values() for k, _ in cols))
    with (out / "jobs.csv").open("w", newline="") as f:
        w = csv.writer(f)  # an input column named like one of ours (e.g. job_id) comes back as src_NAME
        w.writerow(own + [f"src_{k}" if k in own else k for k in extra])
        for row in result.rows:
            theirs = dict(result.extra.get(row.job_id, ()))
            w.writerow(["" if v is None else v for v in asdict(row).values()] + [theirs.get(k, "") for k in extra])
    with (out / "events.jsonl").open("w") as f:
        for e in result.events:
            f.write(json.dumps(e) + "\n")
