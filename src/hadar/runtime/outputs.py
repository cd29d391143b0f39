"""What a real run reports: the runtime's summary keys, per-job quality rows, and the ``--out`` files."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hadar.engine import RunStats
from hadar.mechanism.ledger import JobLedger
from hadar.metrics.summary import JobRow
from hadar.model.throughput import ThroughputTable

if TYPE_CHECKING:
    from hadar.runtime.executor import RayExecutor
    from hadar.runtime.run import RuntimeResult

#: jobs.csv columns after simulate's (JobRow's)
EXTRA_COLUMNS = ("name", "status", "failures", "error", "metrics", "metric", "quality_initial", "quality_final",
                 "restores", "restart_s", "checkpoint", "log")


def runtime_summary(stats: RunStats, executor: RayExecutor, ledger: JobLedger, replaced: int,
                    round_s: float) -> dict[str, Any]:
    """The keys a real run adds to ``simulate``'s summary."""
    rounds = executor.rounds
    n = max(1, len(rounds))
    decision = sum(stats.per_round_decision_s) / max(1, len(stats.per_round_decision_s))  # re-solves included
    dispatch = sum(r.dispatch_s for r in rounds) / n
    restore = sum(r.restore_s for r in rounds) / n
    save = sum(r.save_s for r in rounds) / n
    jobs = executor.jobs
    failed = {jid: rec.failure for jid, rec in sorted(ledger.records.items()) if rec.failed_s is not None}
    kinds = [e["kind"] for e in executor.tracker.entries()]
    return {
        "round_s": round_s,
        "decision_s_per_round": decision,
        "dispatch_s_per_round": dispatch,
        "restore_s_per_round": restore,
        "checkpoint_s_per_round": save,
        "overhead_fraction": (decision + dispatch + restore + save) / round_s,
        "jobs_failed": len(failed),
        "failed_jobs": {str(jid): why for jid, why in failed.items()},
        "failed_leases": sum(r.failed for r in rounds),
        "worker_replacements": replaced,
        "leases_continued_in_memory": sum(r.continued for r in rounds),
        "merge_s_per_round": sum(r.merge_s for r in rounds) / n,
        "forked_job_rounds": sum(r.forked_jobs for r in rounds),
        "paired_leases": sum(r.paired for r in rounds),
        "profiling_leases": sum(r.profiles for r in rounds),
        "jobs_improved": sum(1 for q in jobs.values() if q.improved),
        "job_metrics": {str(jid): dict(q.last) for jid, q in sorted(jobs.items())},
        "throughput_entries": {k: kinds.count(k) for k in ("measured", "given", "estimated")},
    }


def quality_rows(result: RuntimeResult) -> list[dict[str, Any]]:
    """Per job: its name, status, reported metrics, its quality metric next to the untrained value, and files."""
    failed = result.summary.get("failed_jobs", {})
    out = []
    for row in result.rows:
        q = result.quality.get(row.job_id)
        status = "done" if row.finish_s is not None else "failed" if str(row.job_id) in failed else "not finished"
        out.append({"job_id": row.job_id, "job_type": row.job_type, "name": q.spec.name if q else "",
                    "status": status, "failures": q.failures if q else 0,
                    "error": failed.get(str(row.job_id), ""), "metrics": dict(q.last) if q else {},
                    "metric": q.metric if q else "", "initial": q.initial if q else None,
                    "final": q.final if q else None, "restores": q.restores if q else 0,
                    "restart_s": q.restart_s if q else None,
                    "checkpoint": str(q.checkpoint) if q else "", "log": str(q.log) if q and q.log else ""})
    return out


def write_outputs(result: RuntimeResult, out: Path) -> None:
    """summary.json, jobs.csv (simulate's columns + the runtime's), events.jsonl, throughputs.json
    (the measured whole-run mean steps/s and the estimates, in Gavel's format: ``hadar simulate
    --throughputs`` reads it) and, where a forked job's merges were measured, merges.csv."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps({**result.summary, "throughputs": result.throughputs}, indent=2)
                                      + "\n")
    quality = {q["job_id"]: q for q in quality_rows(result)}
    with (out / "jobs.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([fl.name for fl in dataclasses.fields(JobRow)] + list(EXTRA_COLUMNS))
        for row in result.rows:
            q = {**quality[row.job_id], "quality_initial": quality[row.job_id]["initial"],
                 "quality_final": quality[row.job_id]["final"]}
            q["metrics"] = json.dumps(q["metrics"], sort_keys=True)
            w.writerow(["" if v is None else v for v in dataclasses.asdict(row).values()]
                       + ["" if q[k] is None else q[k] for k in EXTRA_COLUMNS])
    with (out / "events.jsonl").open("w") as f:
        for e in result.events:
            f.write(json.dumps(e) + "\n")
    (out / "throughputs.json").write_text(json.dumps(to_gavel_json(result.measured_mean), indent=2) + "\n")
    write_merges(result.events, out / "merges.csv")


MERGE_COLUMNS = ("job", "round", "t", "copies", "batch", "start_loss", "copy_loss", "merged_loss", "gain", "rho",
                 "noise_scale", "noise_dominated")


def write_merges(events: list[dict[str, Any]], path: Path) -> None:
    """merges.csv: one row per merge of a forked job's copies that the job tracker measured (``merge_gain``
    events, ``runtime.merges``); no file where none was."""
    rows = [e for e in events if e.get("event") == "merge_gain"]
    if not rows:
        return
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(MERGE_COLUMNS)
        for e in rows:
            w.writerow(["" if e.get(k) is None else e[k] for k in MERGE_COLUMNS])


def to_gavel_json(table: ThroughputTable) -> dict[str, dict[str, dict[str, Any]]]:
    """Gavel's nested format (``ThroughputTable.load`` reads it back): feed a simulation with what was measured.
    Co-located rates go where Gavel keeps them: ``"('other', k)": [rate of this job, rate of other]``."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (jt, k), row in table.rates.items():
        for t, v in row.items():
            out.setdefault(t, {})[f"('{jt}', {k})"] = {"null": v}
    for (jt, k, other), per_type in table.pairs.items():
        for t, (mine, theirs) in per_type.items():
            inner = out.get(t, {}).get(f"('{jt}', {k})")
            if inner is not None:
                inner[f"('{other}', {k})"] = [mine, theirs]
    return out
