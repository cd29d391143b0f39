"""Team weights for policies that share by priority weights (Hadar, HadarE, Gavel's flat policies).

Gavel's hierarchical policies take the teams' weights themselves (``entity_weights``). Any other policy
is wrapped in ``TeamWeighted`` when a run has teams: before each decision, every job of a listed team
``e`` gets the priority weight ``w_i W_e / S_e`` (``W_e`` the team's weight, ``S_e`` the sum of the
priority weights of the team's active jobs), jobs of no listed team keep theirs, and all are scaled so
that they average 1; so teams weigh in their weights' ratio however many jobs each runs, and within a
team the jobs keep their own ratio. With fewer than two listed teams active the state goes to the
policy unchanged. The policy decides the rest, as configured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from hadar.model.state import Allocation, SchedulerState
from hadar.policies.base import Policy, PolicyTraits


def team_weighted(state: SchedulerState, weights: Mapping[str, float]) -> SchedulerState:
    """``state`` with its jobs' priority weights set by their teams' weights (module docstring)."""
    sums: dict[str, float] = {}
    for job in state.jobs:
        if job.entity in weights:
            sums[job.entity] = sums.get(job.entity, 0.0) + job.priority_weight
    if len(sums) < 2:
        return state
    raw = [job.priority_weight * weights[job.entity] / sums[job.entity] if job.entity in sums
           else job.priority_weight for job in state.jobs]
    scale = len(raw) / sum(raw)
    jobs = tuple(dataclasses.replace(job, priority_weight=w * scale) for job, w in zip(state.jobs, raw, strict=True))
    return dataclasses.replace(state, jobs=jobs)


class TeamWeighted:
    """``inner`` deciding on states whose priority weights carry the teams' ``weights``."""

    def __init__(self, inner: Policy, weights: Mapping[str, float]) -> None:
        self.inner, self.weights = inner, dict(weights)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def traits(self) -> PolicyTraits:
        return self.inner.traits

    def allocate(self, state: SchedulerState) -> Allocation:
        return self.inner.allocate(team_weighted(state, self.weights))
