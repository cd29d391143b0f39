"""The JobLedger: the only mutable bookkeeping of a run.

It admits jobs, applies round reports (progress, attained service, finish
times, and what the executor measured: rates, restart costs) and produces frozen
``SchedulerState`` snapshots. Every method that changes scheduling state returns the
``Changes`` it made; the engine hands them to the cadence (whether a re-solve is due) and the
recorder, so no flag is set from outside. Forked copies' progress (HadarE) adds up here
identically for the simulator and the runtime. Policy- and planner-specific state (Gavel's
counters, a policy's memory) is not here: it belongs to the planner and the allocation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hadar.mechanism.changes import MOVED_SHARE, NOTHING, Changes, Resumed, pairs_moved
from hadar.model.cluster import Cluster
from hadar.model.frozen import builder
from hadar.model.job import Job
from hadar.model.plan import LeaseResult, RoundPlan, RoundReport
from hadar.model.state import Allocation, JobView, SchedulerState
from hadar.model.throughput import ThroughputTable

DONE_EPS = 1e-6
_job_view = builder(JobView)
__all__ = ["DONE_EPS", "MOVED_SHARE", "NOTHING", "Changes", "CopyRound", "JobLedger", "JobRecord", "Resumed",
           "done_at", "pairs_moved"]


@dataclass(frozen=True, slots=True)
class CopyRound:
    """The job tracker's record of one copy in one round (copy 0 = the job itself)."""

    round: int
    copy: int
    node: int
    gpu_type: str
    gpus: int
    steps: float
    failed: bool = False


@dataclass(slots=True)
class JobRecord:
    """Mutable per-job bookkeeping (private to the ledger and its readers)."""

    job: Job
    throughputs: tuple[float, ...]
    remaining: float
    first_start_s: float | None = None
    finish_s: float | None = None
    attained_gpu_s: float = 0.0
    prev_gpus: tuple[int, ...] = ()
    rounds_run: int = 0
    restarts: int = 0
    steps_by_type: dict[str, float] = field(default_factory=dict)
    copies: list[CopyRound] = field(default_factory=list)  # job tracker: per round, per copy
    failed_s: float | None = None  # when it ended as failed (it will not run again)
    failure: str = ""  # why
    cancelled_s: float | None = None  # when it was cancelled
    restoring: tuple[tuple[tuple[int, ...], float], ...] = ()  # (GPUs, restore s left) of last round's leases
    measured_restart_s: float | None = None  # the runtime's measured restart cost (used if the job gives none)
    measured_noise: tuple[float, float] | None = None  # (progress fraction, noise scale) the job last measured
    rho_sum: float = 0.0  # the sum of the measured rhos of its copies' merges, over ``rho_n`` of them (those
    rho_n: int = 0  # measured with a noise scale)
    view: JobView | None = None  # the snapshot's view of it, until the record changes (the ledger clears it)
    done_at: float = field(init=False)  # remaining steps at or below which the job is done (done_at(job))

    def __post_init__(self) -> None:
        self.done_at = done_at(self.job)

    @property
    def restart_s(self) -> float:
        """The job's restart cost: its own ``restart_s``, else the measured one, else 0."""
        if self.job.restart_s is not None:
            return self.job.restart_s
        return self.measured_restart_s if self.measured_restart_s is not None else 0.0

    @property
    def status(self) -> str:
        """``done``, ``failed``, ``cancelled``, ``running`` (held GPUs in the last round) or ``queued``."""
        if self.finish_s is not None:
            return "done"
        if self.failed_s is not None:
            return "failed"
        if self.cancelled_s is not None:
            return "cancelled"
        return "running" if self.prev_gpus else "queued"

    @property
    def ended(self) -> bool:
        return self.finish_s is not None or self.failed_s is not None or self.cancelled_s is not None


class JobLedger:
    """Bookkeeping for one run (``round_s``: the run's round length, which snapshots carry)."""

    def __init__(self, cluster: Cluster, table: ThroughputTable, round_s: float, *,
                 track_copies: bool = True) -> None:
        self.cluster = cluster
        self.table = table
        self.round_s = float(round_s)
        self.track_copies = track_copies  # keep the per-round, per-copy job-tracker log
        self.types = cluster.gpu_types
        self._type_index = [self.types.index(t) for t in cluster.gpu_type_of]  # GPU id -> type index
        self.records: dict[int, JobRecord] = {}
        self.active: dict[int, JobRecord] = {}  # insertion (= id) order
        self.gpu_busy_s = [0.0] * cluster.num_gpus
        self.memo: Mapping[str, Any] = {}
        self.lease_extensions = 0
        self.lease_opportunities = 0
        self.rounds = 0
        self.resolves = 0
        self.first_arrival_s: float | None = None
        self.last_event_s = 0.0
        self._views: tuple[JobView, ...] | None = None  # the active jobs' views, until one changes
        self._holding: set[int] = set()  # active jobs whose prev_gpus or restoring are not empty
        self._held: set[int] = set()  # active jobs whose prev_gpus are not empty (held GPUs last round)
        self._types_of: dict[tuple[int, ...], tuple[tuple[int, str], ...]] = {}  # GPU ids -> (type index, name), sorted

    # ---- admission and snapshots -------------------------------------------------
    def add(self, job: Job, resumed: Resumed | None = None) -> Changes:
        """Admit ``job``; a job resumed from a record (a restarted service) passes the progress it had."""
        rates = self.table.row(job.job_type, job.scale_factor, self.types)
        r = resumed or Resumed()
        rec = JobRecord(job, rates, max(0.0, float(job.total_steps) - r.done_steps), first_start_s=r.first_start_s,
                        attained_gpu_s=r.attained_gpu_s, rounds_run=r.rounds_run, restarts=r.restarts,
                        steps_by_type=dict(r.steps_by_type))
        self.records[job.job_id] = rec
        self.active[job.job_id] = rec
        self._views = None
        if self.first_arrival_s is None:
            self.first_arrival_s = job.arrival_s
        return Changes(arrived=(job.job_id,))

    def snapshot(self, now_s: float) -> SchedulerState:
        """The active jobs as they are now (unchanged records' views reused: they are frozen and equal)."""
        views = self._views
        if views is None:
            views = self._views = tuple([r.view or _view(r) for r in self.active.values()])
        return SchedulerState(now_s=now_s, round_s=self.round_s, cluster=self.cluster, jobs=views,
                              table=self.table, memo=self.memo)

    def reindex(self) -> None:
        """Rebuild what is derived from the active records (after a store put them back)."""
        self._holding = {j for j, r in self.active.items() if r.prev_gpus or r.restoring}
        self._held = {j for j, r in self.active.items() if r.prev_gpus}
        self._changed()

    def _changed(self, recs: Iterable[JobRecord] | None = None) -> None:
        """Records changed (None: all of them): their views are rebuilt at the next snapshot."""
        for rec in self.records.values() if recs is None else recs:
            rec.view = None
        self._views = None

    def _measured_restarts(self, measured: Iterable[tuple[int, float]]) -> None:
        """Restart costs the executor measured (job id, s): a job that gives no ``restart_s`` is weighed
        with its measured one from the next snapshot on."""
        for jid, s in measured:
            rec = self.active.get(jid)
            if rec is not None and rec.measured_restart_s != s:
                rec.measured_restart_s = s
                self._changed((rec,))

    def update_table(self, table: ThroughputTable, *, moved_share: float | None = None) -> Changes:
        """Use ``table`` from now on (e.g. the executor's measured throughputs): refreshes active jobs' rates.

        ``moved_share``: the change says ``rates_moved`` when some active job's rate on some type, or a
        co-located rate of two active job types, moved by more than this share of what the policy saw."""
        old_table, self.table = self.table, table
        moved = False
        for rec in self.active.values():
            old = rec.throughputs
            rec.throughputs = table.row(rec.job.job_type, rec.job.scale_factor, self.types)
            if moved_share is not None and not moved:
                moved = any(abs(n - o) > moved_share * o
                            for n, o in zip(rec.throughputs, old, strict=True) if o > 0)
        if moved_share is not None and not moved:
            moved = pairs_moved(old_table, table, {r.job.job_type for r in self.active.values()}, moved_share)
        self._changed()
        return Changes(rates_moved=moved)

    def record_resolve(self, allocation: Allocation) -> None:
        """The policy was re-solved: keep its memo for the next snapshot."""
        self.memo = allocation.memo
        self.resolves += 1

    def cancel(self, job_id: int, at_s: float) -> Changes:
        """End an active job as cancelled (it never runs again); no change if it is not active."""
        rec = self.active.pop(job_id, None)
        if rec is None:
            return NOTHING
        rec.cancelled_s = at_s
        rec.prev_gpus = ()
        self._holding.discard(job_id)
        self._held.discard(job_id)
        self._changed((rec,))
        return Changes(cancelled=(job_id,))

    def set_cluster(self, cluster: Cluster, table: ThroughputTable | None = None) -> Changes:
        """Nodes went down, came back or joined: ``cluster`` keeps every existing node in its place
        (GPU ids keep their meaning; joined nodes are appended); ``table``: the executor's table where a
        new type came with them. A job whose GPUs went down restarts elsewhere from its checkpoint."""
        old = self.cluster
        if cluster.nodes[:len(old.nodes)] != old.nodes:
            raise ValueError("a new cluster view must keep the existing nodes in order (joins are appended)")
        if old.order:  # a run's type order outlives node changes (a new type comes last)
            cluster = cluster.in_order(old.gpu_types)
        if old.prices and not cluster.prices:  # so do the cluster file's prices (a view knows only nodes)
            cluster = replace(cluster, prices=old.prices)
        if table is not None:
            self.table = table
        self.cluster, self.types = cluster, cluster.gpu_types
        self._type_index = [self.types.index(t) for t in cluster.gpu_type_of]
        self._types_of.clear()
        self.gpu_busy_s.extend([0.0] * (cluster.num_gpus - len(self.gpu_busy_s)))
        for rec in self.records.values():
            rec.throughputs = self.table.row(rec.job.job_type, rec.job.scale_factor, self.types)
        self._changed()
        return Changes(cluster=True)

    # ---- applying a round ------------------------------------------------------
    def apply(self, plan: RoundPlan, report: RoundReport) -> Changes:
        """Record what the round did, and what the executor measured in it; returns what changed (the
        jobs that ended: finished, or failed for good; whether a measured rate moved)."""
        self.rounds += 1
        active = self.active
        prev = self._held  # held GPUs last round (read before _moved below updates it)
        self.lease_opportunities += len(prev)
        ran: dict[int, tuple[int, ...]] = {}  # job -> its leases' GPUs (unsorted when several)
        restoring: dict[int, list[tuple[tuple[int, ...], float]]] = {}
        # per job, as the opportunities are: a forked job whose copies keep their GPUs counts once
        self.lease_extensions += len({lease.job_id for lease in plan.leases if lease.extended} & prev)
        # a GPU shared by a pair is busy while either job runs (the longer one counts); alone, each GPU
        # is in one lease and its busy time is added as it comes (the same one addition per GPU)
        gpu_busy: dict[int, float] | None = {} if any(lease.partner_id >= 0 for lease in plan.leases) else None
        busy_s = self.gpu_busy_s
        ended: set[int] = set()  # jobs that finished or failed for good now (an active job had neither before)
        start, records, credit = report.start_s, self.records, self._credit
        for res in report.results:
            rec = records[res.job_id]
            if rec.cancelled_s is not None:
                continue  # cancelled while the round ran: its work no longer counts
            rec.view = None
            busy = res.end_s - start
            busy = busy if busy > 0.0 else 0.0  # = max(0.0, busy)
            if gpu_busy is None:
                for g in res.gpus:
                    busy_s[g] += busy
            else:
                for g in res.gpus:
                    was = gpu_busy.get(g)
                    if was is None or busy > was:  # = max(was, busy), was = 0.0 when absent
                        gpu_busy[g] = busy
            got = ran.get(res.job_id)
            ran[res.job_id] = res.gpus if got is None else got + res.gpus
            if res.restore_left_s > 0:
                restoring.setdefault(res.job_id, []).append((res.gpus, res.restore_left_s))
            if self.track_copies:
                self._log_copy(rec, res)
            if res.failed:
                if res.fatal and rec.finish_s is None and rec.failed_s is None:
                    rec.failed_s, rec.failure = max(res.end_s, start), res.error or "failed"
                    ended.add(res.job_id)
                continue
            if rec.first_start_s is None:
                rec.first_start_s = start
            if credit(rec, res, busy):
                ended.add(res.job_id)
        for g, busy in (gpu_busy or {}).items():
            busy_s[g] += busy
        self._views = None  # (every result's record changed above)
        self._moved(ran, restoring)
        finished = [jid for jid in active if jid in ended] if ended else []
        for jid in finished:
            del active[jid]
            self._holding.discard(jid)
            self._held.discard(jid)
        self.last_event_s = max(self.last_event_s, report.end_s)
        moved = self._measured(report)
        return Changes(ended=tuple(finished), rates_moved=moved) if finished or moved else NOTHING

    def _measured(self, report: RoundReport) -> bool:
        """What the executor measured in the round (rates, restart costs); True if a rate moved."""
        moved = False
        if report.table is not None:
            moved = self.update_table(report.table, moved_share=MOVED_SHARE).rates_moved
        if report.restart_s:
            self._measured_restarts(report.restart_s)
        for jid, bn in report.noise_scales:  # the job's own noise scale replaces its profile's level
            rec = self.active.get(jid)
            if rec is not None and rec.job.efficiency is not None:
                at = (1.0 - rec.remaining / float(rec.job.total_steps), bn)
                if rec.measured_noise is None or rec.measured_noise[1] != bn:
                    rec.measured_noise = at
                    self._changed((rec,))
        for g in report.merge_gains:
            if (rec := self.records.get(g.job_id)) is not None and g.rho is not None:
                rec.rho_sum += g.rho
                rec.rho_n += 1
                self._changed((rec,))
        return moved

    def _log_copy(self, rec: JobRecord, res: LeaseResult) -> None:
        """The job tracker's entry of this lease (``track_copies``)."""
        g0 = res.gpus[0] if res.gpus else 0
        rec.copies.append(CopyRound(self.rounds, res.copy, self.cluster.node_of[g0], self.cluster.gpu_type_of[g0],
                                    len(res.gpus), res.steps, res.failed))

    def _credit(self, rec: JobRecord, res: LeaseResult, busy: float) -> bool:
        """A lease's GPU time, time per type and steps (shared evenly by the types it spans); True if
        the job finished with it."""
        gpus = res.gpus
        rec.attained_gpu_s += busy * len(gpus)
        used = self._types_of.get(gpus)
        if used is None:
            if len(self._types_of) > 100_000:
                self._types_of.clear()
            index = sorted({self._type_index[g] for g in gpus})
            used = self._types_of[gpus] = tuple((j, self.types[j]) for j in index)
        steps, by_type = res.steps, rec.steps_by_type
        share = steps / len(used) if used else 0.0  # each type's even share of the steps
        for _, t in used:
            by_type[t] = by_type.get(t, 0.0) + share
        rec.remaining -= steps
        if rec.finish_s is not None:
            return False
        if rec.remaining <= rec.done_at:
            rec.remaining = 0.0
        elif not res.reached_target:
            return False  # (a job that reached its target ends with the steps it has left)
        rec.finish_s = max(res.end_s, 0.0)
        return True

    def _moved(self, ran: dict[int, tuple[int, ...]],
               restoring: dict[int, list[tuple[tuple[int, ...], float]]]) -> None:
        """Each active job's GPUs and unfinished restores of this round: only jobs that ran now, or
        held GPUs or owed a restore before, can change (the rest keep ``()``)."""
        active, holding, held = self.active, self._holding, self._held
        for jid in [j for j in ran if j in active] + [j for j in holding if j not in ran]:
            rec = active[jid]
            got = ran.get(jid)
            if got and got == rec.prev_gpus and not rec.restoring and jid not in restoring:
                rec.rounds_run += 1  # kept its GPUs, owes no restore: the rest stays (it is in holding, held)
                continue
            if not got:
                gpus: tuple[int, ...] = ()
            elif got == rec.prev_gpus:  # kept its GPUs: already sorted (prev_gpus always is)
                gpus = rec.prev_gpus
            else:
                gpus = got if len(got) == 1 else tuple(sorted(got))
            if gpus:
                if rec.rounds_run > 0 and gpus != rec.prev_gpus:
                    rec.restarts += 1  # resumed elsewhere or after a pause: checkpoint restore
                rec.rounds_run += 1
            owed = tuple(restoring[jid]) if jid in restoring else ()
            if gpus != rec.prev_gpus or owed != rec.restoring:
                rec.view = None
            rec.prev_gpus, rec.restoring = gpus, owed
            (holding.add if gpus or owed else holding.discard)(jid)
            (held.add if gpus else held.discard)(jid)

    # ---- queries ----------------------------------------------------------------
    def finished(self, job_id: int) -> bool:
        rec = self.records.get(job_id)
        return rec is not None and rec.finish_s is not None

    def ended(self) -> int:
        """Jobs that finished, failed for good or were cancelled."""
        return sum(1 for r in self.records.values() if r.ended)


def done_at(job: Job) -> float:
    """Remaining steps at or below which ``job`` counts as finished (round-off of its step count)."""
    return DONE_EPS * max(1.0, float(job.total_steps))


def _view(r: JobRecord) -> JobView:
    """The record's view for a snapshot (kept on the record until it changes; a job with an efficiency
    profile sees its rates in reference steps/s, its mean gain over the work left); its fields in ``JobView``'s order
    (tests/unit/test_frozen.py checks them against a view built by name)."""
    job = r.job
    rates, g, eff = r.throughputs, 1.0, job.efficiency
    if eff is not None and r.measured_noise is not None:  # its level as the job measured it
        eff = eff.measured(*r.measured_noise)
    if eff is not None and r.remaining > 0:  # reference steps/s over what is left: the table's
        total = float(job.total_steps)  # rates times the mean gain of the remaining work, so that
        need = eff.steps_for(total - r.remaining, r.remaining, total)  # remaining / rate is its time
        g = r.remaining / need if need > 0 else 1.0
        rates = tuple([x * g for x in rates])
    r.view = _job_view(
        job.job_id, job.job_type, job.scale_factor, job.priority_weight, job.arrival_s, float(job.total_steps),
        r.remaining, rates, r.first_start_s, r.attained_gpu_s, r.prev_gpus,
        job.restart_s if job.restart_s is not None else  # = r.restart_s
        (r.measured_restart_s if r.measured_restart_s is not None else 0.0), r.restoring, job.slo, job.entity, g,
        job.gpu_range, eff, job.batch_range, r.rho_sum / r.rho_n if r.rho_n else None)  # the mean measured rho
    return r.view

