"""The executor's records of a round: overhead per round, and each dispatched lease until it answers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hadar.errors import InputError
from hadar.job.lease import Mode
from hadar.job.runner import strip_ansi
from hadar.model.plan import Lease, RoundPlan
from hadar.model.throughput import ThroughputTable
from hadar.runtime import aggregate, forks
from hadar.runtime.emulation import SpeedRatios


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


@dataclass(frozen=True, slots=True)
class ExecutorOptions:
    """A ``RayExecutor``'s settings (checked when made): where checkpoints and logs go, the speed ratios
    and the emulation's ``dilation``, a ``given`` throughput table, the node watcher (``nodes``), the
    listeners, the grace after a lease's deadline, the seed, the fork optimizer policy, the length of a
    profiling lease and the ``run_id`` its checkpoints carry."""

    checkpoint_dir: Path
    ratios: SpeedRatios
    dilation: float | None = None
    given: ThroughputTable | None = None
    log_dir: Path | None = None
    nodes: Any = None
    on_event: Callable[[dict[str, Any]], None] | None = None
    on_dispatch: Callable[[int, RoundPlan], None] | None = None
    grace_s: float = 30.0
    seed: int = 0
    fork_optimizer: str = "largest"
    profile_s: float = 3.0
    run_id: str | None = None

    def __post_init__(self) -> None:
        if self.fork_optimizer not in aggregate.OPTIMIZER_POLICIES:
            raise InputError(f"fork optimizer policy must be one of {', '.join(aggregate.OPTIMIZER_POLICIES)}, "
                             f"got {self.fork_optimizer!r}")
