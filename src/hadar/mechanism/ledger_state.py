"""The ledger's state as plain values, and back: what a recorder keeps so that a restarted run continues
with exactly the bookkeeping an uninterrupted one would have (floats round-trip exactly through JSON:
Python writes the shortest repr that reads back to the same double).

Only the records' own values are kept; what follows from them (the throughputs, from the table; the
sets of jobs that hold GPUs or owe a restore; the snapshot's views) is rebuilt on restore.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hadar.mechanism.ledger import CopyRound, JobLedger, JobRecord
from hadar.model.job import Job

_RECORD = ("remaining", "first_start_s", "finish_s", "attained_gpu_s", "rounds_run", "restarts", "failed_s",
           "failure", "cancelled_s", "measured_restart_s")
_MEASURED = (("rho_sum", 0.0), ("rho_n", 0))  # (key, value in a store written before them)
_COUNTS = ("lease_extensions", "lease_opportunities", "rounds", "resolves", "first_arrival_s", "last_event_s")


def dump_ledger(ledger: JobLedger) -> dict[str, Any]:
    """Every record (ended ones too: a run's results read them) and the run's counters."""
    records = []
    for jid, rec in ledger.records.items():
        entry: dict[str, Any] = {"id": jid, **{k: getattr(rec, k) for k in _RECORD},
                                 **{k: getattr(rec, k) for k, _ in _MEASURED}}
        entry["measured_noise"] = list(rec.measured_noise) if rec.measured_noise is not None else None
        entry["prev_gpus"] = list(rec.prev_gpus)
        entry["restoring"] = [[list(g), s] for g, s in rec.restoring]
        entry["steps_by_type"] = list(rec.steps_by_type.items())
        entry["copies"] = [[c.round, c.copy, c.node, c.gpu_type, c.gpus, c.steps, c.failed] for c in rec.copies]
        records.append(entry)
    return {"records": records, "active": list(ledger.active), "gpu_busy_s": list(ledger.gpu_busy_s),
            **{k: getattr(ledger, k) for k in _COUNTS}}


def restore_ledger(ledger: JobLedger, data: Mapping[str, Any], jobs: Mapping[int, Job],
                   memo: Mapping[str, Any] | None = None) -> None:
    """Put ``dump_ledger``'s state into a fresh ``ledger`` of the same cluster and table; ``jobs`` by id;
    ``memo``: the policy's memory of the allocation in force (what the next snapshot carries)."""
    for entry in data["records"]:
        job = jobs[int(entry["id"])]
        rec = JobRecord(job, ledger.table.row(job.job_type, job.scale_factor, ledger.types), 0.0)
        for k in _RECORD:
            setattr(rec, k, entry[k])
        for k, before in _MEASURED:
            setattr(rec, k, entry.get(k, before))
        noise = entry.get("measured_noise")
        rec.measured_noise = (float(noise[0]), float(noise[1])) if noise is not None else None
        rec.prev_gpus = tuple(int(g) for g in entry["prev_gpus"])
        rec.restoring = tuple((tuple(int(g) for g in gs), float(s)) for gs, s in entry["restoring"])
        rec.steps_by_type = {str(t): float(v) for t, v in entry["steps_by_type"]}
        rec.copies = [CopyRound(int(r), int(c), int(n), str(t), int(k), float(s), bool(f))
                      for r, c, n, t, k, s, f in entry["copies"]]
        ledger.records[job.job_id] = rec
    ledger.active.clear()
    for jid in data["active"]:
        rec = ledger.records[int(jid)]
        ledger.active[rec.job.job_id] = rec
    ledger.gpu_busy_s[:] = [float(b) for b in data["gpu_busy_s"]]
    for k in _COUNTS:
        setattr(ledger, k, data[k])
    ledger.memo = dict(memo or {})
    ledger.reindex()
