"""Gavel's equal-share baseline ``isolated``; no solver.

Every job gets a ``1/m`` slice of every type, ``x_ij = (N_j / m) / s_i``,
each row divided by ``max(1, its row sum)`` (Gavel's ``IsolatedPolicy``;
capacities always hold). Entries with zero throughput are set to 0 (the
contract).

Gavel's ``gandiva`` is not shipped: it space-shares GPUs between job pairs,
which needs pair throughputs the tables do not carry; without packing it
would give this same matrix under another name.
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

