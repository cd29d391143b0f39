"""Clocks: the only place that reads or waits on time."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...
    def advance_to(self, t: float) -> None: ...


class VirtualClock:
    """Simulated time: ``advance_to`` jumps."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._t = float(start_s)

    def now(self) -> float:
        return self._t

    def advance_to(self, t: float) -> None:
        if t > self._t:
            self._t = float(t)


class WallClock:
    """Real time in seconds since construction: ``advance_to`` sleeps."""

    def __init__(self) -> None:
        self._t0 = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self._t0

    def advance_to(self, t: float) -> None:
        delay = t - self.now()
        if delay > 0:
            time.sleep(delay)


def elapsed_s(since: float | None = None) -> float:
    """Monotonic seconds (for measuring decision and wall time, never for scheduling)."""
    t = time.perf_counter()
    return t if since is None else t - since
