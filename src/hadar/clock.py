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
    """Real time in seconds since construction: ``advance_to`` sleeps.

    ``speed`` is the real-time factor (SimPy's ``factor``, inverted): clock seconds per wall second. At 1
    (the default) the clock is the wall; at 60 a clock minute passes in a wall second, for tests of the
    loop's mechanism (arrivals, rounds, cancellations on a live source) beside an executor that does not
    wait on the wall itself (the simulated one). An executor that trains for real converts a clock span
    to wall seconds with ``wall_s``.
    """

    def __init__(self, speed: float = 1.0) -> None:
        if not speed > 0 or speed == float("inf"):
            raise ValueError(f"a clock's speed must be a positive number of clock seconds per wall second, "
                             f"not {speed!r}")
        self.speed = float(speed)
        self._t0 = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self._t0) * self.speed

    def wall_s(self, clock_s: float) -> float:
        """Wall seconds that ``clock_s`` seconds of this clock take."""
        return clock_s / self.speed

    def advance_to(self, t: float) -> None:
        delay = t - self.now()
        if delay > 0:
            time.sleep(self.wall_s(delay))


def elapsed_s(since: float | None = None) -> float:
    """Monotonic seconds (for measuring decision and wall time, never for scheduling)."""
    t = time.perf_counter()
    return t if since is None else t - since
