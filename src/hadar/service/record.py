"""Keeping the store in step with the scheduler.

``StoredLedger`` is the engine's ``JobLedger`` with one addition: whatever
changes a job (a round's progress, a finish or failure, a cancellation, a
node change) is committed to the store before the engine goes on, in one
transaction per change: the job rows, the round, the events logged since the
last commit and the measured throughputs; then the job events go to the jobs'
logs. A job's progress counts a lease's steps once the lease succeeded, and the
executor commits the lease's checkpoint at that moment (before the store's
commit): a restart resumes each job from its committed checkpoint, which holds
at least the progress the store recorded for a job that saves every lease.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hadar.mechanism.ledger import JobLedger, JobRecord
from hadar.model.cluster import Cluster
from hadar.model.plan import RoundPlan, RoundReport
from hadar.model.throughput import ThroughputTable
from hadar.service import joblog
from hadar.service.store import Store, ThroughputRow

log = logging.getLogger(__name__)


class EventLog:
    """Events of the engine and executor, buffered until the next commit (or boundary flush); once
    committed, a job's events also go to its log in ``log_dir`` (``joblog``)."""

    def __init__(self, store: Store, log_dir: Path | None = None) -> None:
        self.store, self.log_dir = store, log_dir
        self._lock = threading.Lock()
        self._buffer: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._buffer.append(event)

    def take(self) -> list[dict[str, Any]]:
        with self._lock:
            out, self._buffer = self._buffer, []
            return out

    def flush(self) -> None:
        events = self.take()
        if events:
            with self.store.transaction() as con:
                self.store.add_events(con, events)
            self.committed(events)

    def committed(self, events: list[dict[str, Any]]) -> None:
        """``events`` are in the store now: add them to their jobs' logs."""
        if self.log_dir is not None and events:
            joblog.append(self.log_dir, events)


def job_row(rec: JobRecord, checkpoint_steps: float) -> dict[str, Any]:
    """The store's progress columns of one ledger record."""
    job = rec.job
    ended = rec.finish_s if rec.finish_s is not None else (rec.failed_s if rec.failed_s is not None
                                                            else rec.cancelled_s)
    return {"id": job.job_id, "status": rec.status, "first_start_s": rec.first_start_s, "finished_s": ended,
            "done_steps": float(job.total_steps) - rec.remaining, "checkpoint_steps": checkpoint_steps,
            "attained_gpu_s": rec.attained_gpu_s, "rounds_run": rec.rounds_run, "restarts": rec.restarts,
            "gpus": json.dumps(list(rec.prev_gpus)), "steps_by_type": json.dumps(rec.steps_by_type),
            "failure": rec.failure}


def cluster_json(cluster: Cluster) -> str:
    return json.dumps({"nodes": [[n.name, n.gpu_type, n.gpus] for n in cluster.nodes], "down": sorted(cluster.down)})


class StoredLedger(JobLedger):
    """A ``JobLedger`` that commits every change to ``store``; ``checkpoint_steps(job_id)`` says what the
    job's committed checkpoint holds and ``throughput_rows()`` the measured rates to keep."""

    def __init__(self, cluster: Cluster, table: ThroughputTable, round_s: float, *, track_copies: bool = True,
                 store: Store, events: EventLog) -> None:
        super().__init__(cluster, table, round_s, track_copies=track_copies)
        self.store, self.events = store, events
        self.checkpoint_steps: Callable[[int], float] = lambda job_id: 0.0
        self.throughput_rows: Callable[[], list[ThroughputRow]] = list
        self.on_commit: Callable[[], None] = lambda: None

    def apply(self, plan: RoundPlan, report: RoundReport) -> list[int]:
        ended = super().apply(plan, report)
        touched = {lease.job_id for lease in plan.leases} | set(ended)
        touched |= {jid for jid, rec in self.active.items() if rec.status == "queued"}
        leases = [[lease.job_id, lease.copy, list(lease.gpus)] for lease in plan.leases]
        failed = {(r.job_id, r.copy) for r in report.results if r.failed}
        for entry in leases:
            entry.append(int((entry[0], entry[1]) in failed))
        busy = sum(len(lease.gpus) for lease in plan.leases)
        events = self.events.take()
        with self.store.transaction() as con:
            self.store.update_jobs(con, [self.row(jid) for jid in sorted(touched)])
            self.store.add_round(con, report.start_s, report.end_s, leases, busy, len(self.cluster.up_gpus))
            self.store.save_throughputs(con, self.throughput_rows())
            self.store.add_events(con, events)
            self.store.set_meta(con, "clock_s", repr(report.end_s))
        self.events.committed(events)
        self.on_commit()
        return ended

    def cancel(self, job_id: int, at_s: float) -> bool:
        ok = super().cancel(job_id, at_s)
        if ok:
            events = self.events.take()
            with self.store.transaction() as con:
                self.store.update_jobs(con, [self.row(job_id)])
                self.store.add_events(con, events)
            self.events.committed(events)
        return ok

    def set_cluster(self, cluster: Cluster) -> None:
        super().set_cluster(cluster)
        events = self.events.take()
        with self.store.transaction() as con:
            self.store.set_meta(con, "cluster", cluster_json(cluster))
            self.store.add_events(con, events)
        self.events.committed(events)
        self.on_commit()

    def row(self, job_id: int) -> dict[str, Any]:
        """The store's progress columns of one job, as the ledger has it now."""
        return job_row(self.records[job_id], self.checkpoint_steps(job_id))
