"""Equal-share baselines (Gavel's ``isolated`` and ``gandiva``); no solver.

* ``isolated``: every job gets a ``1/m`` slice of every type,
  ``x_ij = (N_j / m) / s_i``, each row divided by ``max(1, its row sum)``
  (Gavel's ``IsolatedPolicy``; capacities always hold).
* ``gandiva`` without space sharing (the throughput table carries no pair
  rates): Gavel's ``GandivaPolicy`` splits time equally over job
  "combinations" with the same formula; with no pairs the combinations are
  the jobs themselves, so both of its branches (enough GPUs for every job, or
  not) give the isolated matrix. ``seed`` is accepted for the pairing draw a
  packing variant would make and is otherwise unused. Gavel's published
  gandiva numbers include packing, so they are not reproduced.

Entries with zero throughput are set to 0 (the contract).
"""

from __future__ import annotations

from typing import ClassVar

from hadar.model.state import Allocation, SchedulerState
from hadar.policies.gavel.common import Inputs, empty_allocation, finish, isolated_fractions
from hadar.policies.registry import register


@register("isolated", "equal 1/m slice of every GPU type for each job (Gavel's isolated baseline)")
class Isolated:
    name: ClassVar[str] = "isolated"
    type_agnostic: ClassVar[bool] = True

    def allocate(self, state: SchedulerState) -> Allocation:
        if not state.jobs:
            return empty_allocation(state)
        inp = Inputs.of(state)
        return finish(state, isolated_fractions(inp.scale_factors, inp.capacities), inp.active)


@register("gandiva", "Gandiva without space sharing: equal time shares, rows capped at 1 (Gavel)")
class Gandiva:
    name: ClassVar[str] = "gandiva"
    type_agnostic: ClassVar[bool] = True

    def __init__(self, seed: int = 0) -> None:
        self.seed = int(seed)

    def allocate(self, state: SchedulerState) -> Allocation:
        if not state.jobs:
            return empty_allocation(state)
        inp = Inputs.of(state)
        return finish(state, isolated_fractions(inp.scale_factors, inp.capacities), inp.active)
