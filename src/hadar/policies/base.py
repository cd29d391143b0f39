"""The one interface every policy implements, and the traits it declares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from hadar.errors import InputError
from hadar.model.state import Allocation, SchedulerState

Resolve = Literal["on_change", "every_round"]
PlannerKind = Literal["rounds", "placement", "forking"]
RateModel = Literal["sync", "additive"]


@dataclass(frozen=True, slots=True)
class PolicyTraits:
    """What a policy is, declared once; the engine and the run builder read it and nothing else.

    - ``type_aware``: the policy sees GPU types (False: Gavel's agnostic policies; the round
      mechanism then walks types in a new random order every round, as Gavel does).
    - ``spans_types``: one job's GPUs may be of several types in a round (admission then counts
      every type that can run the job, not only the largest one).
    - ``forks``: jobs may run as several copies at once (HadarE): TTD is measured against the
      forking limit and the ledger keeps the per-copy log.
    - ``resolve``: ``on_change`` (re-solve at the round boundary after an arrival or a completion,
      subject to the run's cadence, e.g. Gavel's 1,920 s) or ``every_round`` (cheap per-round
      decisions that must see every change: Hadar, YARN-CS).
    - ``cut_rounds``: a round may end early, at an arrival that finds GPUs idle or at a predicted
      completion that frees GPUs for a waiting job.
    - ``yield_after_s`` (forking policies with ``cut_rounds``): an arrival also ends a round whose
      GPUs are all leased while some job runs as several copies (copies yield to the new job), but
      not before the round has run this long (a copy's minimum lease). None: no such cut.
    - ``planner``: ``rounds`` (Gavel's priority/deficit mechanism turns time fractions into
      leases), ``placement`` (GPU counts per job and type, placed on GPU ids) or ``forking``
      (node-level copies, HadarE).
    - ``skip_zero_priority``: the rounds planner never runs a job where its allocation is 0.
    - ``reference_solver``: the policy accepts ``solver="ecos"`` (Gavel-compatible runs use it).
    """

    type_aware: bool = True
    spans_types: bool = False
    forks: bool = False
    resolve: Resolve = "on_change"
    cut_rounds: bool = False
    yield_after_s: float | None = None
    planner: PlannerKind = "rounds"
    skip_zero_priority: bool = False
    reference_solver: bool = False

    def __post_init__(self) -> None:
        if self.resolve not in ("on_change", "every_round"):
            raise InputError(f"traits: unknown resolve cadence {self.resolve!r}")
        if self.planner not in ("rounds", "placement", "forking"):
            raise InputError(f"traits: unknown planner {self.planner!r}")
        if self.yield_after_s is not None and not (self.forks and self.cut_rounds and self.yield_after_s >= 0):
            raise InputError("traits: yield_after_s (>= 0) is for a forking policy that cuts rounds")
        if self.forks != (self.planner == "forking"):
            raise InputError("traits: a forking policy needs the forking planner, and only it")
        if self.spans_types and self.planner == "rounds":
            raise InputError("traits: the rounds planner gives a job GPUs of one type; spans_types needs placement")
        if self.skip_zero_priority and self.planner != "rounds":
            raise InputError("traits: skip_zero_priority is an option of the rounds planner")


@runtime_checkable
class Policy(Protocol):
    """Decides what each active job should get; never mutates ``state``.

    Contract (checked by tests/contract for every registered policy):
    fractions >= 0; per type, sum_i scale_factor_i * x_ij <= capacity_j;
    per job, sum_j x_ij <= 1; x_ij = 0 where the job's throughput on j is 0;
    the same state (and seed) gives the same allocation; no state kept
    between calls other than what travels in ``Allocation.memo``.
    """

    @property
    def name(self) -> str: ...

    @property
    def traits(self) -> PolicyTraits: ...

    def allocate(self, state: SchedulerState) -> Allocation: ...
