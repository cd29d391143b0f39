"""The one builder of the engines that train for real: ``hadar serve``'s, and ``hadar run``'s.

Both start a training back end first (``runtime.backend``: Ray's workers and the ``RayExecutor``;
the service may start Slurm's instead) and then build the engine on it here, the same way: the
policy, a ledger on the back end's table (what its tracker measured and estimates; the service's
tracker holds what the store kept), the planner and the cadence the policy's traits and the
options name (``build.wire``), the teams' quotas, and the run's listeners and recorder (``Hooks``).
What differs between the two is only what they hand in:

- ``hadar serve``: a ``LiveSource`` (jobs submitted over HTTP, committed to SQLite first) and the
  ``StoreRecorder``, which commits each round in one transaction so a restart continues;
- ``hadar run``: a ``Workload`` of the job file's jobs at their arrival times, and a
  ``MemoryRecorder``, which keeps the run's events in memory; the run's files
  (``jobs.csv``, ``events.jsonl``, ...) are written from it and the ledger once the run ended.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from hadar.build import wire
from hadar.engine import Engine, Hooks, RoundRecord
from hadar.mechanism.changes import Changes
from hadar.mechanism.ledger import JobLedger
from hadar.mechanism.tenants import Tenants
from hadar.model.fork_efficiency import IDEAL
from hadar.model.fork_model import ForkSetting
from hadar.policies.base import Policy
from hadar.runtime.tracker import ThroughputTracker


class TrainingBackend(Protocol):
    """What the builder needs of a back end: its executor (with its ``cluster`` and ``clock``) and the
    executor's throughput tracker (``runtime.backend.Backend``, ``slurm.serve.SlurmBackend``)."""

    @property
    def executor(self) -> Any: ...

    @property
    def tracker(self) -> ThroughputTracker: ...


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """How the engine decides: the round length, the seed (planner), the forking planner's estimate of
    a copy's worth (``fork_efficiency``), and the teams (``tenants``: their quotas hold every plan; a job
    on borrowed GPUs keeps them ``min_run_s``)."""

    round_s: float
    seed: int = 0
    fork_efficiency: ForkSetting = IDEAL
    tenants: Tenants | None = None
    min_run_s: float = 0.0


def build_engine(policy: Policy, backend: TrainingBackend, options: EngineOptions,
                 hooks: Hooks) -> tuple[Engine, JobLedger]:
    """The engine and ledger of a real run on ``backend``: its executor, on the executor's clock, the ledger
    starting from the tracker's table (jobs join it as the engine admits them, ``Executor.admit``)."""
    executor = backend.executor
    return wire(policy, executor.cluster, backend.tracker.table(), executor, executor.clock,
                round_s=options.round_s, seed=options.seed, hooks=hooks, fork_efficiency=options.fork_efficiency,
                tenants=options.tenants, min_run_s=options.min_run_s)


Listener = Callable[[dict[str, Any]], None]


class MemoryRecorder:
    """An ``engine.Recorder`` that keeps the run's events in memory, and the run's event listener: every event (in the
    order engine and executor emitted them; each also goes on to ``listener``); the run's files are written
    from them and the ledger. Rounds and changes are not kept (nothing reads them back): memory grows with
    the events, not the rounds."""

    def __init__(self, listener: Listener | None = None) -> None:
        self.listener = listener
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        if self.listener is not None:
            self.listener(event)

    def round(self, record: RoundRecord, ledger: JobLedger) -> None:
        pass

    def changed(self, now_s: float, changes: Changes, ledger: JobLedger) -> None:
        pass
