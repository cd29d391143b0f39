"""Workloads the engine consumes: a fixed job list, or a generated stream with a window."""

from __future__ import annotations

from collections.abc import Iterator

from hadar.model.job import Job


class Workload:
    """Jobs in arrival order; ``measured`` ids are the ones metrics cover.

    With ``window=(a, b)`` jobs keep coming from ``source`` until every job
    with id in [a, b) has finished (Gavel's steady-state method); otherwise
    the run ends when every job of the (finite) source has finished.
    """

    def __init__(self, source: Iterator[Job] | list[Job], *, window: tuple[int, int] | None = None,
                 limit: int | None = None) -> None:
        self._it = iter(source)
        self._finite = isinstance(source, list)
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

    @property
    def exhausted(self) -> bool:
        return self._next is None

    def measured(self, job_id: int) -> bool:
        if self.window is None:
            return True
        a, b = self.window
        return a <= job_id < b

    def target_count(self) -> int | None:
        """How many measured jobs must finish (None while unknown)."""
        if self.window is not None:
            return self.window[1] - self.window[0]
        return self.limit
