"""What the engine tells every round planner besides asking for a plan.

A planner may keep state of its own across rounds (Gavel's counters, ``counters.py``); it learns
what it needs from the same events as everything else: a re-solve (``resolved``), a round's report
(``observe``) and Gavel's stall breaker (``stalled``); ``dump``/``load`` carry its state across a
restart (the recorder stores it). ``Stateless`` is the base of planners that keep none.
"""

from __future__ import annotations

from hadar.mechanism.events import Event
from hadar.model.plan import RoundPlan, RoundReport
from hadar.model.state import Allocation, SchedulerState


class Stateless:
    """A planner whose plan depends only on the state, the allocation and the previous plan."""

    def resolved(self, state: SchedulerState, previous: Allocation | None) -> None:
        """The policy is re-solved at ``state.now_s`` (``previous``: the allocation that ends)."""

    def observe(self, plan: RoundPlan, report: RoundReport) -> None:
        """The round ``plan`` ran and ``report`` says what it did."""

    def stalled(self) -> None:
        """Every job has arrived and a round ran nothing (Gavel's stall breaker)."""

    def dump(self) -> dict[str, object]:
        """The state a restart must continue from (JSON-able)."""
        return {}

    def load(self, data: dict[str, object]) -> None:
        """Continue from ``dump``'s state."""

    def events(self, plan: RoundPlan, arrival_s: float) -> list[Event]:
        """Events of its own that end the round when an arrival comes on a full cluster (none)."""
        return []
