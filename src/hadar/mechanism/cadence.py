"""When the policy is re-solved: an injected strategy, read by the engine at every round boundary.

- ``OnChange`` (default): at the first round boundary after any arrival or
  completion.
- ``GavelCadence`` (``--gavel-compat``): as Gavel's published simulator,
  only if something changed AND at least ``gap_s`` (1,920 s) passed since
  the last re-solve, or the last one happened at t = 0.

A policy whose traits say ``resolve="every_round"`` (Hadar, YARN-CS) is
re-solved at every boundary under either cadence. Both cadences share
Gavel's stall breaker: when every job has arrived and a round ran nothing,
the ledger's reset time goes back to 0, which allows an immediate re-solve
(and, as in Gavel, counts the whole run in the next deficit update).
"""

from __future__ import annotations

from typing import Protocol

from hadar.mechanism.ledger import JobLedger


class Cadence(Protocol):
    def due(self, ledger: JobLedger, now_s: float, every_round: bool) -> bool:
        """Whether the policy must be re-solved at this boundary."""
        ...


class OnChange:
    """Re-solve at the first boundary after an arrival or a completion."""

    def due(self, ledger: JobLedger, now_s: float, every_round: bool) -> bool:
        return every_round or ledger.need_update


class GavelCadence:
    """Gavel's simulator: something changed and ``gap_s`` passed since the last re-solve (or it was at 0)."""

    def __init__(self, gap_s: float = 1920.0) -> None:
        if not gap_s > 0:
            raise ValueError(f"re-solve gap must be positive, got {gap_s}")
        self.gap_s = gap_s

    def due(self, ledger: JobLedger, now_s: float, every_round: bool) -> bool:
        if every_round:
            return True
        return ledger.need_update and (now_s - ledger.last_reset_s >= self.gap_s or ledger.last_reset_s == 0)
