"""Per-job rows and the run summary, computed from the ledger after a run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hadar.arrays import FloatArray
from hadar.mechanism.ledger import JobLedger


@dataclass(frozen=True, slots=True)
class JobRow:
    job_id: int
    job_type: str
    scale_factor: int
    arrival_s: float
    first_start_s: float | None
    finish_s: float | None
    jct_s: float | None
    queuing_delay_s: float | None
    total_steps: float
    rounds_run: int
    restarts: int
    attained_gpu_s: float


def job_rows(ledger: JobLedger, measured: set[int] | None = None) -> list[JobRow]:
    rows = []
    for jid, rec in sorted(ledger.records.items()):
        if measured is not None and jid not in measured:
            continue
        j = rec.job
        jct = None if rec.finish_s is None else rec.finish_s - j.arrival_s
        qd = None if rec.first_start_s is None else rec.first_start_s - j.arrival_s
        rows.append(JobRow(jid, j.job_type, j.scale_factor, j.arrival_s, rec.first_start_s, rec.finish_s, jct, qd,
                           float(j.total_steps), rec.rounds_run, rec.restarts, rec.attained_gpu_s))
    return rows


def summarize(ledger: JobLedger, rows: list[JobRow], *, policy: str, wall_s: float) -> dict[str, Any]:
    """The keys every ``--json`` output carries (times in seconds)."""
    done = [r for r in rows if r.jct_s is not None]
    jcts = np.array([r.jct_s for r in done], dtype=float)
    delays = np.array([r.queuing_delay_s for r in rows if r.queuing_delay_s is not None], dtype=float)
    start = ledger.first_arrival_s or 0.0
    end = max((r.finish_s for r in done if r.finish_s is not None), default=start)
    span = ledger.last_event_s - start
    gpus = ledger.cluster.num_gpus
    util = float(sum(ledger.gpu_busy_s) / (gpus * span)) if span > 0 else 0.0
    return {
        "policy": policy,
        "jobs": len(rows),
        "jobs_completed": len(done),
        "avg_jct_s": _stat(jcts, np.mean),
        "median_jct_s": _stat(jcts, np.median),
        "p99_jct_s": _stat(jcts, lambda a: np.percentile(a, 99)),
        "makespan_s": float(end - start),
        "utilization": util,
        "avg_queuing_delay_s": _stat(delays, np.mean),
        "lease_extension_rate": (ledger.lease_extensions / ledger.lease_opportunities
                                 if ledger.lease_opportunities else 0.0),
        "rounds": ledger.rounds,
        "resolves": ledger.resolves,
        "restarts": int(sum(r.restarts for r in rows)),
        "wall_s": float(wall_s),
    }


def _stat(a: FloatArray, fn: Any) -> float | None:
    return float(fn(a)) if a.size else None


def ftf(rows: list[JobRow], isolated_rows: list[JobRow]) -> dict[str, float | None]:
    """Finish-time fairness rho_j = JCT_j / JCT_j under ``isolated`` (same workload); mean and max."""
    iso = {r.job_id: r.jct_s for r in isolated_rows if r.jct_s}
    rho = np.array([r.jct_s / iso[r.job_id] for r in rows if r.jct_s is not None and r.job_id in iso], dtype=float)
    return {"ftf_mean": _stat(rho, np.mean), "ftf_max": _stat(rho, np.max)}
