"""Test-only policies and builders (no solver, fully predictable)."""

from __future__ import annotations

import numpy as np

from hadar.model.job import Job
from hadar.model.state import Allocation, SchedulerState


class FastestTypePolicy:
    """x = 1 on each job's fastest type (ignores capacity: the planner enforces it)."""

    name = "test_fastest"
    type_agnostic = False

    def allocate(self, state: SchedulerState) -> Allocation:
        tp = state.throughput_matrix()
        x = np.zeros_like(tp)
        if len(tp):
            x[np.arange(len(tp)), tp.argmax(axis=1)] = 1.0
        return Allocation.for_state(state, x)


def job(job_id: int, job_type: str = "ResNet-50 (batch size 64)", sf: int = 1, steps: float = 1000.0,
        arrival: float = 0.0) -> Job:
    return Job(job_id=job_id, job_type=job_type, scale_factor=sf, total_steps=steps, arrival_s=arrival)
