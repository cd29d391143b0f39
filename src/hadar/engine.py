"""The one scheduling loop, shared by the simulator, the batch runtime and the service.

    state  = ledger.snapshot(now)
    alloc  = policy.allocate(state)            (only when the cadence says a re-solve is due)
    plan   = planner.plan(state, alloc, prev)
    plan   = the round cut at its first decisive event
    report = executor.run_round(plan)          (the only side effects)
    ledger.apply(plan, report)

What the loop reads of a policy is its ``traits`` (``PolicyTraits``); when
to re-solve is the injected ``Cadence``; jobs come from a ``JobSource``.

Events. Each round ends at the earliest of a few events: the round's end, and for a policy whose traits say
``cut_rounds``, the next arrival (when the round leaves GPUs idle; for a
forking policy whose jobs run as copies, also on a full cluster, once the
round has run the traits' ``yield_after_s``) and each lease's predicted
completion (the executor's own estimate: the simulated rate, or the rate the
runtime measured) when a job is waiting for GPUs or will have arrived by
then, or, for a forking policy, when another job may fork onto the freed
GPUs. The round ends at the first of them, so neither a new job nor freed
GPUs wait for the planned end; leases still running carry on, on the same
GPUs, next round. The same code cuts rounds in the simulator and on Ray.

Spacing. Above ``SPACED_FROM`` active jobs, where the round leaves GPUs idle and no job waits,
an arrival, or a completion before which one comes, ends the round no sooner than
``CUT_S_PER_JOB`` seconds per active job over that many after its start (16 s at 1,100 active
jobs, 2 minutes at 1,750; never past the round's end). A completion that frees GPUs for a waiting
job, or for an arrival that will find none idle, ends it at once. A full decision costs in
proportion to the active jobs, so at a datacenter's scale, where arrivals come every few seconds,
a round takes in all of them at once instead of deciding again for each; below, no decision
moves, as a few seconds' delay moves every later one (chaotically: one 1,000-job workload's drain
by 4 %) (docs/results.md, "Scale").
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from hadar.clock import Clock, elapsed_s
from hadar.errors import InfeasibleError
from hadar.mechanism.cadence import Cadence, OnChange
from hadar.mechanism.ledger import Changes, JobLedger
from hadar.model.job import Job
from hadar.model.plan import Lease, NodeChange, RoundPlan, RoundReport
from hadar.model.state import Allocation, SchedulerState
from hadar.model.throughput import ThroughputTable
from hadar.policies.base import Policy
from hadar.sources import JobSource

log = logging.getLogger(__name__)
#: How long an idle engine waits on a live source before it looks again (wall-clock runs).
IDLE_POLL_S = 0.5
#: Above this many active jobs, a round runs ``CUT_S_PER_JOB`` s per active job over it before an event
#: may cut it (module docstring).
SPACED_FROM = 1000
CUT_S_PER_JOB = 0.16


class RoundPlanner(Protocol):
    """Turns an allocation into leases on GPU ids; may keep state of its own, which it learns from the
    same events as the rest (``mechanism/planning.py``)."""

    def plan(self, state: SchedulerState, allocation: Allocation | None,
             previous: RoundPlan | None) -> RoundPlan: ...

    def resolved(self, state: SchedulerState, previous: Allocation | None) -> None: ...

    def observe(self, plan: RoundPlan, report: RoundReport) -> None: ...

    def stalled(self) -> None: ...

    def dump(self) -> dict[str, object]: ...

    def load(self, data: dict[str, object]) -> None: ...


class Executor(Protocol):
    def admit(self, jobs: list[Job]) -> ThroughputTable | None:
        """Jobs about to join the run: the executor's table with their rows where it keeps one (None: the
        table the run was given holds them)."""
        ...

    def run_round(self, plan: RoundPlan) -> RoundReport:
        """Run the plan's leases until ``start_s + duration_s`` at the latest; report what they did and
        everything learned in doing so (measured rates, restart costs, committed checkpoints)."""
        ...

    def estimate_rate(self, lease: Lease) -> float | None:
        """Steps/s the lease is expected to make (None: unknown)."""
        ...

    def cluster_view(self) -> NodeChange | None:
        """Nodes down, back or joined since the last call (None: unchanged)."""
        ...


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """One round as a recorder sees it: the plan (as cut), the report, what the ledger changed, and the
    state a restart must continue from: the allocation in force, the planner's and the cadence's state,
    the plan the planner will see as the previous one (``planned``: before the cut) and when the loop goes
    on (``next_s``)."""

    plan: RoundPlan
    report: RoundReport
    changes: Changes
    allocation: Allocation | None
    planner: dict[str, object]
    cadence: dict[str, object]
    planned: RoundPlan
    next_s: float


class Recorder(Protocol):
    """Observes the run (the service's store): every round, and every change between rounds."""

    def round(self, record: RoundRecord, ledger: JobLedger) -> None:
        """A round ran (``ledger``: the run's, to read the jobs' records from)."""
        ...

    def changed(self, now_s: float, changes: Changes, ledger: JobLedger) -> None:
        """A change between rounds: a cancellation, a node change."""
        ...


@dataclass(frozen=True, slots=True)
class Hooks:
    """Who listens to a run: ``on_event`` gets each event as a dict, ``on_progress`` the count of
    measured jobs that ended, ``recorder`` every round and change (None: nobody)."""

    on_event: Callable[[dict[str, Any]], None] | None = None
    on_progress: Callable[[int], None] | None = None
    recorder: Recorder | None = None


NO_HOOKS = Hooks()


@dataclass(slots=True)
class RunStats:
    """Counters of one run (decision time in seconds of wall clock)."""

    rounds: int = 0
    resolves: int = 0
    solve_s: float = 0.0
    plan_s: float = 0.0
    wall_s: float = 0.0
    per_round_decision_s: list[float] = field(default_factory=list)
    cut_rounds: int = 0


class Engine:
    """Runs jobs from a source to completion under one policy, planner, executor, clock and cadence."""

    def __init__(self, policy: Policy, planner: RoundPlanner, executor: Executor, clock: Clock, ledger: JobLedger,
                 *, cadence: Cadence | None = None, hooks: Hooks = NO_HOOKS) -> None:
        self.policy, self.planner, self.executor, self.clock, self.ledger = policy, planner, executor, clock, ledger
        self.traits = policy.traits
        self.cadence = cadence or OnChange()
        self.on_event = hooks.on_event or (lambda e: None)
        self._recording = hooks.on_event is not None  # build the per-round event only for a listener
        self.on_progress = hooks.on_progress or (lambda n: None)
        self.recorder = hooks.recorder
        self.allocation: Allocation | None = None
        self.stats = RunStats()
        self._measured_done = 0
        self._resumed = False
        self._previous: RoundPlan | None = None

    def resume(self, allocation: Allocation | None, planner: dict[str, object], cadence: dict[str, object],
               previous: RoundPlan | None = None) -> None:
        """Continue a recorded run: the allocation in force, the planner's and cadence's state and the last
        plan as the recorder last saw them (the ledger and the clock are set by whoever resumes the run)."""
        self.allocation, self._previous = allocation, previous
        if planner:
            self.planner.load(planner)
        if cadence:
            self.cadence.load(cadence)  # whether a change is pending: the resumed jobs are none
            self._resumed = True

    def run(self, source: JobSource) -> RunStats:
        started = elapsed_s()
        if self.ledger.active and not self._resumed:  # jobs put into the ledger before the run
            self.cadence.note(Changes(arrived=tuple(self.ledger.active)))
        first = source.next_arrival()
        if first is not None and not self._resumed:
            self.clock.advance_to(first)
        previous = self._previous
        ran_nothing, stalled = previous is None, False
        while not source.done(self._measured_done):
            now = self.clock.now()
            self._admit(source, now)
            self._changes(source, now)
            if source.next_arrival() is None and ran_nothing:
                self.cadence.stalled()  # Gavel's stall breaker, for the cadence and the planner alike
                self.planner.stalled()
            plan = self._decide(now, previous)
            if not plan.leases:
                ran_nothing = True
                if self._idle(source):
                    continue
                if stalled:
                    raise InfeasibleError(self._stuck_message())
                stalled = True
                continue
            stalled = ran_nothing = False
            cut = self._cut(plan, source, now)
            report, changes = self._run_round(cut, source)
            previous = plan
            # a cut round ends at its event even where its leases made no whole step by then
            next_s = max(report.end_s, now, cut.start_s + cut.duration_s if cut is not plan else now)
            if self.recorder is not None:
                self.recorder.round(RoundRecord(cut, report, changes, self.allocation, self.planner.dump(),
                                                self.cadence.dump(), plan, next_s), self.ledger)
            self.clock.advance_to(next_s)
        self.stats.wall_s = elapsed_s(started)
        return self.stats

    # -- one round -----------------------------------------------------------------
    def _admit(self, source: JobSource, now: float) -> None:
        jobs = source.pop_arrived(now)
        if not jobs:
            return
        table = self.executor.admit(jobs)
        if table is not None:
            self.cadence.note(self.ledger.update_table(table))
        for job in jobs:
            self.cadence.note(self.ledger.add(job))
            self.on_event({"t": now, "event": "arrival", "job": job.job_id, "job_type": job.job_type,
                           "scale_factor": job.scale_factor})

    def _changes(self, source: JobSource, now: float) -> None:
        """Cancellations from the source and node changes from the executor, at a round boundary."""
        ended: list[int] = []
        for jid in source.pop_cancelled():
            changes = self.ledger.cancel(jid, now)
            if changes:
                ended.append(jid)
                self.on_event({"t": now, "event": "cancelled", "job": jid})
                self._changed(now, changes)
        self._count_ended(ended, source)
        change = self.executor.cluster_view()
        if change is not None and change.cluster != self.ledger.cluster:
            view = change.cluster
            changes = self.ledger.set_cluster(view, change.table)
            self.on_event({"t": now, "event": "cluster", "nodes": len(view.nodes), "down": sorted(view.down),
                           "gpus_up": len(view.up_gpus)})
            self._changed(now, changes)

    def _changed(self, now: float, changes: Changes) -> None:
        self.cadence.note(changes)
        if self.recorder is not None:
            self.recorder.changed(now, changes, self.ledger)

    def _count_ended(self, ended: list[int], source: JobSource) -> None:
        done = sum(1 for j in ended if source.measured(j))
        if done:
            self._measured_done += done
            self.on_progress(done)

    def _decide(self, now: float, previous: RoundPlan | None) -> RoundPlan:
        t0 = elapsed_s()
        if self.cadence.due(now, self.traits.resolve == "every_round"):
            self._resolve(now)
        plan = self.planner.plan(self.ledger.snapshot(now), self.allocation, previous)
        decision = elapsed_s(t0)
        self.stats.plan_s += decision
        self.stats.per_round_decision_s.append(decision)
        return plan

    def _resolve(self, now: float) -> None:
        state = self.ledger.snapshot(now)
        self.planner.resolved(state, self.allocation)
        self.cadence.resolved(now)
        t0 = elapsed_s()
        self.allocation = self.policy.allocate(state)
        self.stats.solve_s += elapsed_s(t0)
        self.stats.resolves += 1
        self.ledger.record_resolve(self.allocation)
        self.on_event({"t": now, "event": "resolve", "jobs": len(self.allocation.job_ids)})

    def _idle(self, source: JobSource) -> bool:
        """Nothing to run: move to the next arrival, or wait on a live source (a job, a cancellation or
        a node may come); False for a fixed source with no arrival left (the caller suspects a stall)."""
        nxt = source.next_arrival()
        if nxt is not None:
            self.clock.advance_to(nxt)
            return True
        return source.wait(IDLE_POLL_S)  # a live source waits for submissions, cancellations or nodes

    def _run_round(self, plan: RoundPlan, source: JobSource) -> tuple[RoundReport, Changes]:
        report = self.executor.run_round(plan)
        changes = self.ledger.apply(plan, report)
        self.planner.observe(plan, report)
        self.cadence.note(changes)
        ended = changes.ended
        self.stats.rounds += 1
        if self._recording:
            busy = sum(max(0.0, r.end_s - report.start_s) * len(r.gpus) for r in report.results)
            self.on_event({"t": plan.start_s, "event": "round", "end": report.end_s, "busy_gpu_s": busy,
                           "leases": [[lease.job_id, lease.copy, list(lease.gpus), lease.extended]
                                      for lease in plan.leases]})
        for jid in sorted(ended, key=lambda j: (self._end_time(j), j)):
            rec = self.ledger.records[jid]
            if rec.finish_s is not None:
                self.on_event({"t": rec.finish_s, "event": "finish", "job": jid})
            else:
                self.on_event({"t": rec.failed_s, "event": "job_failed", "job": jid, "error": rec.failure})
        self._count_ended(list(ended), source)
        return report, changes

    def _end_time(self, job_id: int) -> float:
        rec = self.ledger.records[job_id]
        return rec.finish_s if rec.finish_s is not None else (rec.failed_s or 0.0)

    def _cut(self, plan: RoundPlan, source: JobSource, now: float) -> RoundPlan:
        """The round ends at its first decisive event (see the module docstring). Every event but the
        round's end comes before that end, so the first one is the earliest of them, if any (which of
        several at one time does not matter: only when the round ends does)."""
        if not self.traits.cut_rounds:
            return plan  # its one event is the round's end
        end = plan.start_s + plan.duration_s
        first = end  # the earliest event before the round's end, else the end
        active = self.ledger.active
        spaced = plan.start_s + CUT_S_PER_JOB * max(0, len(active) - SPACED_FROM)  # GPUs idle, none waiting
        nxt = source.next_arrival()
        # GPUs idle: read only where an arrival is coming (without one, a completion is an event only
        # for a waiting job, whatever sits idle)
        idle = nxt is not None and len({g for lease in plan.leases for g in lease.gpus}) < len(
            self.ledger.cluster.up_gpus)
        if nxt is not None and now < nxt:
            at = self._arrival_cut(plan, nxt, idle)
            if at is not None and at < end:
                first = max(at, spaced) if idle else at  # else copies yield: their own minimum lease
        waiting = not {lease.job_id for lease in plan.leases}.issuperset(active)  # a job not planned
        # a forking policy's other jobs fork onto the GPUs a completion frees
        waiting = waiting or (self.traits.forks and len(active) > 1)
        if waiting or nxt is not None:  # else no completion is an event
            done = self._completion(plan, end, nxt, waiting)
            # a job waits for it, or an arrival will: GPUs at once; else (GPUs idle) the spacing
            first = min(first, done if waiting or not idle else max(done, spaced))
        if not first < end:
            return plan
        self.stats.cut_rounds += 1
        return dataclasses.replace(plan, duration_s=first - plan.start_s)

    def _completion(self, plan: RoundPlan, end: float, nxt: float | None, waiting: bool) -> float:
        """The earliest predicted lease completion that is an event (before ``end``, and a job is
        ``waiting`` or the next arrival ``nxt`` comes before it), else ``end``."""
        copies = {lease.job_id for lease in plan.leases if lease.copy > 0}
        estimate, start, first = self.executor.estimate_rate, plan.start_s, end
        for lease in plan.leases:
            # a job running as copies: its finish depends on all of them (and, simulated, on the
            # fork efficiency), which one lease's rate does not predict; its round runs on
            rate = estimate(lease) if lease.job_id not in copies else None
            if rate is not None and rate > 0:
                # just past the last step, after the restore a lease that is not extended pays first
                t = start + lease.lost_s + lease.max_steps / rate * (1 + 1e-9) + 1e-9
                if t < first and (waiting or (nxt is not None and nxt < t)):
                    first = t
        return first

    def _arrival_cut(self, plan: RoundPlan, arrival_s: float, idle: bool) -> float | None:
        """When an arrival ends the round: at once where GPUs are ``idle`` (a GPU two jobs share
        counts once); for a forking policy whose jobs run as several copies, once the round has run
        ``yield_after_s`` (the copies yield to the new job); None: it waits for the round's end."""
        if idle:
            return arrival_s
        after = self.traits.yield_after_s
        if after is None or len({lease.job_id for lease in plan.leases}) == len(plan.leases):
            return None
        return max(arrival_s, plan.start_s + after)

    def _stuck_message(self) -> str:
        stuck = [f"{r.job.job_id} ({r.job.job_type}, {r.job.scale_factor} GPUs)" for r in self.ledger.active.values()]
        return f"no GPU can run these jobs under this policy and cluster: {', '.join(stuck[:5])}"
