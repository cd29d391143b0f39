"""A replay of submissions through the service's store, with the simulated executor and a virtual clock.

``hadar replay TRACE --state DIR`` stores the trace's jobs as the service would (one submission), then
runs the engine on them as ``hadar simulate`` does, while the service's recorder commits every round
to the store (job rows, the round, events) together with the state a restart continues from: the
ledger's records, the allocation in force with the policy's memory, the planner's and the cadence's
state, the last plan and the time the loop goes on at. Run again on the same folder after the process
died (``kill -9`` included) and it continues from the last committed round, making exactly the
decisions an uninterrupted run makes: the same ``jobs.csv``, byte for byte.

It is the service's restart made exact where it can be (no real training, no checkpoint to fall back
to), and useful on its own: a replay of last month's submissions under another policy, resumable.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hadar.build import policy_for_run, wire
from hadar.clock import VirtualClock
from hadar.engine import Hooks, RoundRecord
from hadar.errors import InputError
from hadar.mechanism.admission import validate_jobs
from hadar.mechanism.ledger import JobLedger
from hadar.mechanism.ledger_state import dump_ledger, restore_ledger
from hadar.metrics.summary import JobRow, job_rows, summarize
from hadar.model.cluster import Cluster
from hadar.model.job import Job
from hadar.model.throughput import ThroughputTable
from hadar.service.record import EventLog, StoreRecorder, cluster_json, load_engine_state
from hadar.service.store import NewJob, Store
from hadar.sim.executor import SimulatedExecutor
from hadar.sources import Workload

_REQUEST = "replay"


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """One replay: its store's folder, the workload, the cluster, the table and the policy's settings.
    ``stop_after``: end the process's run after this many rounds of this run were committed (a test's
    crash at a known point; None: run to the end)."""

    state_dir: Path
    jobs: tuple[Job, ...]
    cluster: Cluster
    table: ThroughputTable
    policy: str = "max_min_fairness_perf"
    round_s: float = 360.0
    seed: int = 0
    stop_after: int | None = None
    progress: Callable[[int], None] | None = None  # called with the count of jobs that ended


@dataclass(frozen=True, slots=True)
class ReplayResult:
    summary: dict[str, Any]
    rows: list[JobRow]
    resumed: bool  # this process continued a run an earlier one had started
    finished: bool  # every job ended (False: stopped by ``stop_after``)


class _Stopped(Exception):
    """``stop_after`` rounds committed: the run ends here, as a crash right after a commit would."""


class ReplayRecorder(StoreRecorder):
    """The service's recorder, plus what an exact restart needs, in the same transaction."""

    def __init__(self, store: Store, events: EventLog, stop_after: int | None) -> None:
        super().__init__(store, events)
        self.stop_after, self.rounds = stop_after, 0

    def meta(self, record: RoundRecord, ledger: JobLedger) -> dict[str, str]:
        planned = pickle.dumps(record.planned, protocol=pickle.HIGHEST_PROTOCOL).hex()
        return {**super().meta(record, ledger), "ledger": json.dumps(dump_ledger(ledger)),
                "next_s": repr(record.next_s), "planned": planned}

    def round(self, record: RoundRecord, ledger: JobLedger) -> None:
        super().round(record, ledger)
        self.rounds += 1
        if self.stop_after is not None and self.rounds >= self.stop_after:
            raise _Stopped


def replay(opts: ReplayOptions) -> ReplayResult:
    """Run (or continue) the replay in ``opts.state_dir``; see the module docstring."""
    run = policy_for_run(opts.policy, seed=opts.seed)
    try:
        opts.state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot use {opts.state_dir} as the replay's state folder: {e.strerror}") from None
    store = Store(opts.state_dir)
    try:
        jobs, resumed = _jobs(store, opts)
        validate_jobs(list(jobs.values()), opts.cluster, opts.table, spans_types=run.policy.traits.spans_types)
        recorder = ReplayRecorder(store, EventLog(store), opts.stop_after)
        executor = SimulatedExecutor(opts.cluster, opts.table)
        executor.admit(list(jobs.values()))  # every job's efficiency profile, resumed ones' too
        engine, ledger = wire(run.policy, opts.cluster, opts.table, executor, VirtualClock(),
                              round_s=opts.round_s, seed=opts.seed,
                              hooks=Hooks(on_progress=opts.progress, recorder=recorder))
        source = _resume(store, engine, ledger, jobs) if resumed else Workload(sorted(jobs.values(), key=_order))
        try:
            engine.run(source)
            finished = True
        except _Stopped:
            finished = False
        rows = job_rows(ledger)
        summary = summarize(ledger, rows, policy=run.label, wall_s=engine.stats.wall_s)
        return ReplayResult(summary, rows, resumed, finished)
    finally:
        store.close()


def _order(job: Job) -> tuple[float, int]:
    return (job.arrival_s, job.job_id)


def _jobs(store: Store, opts: ReplayOptions) -> tuple[dict[int, Job], bool]:
    """The replay's jobs by id (the store's ids) and whether a run was under way in the store. A fresh
    store gets the settings and the jobs; a store of another replay's settings is refused."""
    settings = json.dumps({"policy": opts.policy, "round_s": opts.round_s, "seed": opts.seed,
                           "cluster": cluster_json(opts.cluster), "jobs": len(opts.jobs)}, sort_keys=True)
    known = store.meta("replay")
    if known is None:
        with store.transaction() as con:
            store.set_meta(con, "replay", settings)
        store.submit([_new_job(j) for j in opts.jobs], _REQUEST)
    elif known != settings:
        was = json.loads(known)
        raise InputError(f"{opts.state_dir} holds another replay (policy {was['policy']}, {was['jobs']} jobs, round "
                         f"{was['round_s']:g} s, seed {was['seed']}, or another cluster): use another --state")
    jobs = {}
    for row in store.jobs():
        spec = json.loads(row["spec"])
        jobs[int(row["id"])] = Job(job_id=int(row["id"]), **_fields(spec))
    return jobs, store.meta("ledger") is not None


def _new_job(job: Job) -> NewJob:
    spec = {f.name: getattr(job, f.name) for f in dataclasses.fields(Job) if f.name not in ("job_id", "train")}
    return NewJob(job.job_type, job.job_type, job.scale_factor, float(job.total_steps), spec, 0.0, job.arrival_s)


def _fields(spec: dict[str, Any]) -> dict[str, Any]:
    known = {f.name for f in dataclasses.fields(Job)} - {"job_id", "train"}
    fields = {k: v for k, v in spec.items() if k in known}
    if "extra" in fields:
        fields["extra"] = tuple((str(k), str(v)) for k, v in fields["extra"])
    return fields


class _Resumed(Workload):
    """The jobs not yet admitted, for a run that carries ``carried`` active jobs over from before."""

    def __init__(self, jobs: Iterable[Job], carried: int) -> None:
        super().__init__(list(jobs))
        self.carried = carried

    def done(self, finished: int) -> bool:
        return self.exhausted and finished >= self.emitted + self.carried


def _resume(store: Store, engine: Any, ledger: JobLedger, jobs: dict[int, Job]) -> Workload:
    """The ledger, the engine's state and the clock as the last committed round left them."""
    allocation, planner, cadence = load_engine_state(store.meta("engine"))
    data = json.loads(store.meta("ledger") or "{}")
    restore_ledger(ledger, data, jobs, allocation.memo if allocation is not None else None)
    planned = pickle.loads(bytes.fromhex(store.meta("planned") or ""))  # the store is the replay's own
    engine.resume(allocation, planner, cadence, planned)
    engine.clock.advance_to(float(store.meta("next_s") or 0.0))
    admitted = set(ledger.records)
    return _Resumed(sorted((j for jid, j in jobs.items() if jid not in admitted), key=_order), len(ledger.active))
