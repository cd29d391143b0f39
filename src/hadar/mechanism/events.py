"""The round's events: what may end a round before its planned end, ordered by (time, kind, seq).

Each kind has one rule for whether it ends the round (the engine cuts the round at the first event
that does; which of several at one time does not matter, only when the round ends):

- ``COMPLETION``, a lease's predicted end (copy 0; the executor's estimate): ends the round when a
  job is waiting for GPUs, or will have arrived by then, or (a planner that forks) another job may
  fork onto the freed GPUs; where GPUs sit idle and no job waits, no sooner than the batching allows.
- ``ARRIVAL``: ends the round when the plan leaves GPUs idle, no sooner than the batching allows.
- ``YIELD``, contributed by a planner (HadarE's forking planner): on a full cluster where jobs run as
  copies, an arrival ends the round once the round has run the copies' minimum lease.
- ``ROUND_END``: always.

Node changes, cancellations, submissions and measurements that moved never cut a round: they are
taken at the next round boundary (a real executor's round is not interrupted), where the ledger's
``Changes`` tell the cadence whether to re-solve.

``Batching`` says how arrivals are batched at scale: a full decision costs in proportion to the active
jobs, so above ``from_jobs`` active jobs the arrivals of a minute or two share one decision.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from hadar.model.plan import Lease, RoundPlan


class Kind(IntEnum):
    """Event kinds, in the order they are taken at one time."""

    COMPLETION = 0
    ARRIVAL = 1
    YIELD = 2
    ROUND_END = 3


@dataclass(frozen=True, slots=True, order=True)
class Event:
    t: float
    kind: Kind
    seq: int = 0


@dataclass(frozen=True, slots=True)
class Batching:
    """Above ``from_jobs`` active jobs, where the round leaves GPUs idle and no job waits, an arrival (or a
    completion that is an event only because an arrival comes first) ends the round no sooner than
    ``s_per_job`` seconds per active job over ``from_jobs`` after its start (16 s at 1,100 active jobs,
    2 minutes at 1,750 with the defaults; never past the round's end). Below, no round moves: a few
    seconds' delay changes every later decision (one 1,000-job workload's drain by 4 %)."""

    from_jobs: int = 1000
    s_per_job: float = 0.16

    def __post_init__(self) -> None:
        if self.from_jobs < 0 or not self.s_per_job >= 0:
            raise ValueError(f"batching needs from_jobs >= 0 and s_per_job >= 0, got {self}")

    def earliest(self, start_s: float, active: int) -> float:
        return start_s + self.s_per_job * max(0, active - self.from_jobs)


@dataclass(frozen=True, slots=True)
class RoundContext:
    """What the events' rules read: the next arrival (None: none), whether the plan leaves GPUs idle
    (read only where an arrival comes), whether a job is waiting, the batching's earliest cut."""

    arrival_s: float | None
    idle: bool
    waiting: bool
    spaced_s: float


def first_cut(plan: RoundPlan, ctx: RoundContext, contributed: Sequence[Event],
              completions: Callable[[], list[Event]]) -> float:
    """When the round ends: the first event whose rule says so (the round's end if none does).
    ``contributed``: the planner's own events (``YIELD``) that end the round; ``completions()``: the
    predicted lease completions that are events (asked only where one could be)."""
    end = plan.start_s + plan.duration_s
    events = [Event(end, Kind.ROUND_END)]
    nxt = ctx.arrival_s
    if nxt is not None and plan.start_s < nxt:
        if ctx.idle:
            events.append(Event(max(nxt, ctx.spaced_s), Kind.ARRIVAL))
        else:
            events.extend(contributed)
    if ctx.waiting or nxt is not None:  # else no completion is an event
        for e in completions():
            # a job waits for it, or an arrival will: GPUs at once; else (GPUs idle) the batching
            t = e.t if ctx.waiting or not ctx.idle else max(e.t, ctx.spaced_s)
            events.append(Event(t, Kind.COMPLETION, e.seq))
    return min(events).t


def completion_events(plan: RoundPlan, estimate: Callable[[Lease], float | None], end: float,
                      ctx: RoundContext) -> list[Event]:
    """Each lease's predicted completion that is an event: before ``end``, and a job is waiting or the next
    arrival comes before it. A job running as copies is left out: its finish depends on all of them (and,
    simulated, on the world's fork efficiency), which one lease's rate does not predict."""
    copies = {lease.job_id for lease in plan.leases if lease.copy > 0}
    start, nxt, out = plan.start_s, ctx.arrival_s, []
    for seq, lease in enumerate(plan.leases):
        rate = estimate(lease) if lease.job_id not in copies else None
        if rate is not None and rate > 0:
            # just past the last step, after the restore a lease that is not extended pays first
            t = start + lease.lost_s + lease.max_steps / rate * (1 + 1e-9) + 1e-9
            if t < end and (ctx.waiting or (nxt is not None and nxt < t)):
                out.append(Event(t, Kind.COMPLETION, seq))
    return out
