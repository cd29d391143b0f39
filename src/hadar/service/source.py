"""The service's job source: jobs arrive while the engine runs (``hadar.sources.JobSource``).

The API stores a submission first, then hands its jobs here; the engine
takes them at its next boundary (a job's arrival is its submission time
plus the file's ``arrival_s``). Cancellations of jobs the engine already
holds wait here for the next boundary; a job not yet handed out is simply
dropped. ``wait`` wakes the idle engine as soon as news comes; the source
is done only when the service stops.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from hadar.clock import Clock
from hadar.model.job import Job

#: Arrivals further ahead than this are not announced to the engine (it would sleep until them and miss
#: submissions meanwhile); ``wait`` wakes it for them instead.
HORIZON_S = 1.0


class LiveSource:
    """A thread-safe queue of submitted jobs and cancellations; ``on_boundary`` runs at every engine
    boundary (the service flushes its event log there). The engine hands the jobs ``pop_arrived``
    gives it to its executor (``admit``) before the ledger sees them."""

    def __init__(self, clock: Clock, on_boundary: Callable[[], None] | None = None) -> None:
        self.clock = clock
        self._cond = threading.Condition()
        self._pending: list[Job] = []
        self._cancelled: list[int] = []
        self._stop = False
        self._news = False
        self.on_boundary = on_boundary or (lambda: None)

    # ---- the API's side ---------------------------------------------------------------
    def add(self, jobs: list[Job]) -> None:
        with self._cond:
            self._pending.extend(jobs)
            self._pending.sort(key=lambda j: (j.arrival_s, j.job_id))
            self._news = True
            self._cond.notify_all()

    def cancel(self, job_id: int) -> bool:
        """True if the job was still waiting here (dropped now); else the engine ends it at its next boundary."""
        with self._cond:
            for i, job in enumerate(self._pending):
                if job.job_id == job_id:
                    del self._pending[i]
                    return True
            if job_id not in self._cancelled:
                self._cancelled.append(job_id)
            self._news = True
            self._cond.notify_all()
            return False

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    @property
    def stopping(self) -> bool:
        return self._stop

    # ---- the engine's side (JobSource) ------------------------------------------------------
    def next_arrival(self) -> float | None:
        with self._cond:
            if not self._pending or self._pending[0].arrival_s > self.clock.now() + HORIZON_S:
                return None
            return self._pending[0].arrival_s

    def pop_arrived(self, t: float) -> list[Job]:
        with self._cond:
            out = [j for j in self._pending if j.arrival_s <= t]
            if out:
                self._pending = [j for j in self._pending if j.arrival_s > t]
        return out

    def wait(self, timeout_s: float) -> bool:
        with self._cond:
            if not self._news and not self._stop:
                if self._pending:  # wake up for the next arrival
                    timeout_s = max(0.0, min(timeout_s, self._pending[0].arrival_s - self.clock.now()))
                self._cond.wait(timeout_s)
            self._news = False
        return True  # live: more jobs may always come

    def pop_cancelled(self) -> list[int]:
        with self._cond:
            out, self._cancelled = self._cancelled, []
            return out

    def done(self, finished: int) -> bool:
        self.on_boundary()
        return self._stop

    def measured(self, job_id: int) -> bool:
        return True
