"""Gavel's equal-share baseline ``isolated``; no solver.

Every job gets a ``1/m`` slice of every type, ``x_ij = (N_j / m) / s_i``,
each row divided by ``max(1, its row sum)`` (Gavel's ``IsolatedPolicy``;
capacities always hold). Entries with zero throughput are set to 0 (the
contract).

Gavel's ``gandiva`` is not shipped yet: it space-shares GPUs between job
pairs (the pair throughputs are in ``ThroughputTable.pairs`` and the round
mechanism runs pairs, see packed.py); without packing it would give this
same matrix under another name.
"""

from __future__ import annotations

from typing import ClassVar

from hadar.arrays import FloatArray
from hadar.model.state import Allocation, SchedulerState
from hadar.policies.base import PolicyTraits
from hadar.policies.gavel.common import GavelPolicy, Inputs, finish, isolated_fractions
from hadar.policies.registry import register


@register("isolated", "equal 1/m slice of every GPU type for each job (Gavel's isolated baseline)", type_aware=False)
class Isolated(GavelPolicy):
    TRAITS: ClassVar[PolicyTraits] = PolicyTraits(type_aware=False)
    NAMES: ClassVar[tuple[str, ...]] = ("isolated",)

    def __init__(self, *, type_aware: bool = False) -> None:
        super().__init__(type_aware=type_aware)

    def solve(self, state: SchedulerState, inp: Inputs, throughputs: FloatArray) -> Allocation:
        return finish(state, isolated_fractions(inp.scale_factors, inp.capacities), inp.active)

