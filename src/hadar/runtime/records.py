"""The executor's records of a round: overhead per round, and each dispatched lease until it answers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hadar.job.lease import Mode
from hadar.job.runner import strip_ansi
from hadar.model.plan import Lease
from hadar.runtime import forks


@dataclass(slots=True)
class RoundStats:
    """Per-round overhead (seconds of wall clock)."""

    round: int
    leases: int
    dispatch_s: float = 0.0  # building specs + submitting (incl. opening rendezvous stores)
    restore_s: float = 0.0  # the slowest lease's restore from disk
    save_s: float = 0.0  # the slowest lease's checkpoint write
    failed: int = 0
    continued: int = 0  # leases that resumed from a worker's memory (no restore)
    merge_s: float = 0.0  # the job tracker's averaging of forked copies (all jobs)
    forked_jobs: int = 0
    profiles: int = 0  # profiling leases run on idle GPUs
    paired: int = 0  # leases that shared their GPUs with another job's


@dataclass(slots=True)
class Pending:
    lease: Lease
    refs: list[Any]
    gens: list[int]
    mode: Mode = "train"
    fork: forks.Fork | None = None
    done_at: dict[int, float] = field(default_factory=dict)  # rank -> clock time
    error: str = ""
    slot: int = 0  # which worker of each GPU runs it (1: the second job of a pair)


def error_text(e: BaseException) -> str:
    """An exception's type and full message, without terminal colour codes."""
    msg = strip_ansi(str(e)).strip()
    return type(e).__name__ + (f": {msg}" if msg else "")
