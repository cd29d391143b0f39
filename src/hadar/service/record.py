"""Keeping the store in step with the scheduler: the recorder.

``StoreRecorder`` observes the engine (``engine.Recorder``): whatever a round or a change between
rounds changed (a round's progress, a finish or failure, a cancellation, a node change) is committed
to the store before the engine goes on, in one transaction: the job rows, the round, the events
logged since the last commit, the measured throughputs and the state a restart continues from (the
allocation in force, the planner's and the cadence's state); then the job events go to the jobs'
logs. A job's progress counts a lease's steps once the lease succeeded, and the executor commits the
lease's checkpoint at that moment (before the store's commit, and the report says so): a restart
resumes each job from its committed checkpoint, which holds at least the progress the store recorded
for a job that saves every lease.
"""

from __future__ import annotations

import base64
import json
import logging
import pickle
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hadar.engine import RoundRecord
from hadar.mechanism.ledger import Changes, JobLedger, JobRecord
from hadar.model.cluster import Cluster
from hadar.model.state import Allocation
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


class StoreRecorder:
    """Commits each round and each change of the run's ledger to ``store`` (``engine.Recorder``).
    ``throughput_rows()``: the measured rates to keep; ``on_commit(ledger)`` runs after every commit."""

    def __init__(self, store: Store, events: EventLog, *,
                 throughput_rows: Callable[[], list[ThroughputRow]] = list,
                 on_commit: Callable[[JobLedger], None] = lambda ledger: None) -> None:
        self.store, self.events = store, events
        self.throughput_rows, self.on_commit = throughput_rows, on_commit
        self.saved: dict[int, float] = {}  # job -> steps its committed checkpoint holds (the reports say)

    def round(self, record: RoundRecord, ledger: JobLedger) -> None:
        plan, report = record.plan, record.report
        self.saved.update(report.saved_steps)
        touched = {lease.job_id for lease in plan.leases} | set(record.changes.ended)
        touched |= {jid for jid, rec in ledger.active.items() if rec.status == "queued"}
        leases = [[lease.job_id, lease.copy, list(lease.gpus)] for lease in plan.leases]
        failed = {(r.job_id, r.copy) for r in report.results if r.failed}
        for entry in leases:
            entry.append(int((entry[0], entry[1]) in failed))
        busy = sum(len(lease.gpus) for lease in plan.leases)
        events = self.events.take()
        with self.store.transaction() as con:
            self.store.update_jobs(con, [self.row(ledger, jid) for jid in sorted(touched)])
            self.store.add_round(con, report.start_s, report.end_s, leases, busy, len(ledger.cluster.up_gpus))
            self.store.save_throughputs(con, self.throughput_rows())
            self.store.add_events(con, events)
            for key, value in self.meta(record, ledger).items():
                self.store.set_meta(con, key, value)
        self.events.committed(events)
        self.on_commit(ledger)

    def meta(self, record: RoundRecord, ledger: JobLedger) -> dict[str, str]:
        """What the round's transaction keeps besides the jobs and the round: the service's clock and the
        engine's state (the allocation in force, the planner's and the cadence's state)."""
        return {"clock_s": repr(record.report.end_s),
                "engine": engine_state(record.allocation, record.planner, record.cadence)}

    def changed(self, now_s: float, changes: Changes, ledger: JobLedger) -> None:
        """A cancellation or a node change between rounds."""
        events = self.events.take()
        with self.store.transaction() as con:
            if changes.cancelled:
                self.store.update_jobs(con, [self.row(ledger, jid) for jid in changes.cancelled])
            if changes.cluster:
                self.store.set_meta(con, "cluster", cluster_json(ledger.cluster))
            self.store.add_events(con, events)
        self.events.committed(events)
        if changes.cluster:
            self.on_commit(ledger)

    def row(self, ledger: JobLedger, job_id: int) -> dict[str, Any]:
        """The store's progress columns of one job, as ``ledger`` has it now."""
        return job_row(ledger.records[job_id], self.saved.get(job_id, 0.0))


def engine_state(allocation: Allocation | None, planner: dict[str, object], cadence: dict[str, object]) -> str:
    """What a restart continues from, as the store keeps it: the planner's and the cadence's state as JSON
    and the allocation in force (frozen arrays and the policy's memo) pickled, base64 within that JSON."""
    blob = base64.b64encode(pickle.dumps(allocation, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")
    return json.dumps({"planner": planner, "cadence": cadence, "allocation": blob})


def load_engine_state(text: str | None) -> tuple[Allocation | None, dict[str, object], dict[str, object]]:
    """``engine_state``'s value back (nothing recorded: no allocation, empty states)."""
    if not text:
        return None, {}, {}
    data = json.loads(text)
    allocation = pickle.loads(base64.b64decode(data["allocation"]))  # the store is the service's own
    return allocation, data["planner"], data["cadence"]
