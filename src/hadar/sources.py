"""Where jobs come from: the engine reads a ``JobSource``.

``Workload`` is a fixed job list or a generated stream (with Gavel's
steady-state window); the service's store is another source, whose jobs
arrive while the engine runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from hadar.model.job import Job


class JobSource(Protocol):
    """Jobs in arrival order, as the engine consumes them."""

    def next_arrival(self) -> float | None:
        """Arrival time of the next job not yet handed out (None: none known now)."""
        ...

    def pop_arrived(self, t: float) -> list[Job]:
        """Every job that has arrived by ``t`` and was not handed out yet."""
        ...

    def wait(self, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` for news (a live source: a submission). True if jobs may still come
        that are not announced by ``next_arrival`` (a live source); a fixed source returns False at once."""
        ...

    def pop_cancelled(self) -> list[int]:
        """Ids of jobs cancelled since the last call (the engine ends them at the round boundary)."""
        ...

    def done(self, finished: int) -> bool:
        """True when the run is over, ``finished`` being the number of measured jobs that ended."""
        ...

    def measured(self, job_id: int) -> bool:
        """Whether ``job_id`` counts in the run's metrics."""
        ...


class Workload:
    """Jobs in arrival order; ``measured`` ids are the ones metrics cover.

    With ``window=(a, b)`` jobs keep coming from ``source`` until every job
    with id in [a, b) has finished (Gavel's steady-state method); otherwise
    the run ends when every job of the (finite) source has finished.
    """

    def __init__(self, source: Iterator[Job] | list[Job], *, window: tuple[int, int] | None = None,
                 limit: int | None = None) -> None:
        self._it = iter(source)
        self.window = window
        self.limit = len(source) if isinstance(source, list) else limit
        self._next: Job | None = None
        self.emitted = 0
        self.jobs: list[Job] = []
        self._advance()

    def _advance(self) -> None:
        if self.limit is not None and self.emitted >= self.limit:
            self._next = None
            return
        self._next = next(self._it, None)
        if self._next is not None:
            self.emitted += 1

    def next_arrival(self) -> float | None:
        return None if self._next is None else self._next.arrival_s

    def pop_arrived(self, t: float) -> list[Job]:
        out: list[Job] = []
        while self._next is not None and self._next.arrival_s <= t:
            out.append(self._next)
            self.jobs.append(self._next)
            self._advance()
        return out

    def wait(self, timeout_s: float) -> bool:
        return False

    def pop_cancelled(self) -> list[int]:
        return []

    @property
    def exhausted(self) -> bool:
        return self._next is None

    def done(self, finished: int) -> bool:
        if self.window is not None:
            return finished >= self.window[1] - self.window[0]
        return self.exhausted and finished >= self.emitted

    def measured(self, job_id: int) -> bool:
        if self.window is None:
            return True
        a, b = self.window
        return a <= job_id < b
