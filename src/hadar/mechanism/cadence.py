"""When the policy is re-solved: an injected strategy, told of every change and asked at every boundary.

- ``OnChange`` (default): at the first round boundary after any change the ledger reported (an
  arrival, a completion or failure, a cancellation, a node change, a measured rate that moved).
- ``GavelCadence`` (``--gavel-compat``): as Gavel's published simulator,
  only if something changed AND at least ``gap_s`` (1,920 s) passed since
  the last re-solve, or the last one happened at t = 0.

A policy whose traits say ``resolve="every_round"`` (Hadar, YARN-CS) is
re-solved at every boundary under either cadence. Both cadences share
Gavel's stall breaker (``stalled``): when every job has arrived and a round ran nothing,
the last re-solve counts as at 0, which allows an immediate re-solve (and, as in Gavel, the
rounds planner then counts the whole run in the next deficit update).

A cadence's state (whether a change is pending, when it last re-solved) is its own; ``dump``/``load``
carry it across a restart.
"""

from __future__ import annotations

from typing import Protocol

from hadar.mechanism.ledger import Changes


class Cadence(Protocol):
    def note(self, changes: Changes) -> None:
        """The ledger changed (arrivals, ends, cancellations, nodes, measured rates)."""
        ...

    def due(self, now_s: float, every_round: bool) -> bool:
        """Whether the policy must be re-solved at this boundary."""
        ...

    def resolved(self, now_s: float) -> None:
        """The policy was re-solved at ``now_s``: nothing is pending."""
        ...

    def stalled(self) -> None:
        """Gavel's stall breaker: every job has arrived and a round ran nothing."""
        ...

    def dump(self) -> dict[str, object]: ...

    def load(self, data: dict[str, object]) -> None: ...


class OnChange:
    """Re-solve at the first boundary after a change."""

    def __init__(self) -> None:
        self.pending = False
        self.last_s = 0.0

    def note(self, changes: Changes) -> None:
        if changes:
            self.pending = True

    def due(self, now_s: float, every_round: bool) -> bool:
        return every_round or self.pending

    def resolved(self, now_s: float) -> None:
        self.pending, self.last_s = False, now_s

    def stalled(self) -> None:
        self.last_s = 0.0

    def dump(self) -> dict[str, object]:
        return {"pending": self.pending, "last_s": self.last_s}

    def load(self, data: dict[str, object]) -> None:
        pending, last = data["pending"], data["last_s"]
        assert isinstance(pending, bool) and isinstance(last, float | int)
        self.pending, self.last_s = pending, float(last)


class GavelCadence(OnChange):
    """Gavel's simulator: something changed and ``gap_s`` passed since the last re-solve (or it was at 0)."""

    def __init__(self, gap_s: float = 1920.0) -> None:
        if not gap_s > 0:
            raise ValueError(f"re-solve gap must be positive, got {gap_s}")
        super().__init__()
        self.gap_s = gap_s

    def due(self, now_s: float, every_round: bool) -> bool:
        if every_round:
            return True
        return self.pending and (now_s - self.last_s >= self.gap_s or self.last_s == 0)
