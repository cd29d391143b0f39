"""What one Hadar decision hands the next: warm starts, and a horizon computed ahead.

Hadar solves a few LPs every round (keeper.py): the horizon of the remaining
work, the JCT plan, and the keeper's horizon of the work the round will
leave. The next round's LPs start from this round's final simplex bases
(hadar.solve.highs, mapped by job across arrivals and completions), and
when the round goes as placed (every job makes the whole steps
``Work.progress`` says, nothing arrives or finishes), the next round's
remaining work *is* the work whose horizon the keeper solved: the same LP
to the bit, which would start from that LP's final basis, where it is
optimal. Its answer is taken rather than solved again (about two rounds in
three on Gavel's steady state; docs/hadar.md, "Warm starts").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hadar.arrays import IntArray
from hadar.policies.hadar.keeper import Work, horizon_s
from hadar.solve import highs

_PLAN = "hadar.plan_basis"  # memo: the JCT plan's last simplex basis (its warm start next round)
_HORIZON = "hadar.horizon_basis"  # memo: the last horizon LP's basis (the start of the next horizon LPs)
_AHEAD = "hadar.horizon_ahead"  # memo: (Work.key, horizon) of the work this round leaves, if it goes as placed


@dataclass(slots=True)
class Starts:
    """One decision's warm starts (``plan``: the JCT plan's LP; ``horizon``: the horizon LPs') and
    ``ahead``, the key (``Work.key``) and horizon of the work the round leaves."""

    plan: highs.Warm = field(default_factory=highs.Warm)
    horizon: highs.Warm = field(default_factory=highs.Warm)
    ahead: tuple[bytes, float] | None = None

    @classmethod
    def of(cls, memo: Mapping[str, Any]) -> Starts:
        """The starts the previous decision left in the policy memo."""
        return cls(highs.Warm(memo.get(_PLAN)), highs.Warm(memo.get(_HORIZON)), memo.get(_AHEAD))

    def memo(self) -> dict[str, Any]:
        """What to leave for the next decision."""
        return {k: v for k, v in ((_PLAN, self.plan.basis), (_HORIZON, self.horizon.basis), (_AHEAD, self.ahead))
                if v is not None}


class Horizons:
    """One decision's horizon LPs (keeper.horizon_s), warm-started from ``starts`` (None: cold) and
    mapped by the rows' ``names``."""

    __slots__ = ("names", "starts")

    def __init__(self, starts: Starts | None, names: IntArray | None) -> None:
        self.starts, self.names = starts, names

    def now(self, work: Work) -> float:
        """The horizon of the round's own ``work``: the one computed ahead where it is this work."""
        st = self.starts
        if st is None or self.names is None:
            return horizon_s(work)
        ahead, st.ahead = st.ahead, None
        if ahead is not None and ahead[0] == work.key(self.names):
            return ahead[1]
        return horizon_s(work, st.horizon, self.names)

    def after(self, work: Work) -> float:
        """The horizon of the ``work`` a round would leave, kept ahead for the next round (a caller that
        weighs several rounds puts back the one it keeps: :meth:`keep`)."""
        st = self.starts
        if st is None or self.names is None:
            return horizon_s(work)
        h = horizon_s(work, st.horizon, self.names)
        st.ahead = (work.key(self.names), h)
        return h

    def kept(self) -> tuple[bytes, float] | None:
        """The horizon kept ahead now (give it back to :meth:`keep`)."""
        return None if self.starts is None else self.starts.ahead

    def keep(self, ahead: tuple[bytes, float] | None) -> None:
        if self.starts is not None:
            self.starts.ahead = ahead
