"""The one scheduling loop, shared by the simulator and the real runtime.

    state  = ledger.snapshot(now)
    alloc  = policy.allocate(state)            (only when a re-solve is due)
    plan   = planner.plan(state, alloc, prev)
    report = executor.run_round(plan)          (the only side effects)
    ledger.apply(plan, report)

Re-solve cadence: by default the policy is re-solved at the first round
boundary after any arrival or completion. ``gavel_compat`` reproduces
Gavel's published simulator: re-solve only if something changed AND at
least ``resolve_gap_s`` (1,920 s) passed since the last re-solve, or the
last one happened at t = 0; with every job arrived and an empty round, a
re-solve is forced (Gavel's stall breaker).
A policy with ``resolve_every_round = True`` (Hadar, YARN-CS: cheap,
per-round decisions that must see every arrival and completion) is
re-solved at every round boundary in both modes. A policy with
``cut_rounds = True`` (Hadar) has a round end early at an arrival that finds
GPUs idle or at a completion that frees GPUs for a waiting job, so neither
the new job nor the freed GPUs wait for the round's end.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from hadar.clock import Clock, elapsed_s
from hadar.errors import InfeasibleError
from hadar.mechanism.ledger import JobLedger
from hadar.model.plan import RoundPlan, RoundReport
from hadar.model.state import Allocation, SchedulerState
from hadar.policies.base import Policy
from hadar.sim.workload import Workload

log = logging.getLogger(__name__)


class RoundPlanner(Protocol):
    def plan(self, state: SchedulerState, allocation: Allocation | None,
             previous: RoundPlan | None) -> RoundPlan: ...


class Executor(Protocol):
    def run_round(self, plan: RoundPlan) -> RoundReport: ...


@dataclass(slots=True)
class RunStats:
    """Counters of one run (decision time in seconds of wall clock)."""

    rounds: int = 0
    resolves: int = 0
    solve_s: float = 0.0
    plan_s: float = 0.0
    wall_s: float = 0.0
    per_round_decision_s: list[float] = field(default_factory=list)


class Engine:
    """Runs a workload to completion under one policy, planner, executor and clock."""

    def __init__(self, policy: Policy, planner: RoundPlanner, executor: Executor, clock: Clock, ledger: JobLedger,
                 *, gavel_compat: bool = False, resolve_gap_s: float = 1920.0,
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 on_progress: Callable[[int], None] | None = None) -> None:
        self.policy, self.planner, self.executor, self.clock, self.ledger = policy, planner, executor, clock, ledger
        self.gavel_compat = gavel_compat
        self.resolve_gap_s = resolve_gap_s
        self.on_event = on_event or (lambda e: None)
        self.on_progress = on_progress or (lambda n: None)
        self.allocation: Allocation | None = None
        self.stats = RunStats()
        self._measured_done = 0

    def run(self, workload: Workload) -> RunStats:
        started = elapsed_s()
        first = workload.next_arrival()
        if first is None:
            return self.stats
        self.clock.advance_to(first)
        previous: RoundPlan | None = None
        ran_nothing = True
        stalled = False
        while not self._done(workload):
            now = self.clock.now()
            for job in workload.pop_arrived(now):
                self.ledger.add(job)
                self.on_event({"t": now, "event": "arrival", "job": job.job_id, "job_type": job.job_type,
                               "scale_factor": job.scale_factor})
            if workload.exhausted and ran_nothing:
                self.ledger.last_reset_s = 0.0  # stall breaker: allow an immediate re-solve
            t0 = elapsed_s()
            self._maybe_resolve(now)
            state = self.ledger.snapshot(now)
            plan = self.planner.plan(state, self.allocation, previous)
            self.stats.plan_s += elapsed_s(t0)
            self.stats.per_round_decision_s.append(elapsed_s(t0))
            if not plan.leases:
                ran_nothing = True
                nxt = workload.next_arrival()
                if nxt is not None:
                    self.clock.advance_to(nxt)
                    continue
                if stalled:
                    raise InfeasibleError(self._stuck_message())
                stalled = True
                continue
            stalled = False
            ran_nothing = False
            plan = self._cut_round(plan, workload, now)
            report = self.executor.run_round(plan)
            finished = self.ledger.apply(plan, report)
            self.stats.rounds += 1
            self.on_event({"t": plan.start_s, "event": "round", "end": report.end_s,
                           "leases": [[lease.job_id, lease.copy, list(lease.gpus), lease.extended]
                                      for lease in plan.leases]})
            for jid in finished:
                self.on_event({"t": self.ledger.records[jid].finish_s, "event": "finish", "job": jid})
            if finished:
                done = sum(1 for j in finished if workload.measured(j))
                self._measured_done += done
                self.on_progress(done)
            previous = plan
            self.clock.advance_to(max(report.end_s, now))
        self.stats.wall_s = elapsed_s(started)
        return self.stats

    def _cut_round(self, plan: RoundPlan, workload: Workload, now: float) -> RoundPlan:
        """A policy with ``cut_rounds`` (Hadar) ends a round early at the first moment GPUs could be
        put to better use: the next arrival, if the round leaves GPUs idle; a lease's predicted
        finish (its remaining steps at the executor's rate, when the executor tells its rates), if a
        job is waiting for GPUs or will have arrived by then. Leases still running carry on on the same GPUs next round
        (extended, no restart)."""
        if not getattr(self.policy, "cut_rounds", False):
            return plan
        end = plan.start_s + plan.duration_s
        cuts: list[float] = []
        nxt = workload.next_arrival()
        if (nxt is not None and now < nxt < end
                and sum(len(lease.gpus) for lease in plan.leases) < self.ledger.cluster.num_gpus):
            cuts.append(nxt)
        rate = getattr(self.executor, "rate", None)
        planned = {lease.job_id for lease in plan.leases}
        if rate is not None:
            waiting = any(jid not in planned for jid in self.ledger.active)
            for lease in plan.leases:
                r = rate(lease)
                if r > 0 and lease.copy == 0:
                    t = plan.start_s + lease.max_steps / r * (1 + 1e-9) + 1e-9  # just past the last step
                    if t < end and (waiting or (nxt is not None and nxt < t)):
                        cuts.append(t)
        return dataclasses.replace(plan, duration_s=min(cuts) - plan.start_s) if cuts else plan

    def _done(self, workload: Workload) -> bool:
        if workload.window is not None:
            return self._measured_done >= workload.window[1] - workload.window[0]
        return workload.exhausted and not self.ledger.active

    def _maybe_resolve(self, now: float) -> None:
        ledger = self.ledger
        every_round = getattr(self.policy, "resolve_every_round", False)  # Hadar, YARN-CS: no cadence rule
        if not every_round and not ledger.need_update:
            return
        if (not every_round and self.gavel_compat
                and not (now - ledger.last_reset_s >= self.resolve_gap_s or ledger.last_reset_s == 0)):
            return
        ledger.reset_counters(now, self.allocation)
        t0 = elapsed_s()
        self.allocation = self.policy.allocate(ledger.snapshot(now))
        self.stats.solve_s += elapsed_s(t0)
        self.stats.resolves += 1
        ledger.memo = self.allocation.memo
        ledger.need_update = False
        self.on_event({"t": now, "event": "resolve", "jobs": len(self.allocation.job_ids)})

    def _stuck_message(self) -> str:
        stuck = [f"{r.job.job_id} ({r.job.job_type}, {r.job.scale_factor} GPUs)" for r in self.ledger.active.values()]
        return f"no GPU can run these jobs under this policy and cluster: {', '.join(stuck[:5])}"
