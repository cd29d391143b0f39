"""The one scheduling loop, shared by the simulator, the batch runtime and the service.

    state   = ledger.snapshot(now)
    alloc   = policy.allocate(state)            (only when the cadence says a re-solve is due)
    plan    = planner.plan(state, alloc, prev)
    plan    = the round cut at its first event whose rule ends it (mechanism/events.py)
    report  = executor.run_round(plan)          (the only side effects; everything learnt comes back here)
    changes = ledger.apply(plan, report)        (the only writer of scheduling state)
    planner.observe(plan, report); cadence.note(changes); recorder.round(...)

What the loop reads of a policy is its ``traits`` (``PolicyTraits``); when to re-solve is the
injected ``Cadence``, told of every ``Changes`` the ledger returns; jobs come from a ``JobSource``;
who listens is ``Hooks`` (events, progress, a recorder). The round's events (arrivals, predicted
completions, the planner's own, such as HadarE's copies yielding, and the round's end), each kind's
rule and how arrivals are batched at scale (``Batching``, a setting) are in ``mechanism/events.py``;
a round ends at the first event whose rule says so, and leases still running carry on, on the same
GPUs, next round. The same code cuts rounds in the simulator and on Ray. The loop changes nothing
process-wide.
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
from hadar.mechanism.events import Batching, Event, RoundContext, completion_events, first_cut
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

    def events(self, plan: RoundPlan, arrival_s: float) -> list[Event]:
        """The planner's own events that end the round when an arrival comes on a full cluster (HadarE's
        copies yield to it after their minimum lease); none for most planners."""
        ...


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
BATCHING = Batching()  # how arrivals are batched at scale (mechanism/events.py)


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
                 *, cadence: Cadence | None = None, hooks: Hooks = NO_HOOKS, batching: Batching | None = None) -> None:
        self.policy, self.planner, self.executor, self.clock, self.ledger = policy, planner, executor, clock, ledger
        self.traits = policy.traits
        self.cadence = cadence or OnChange()
        self.batching = batching or BATCHING
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
            self.on_event({"t": plan.start_s, "event": "round", "end": report.end_s, "planned_s": plan.duration_s,
                           "busy_gpu_s": busy,
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
        """The round ends at its first event whose rule says so (``mechanism/events.py``)."""
        if not self.traits.cut_rounds:
            return plan  # its one event is the round's end
        active = self.ledger.active
        nxt = source.next_arrival()
        # GPUs idle: read only where an arrival is coming (without one, a completion is an event only
        # for a waiting job, whatever sits idle)
        idle = nxt is not None and len({g for lease in plan.leases for g in lease.gpus}) < len(
            self.ledger.cluster.up_gpus)
        waiting = not {lease.job_id for lease in plan.leases}.issuperset(active)  # a job not planned
        # a forking policy's other jobs fork onto the GPUs a completion frees
        waiting = waiting or (self.traits.forks and len(active) > 1)
        ctx = RoundContext(nxt, idle, waiting, self.batching.earliest(plan.start_s, len(active)))
        end = plan.start_s + plan.duration_s
        contributed = self.planner.events(plan, nxt) if nxt is not None and not idle else []
        first = first_cut(plan, ctx, contributed,
                          lambda: completion_events(plan, self.executor.estimate_rate, end, ctx))
        if not first < end:
            return plan
        self.stats.cut_rounds += 1
        return dataclasses.replace(plan, duration_s=first - plan.start_s)

    def _stuck_message(self) -> str:
        stuck = [f"{r.job.job_id} ({r.job.job_type}, {r.job.scale_factor} GPUs)" for r in self.ledger.active.values()]
        return f"no GPU can run these jobs under this policy and cluster: {', '.join(stuck[:5])}"
