"""What the runtime knows of each job it runs: progress, saved state, metrics, failures, and its log file.

``JobProgress`` is the executor's per-job record; the engine's ledger (``mechanism/ledger.py``) is the
one record of a job's steps. ``JobProgress.steps`` is a read-only view of what the executor reported:
the steps of the lease results it returned for the job in its round reports (``count``, the one
writer, called where each result is made), on top of the checkpoint a resumed job started from
(``resume_at``); the ledger applies the same results, so the two agree by construction. A job's
log, ``LOGS/job-<id>.log`` (``hadar run --out DIR``: ``DIR/logs``), gets what each lease
printed, every warning, and the full traceback of every failed lease.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from hadar.model.job import Job, TrainSpec
from hadar.model.plan import LeaseResult


@dataclass(slots=True)
class JobProgress:
    """The runtime's record of one job (``steps`` in the job's steps, as the ledger counts them)."""

    job: Job
    spec: TrainSpec
    checkpoint: Path
    log: Path | None = None
    base_steps: float = 0.0  # the progress this run took the job over at (a resumed job's checkpoint)
    reported_steps: float = 0.0  # steps of the lease results reported for the job (``count``)
    iteration: int = 0  # the next number ctx.steps() yields
    saved_steps: float | None = None  # progress at the last save_state of this run (None: never saved)
    first: dict[str, float] = field(default_factory=dict)  # first reported value of each metric
    last: dict[str, float] = field(default_factory=dict)  # latest reported value of each metric
    restores: int = 0  # leases that read the checkpoint file
    startups: list[float] = field(default_factory=list)  # per lease not continued in memory: s to its first step
    continued: int = 0  # leases that resumed from a worker's memory
    failures: int = 0  # failed leases (one per round at most)
    failed_rounds: set[int] = field(default_factory=set)
    error: str = ""  # the last failure, in full
    warned: set[str] = field(default_factory=set)
    profiled: set[str] = field(default_factory=set)  # GPU types a profiling lease was tried on
    profile_off: bool = False
    ended: bool = False  # failed for good

    @property
    def steps(self) -> float:
        """The job's progress: where this run took it over plus the steps of every result reported for it."""
        return self.base_steps + self.reported_steps

    def count(self, result: LeaseResult) -> None:
        """A lease result of the job, as it goes into the round's report (a failed one counts no steps)."""
        if result.job_id != self.job.job_id:
            raise ValueError(f"a result of job {result.job_id} counted for job {self.job.job_id}")
        if not result.failed:
            self.reported_steps += result.steps

    def resume_at(self, steps: float, iteration: int) -> None:
        """A job resumed from its committed checkpoint (``steps`` of progress, ``iteration`` next): its next
        lease restores that file and counting continues from there."""
        self.base_steps, self.reported_steps = steps, 0.0
        self.iteration, self.saved_steps = iteration, steps

    @property
    def restart_s(self) -> float | None:
        """The measured restart cost: mean seconds from a lease's start to its first step, over the leases
        that started the job or restored it (not those continued in a worker's memory); None: none yet."""
        return sum(self.startups) / len(self.startups) if self.startups else None

    @property
    def metric(self) -> str:
        """The metric that measures the model (the job's ``quality``), without its direction."""
        return self.spec.quality.lstrip("-")

    @property
    def higher_is_better(self) -> bool:
        return not self.spec.quality.startswith("-")

    @property
    def initial(self) -> float | None:
        return self.first.get(self.metric) if self.metric else None

    @property
    def final(self) -> float | None:
        return self.last.get(self.metric) if self.metric else None

    @property
    def improved(self) -> bool | None:
        a, b = self.initial, self.final
        if a is None or b is None:
            return None
        return b > a if self.higher_is_better else b < a

    def write_log(self, title: str, body: str = "") -> None:
        """Append a section to the job's log file (if it has one)."""
        if self.log is None:
            return
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        text = f"=== {stamp} {title}\n" + (body if not body or body.endswith("\n") else body + "\n")
        with self.log.open("a") as f:
            f.write(text)


def log_path(folder: Path | None, job_id: int) -> Path | None:
    return None if folder is None else Path(folder) / f"job-{job_id}.log"
