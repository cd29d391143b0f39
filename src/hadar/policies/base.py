"""The one interface every policy implements."""

from __future__ import annotations

from typing import ClassVar, Protocol, runtime_checkable

from hadar.model.state import Allocation, SchedulerState


@runtime_checkable
class Policy(Protocol):
    """Decides what each active job should get; never mutates ``state``.

    Contract (checked by tests/contract for every registered policy):
    fractions >= 0; per type, sum_i scale_factor_i * x_ij <= capacity_j;
    per job, sum_j x_ij <= 1; x_ij = 0 where the job's throughput on j is 0;
    the same state (and seed) gives the same allocation.
    """

    name: ClassVar[str]
    #: True for policies blind to GPU types: Gavel's round mechanism then
    #: walks types in a random order every round, as Gavel does for them.
    type_agnostic: ClassVar[bool]

    def allocate(self, state: SchedulerState) -> Allocation: ...
