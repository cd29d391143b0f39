"""Test-only policies and builders (no solver, fully predictable)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from hadar.model.job import Job
from hadar.model.state import Allocation, SchedulerState
from hadar.policies.base import PolicyTraits


class FastestTypePolicy:
    """x = 1 on each job's fastest type (ignores capacity: the planner enforces it)."""

    name = "test_fastest"
    TRAITS = PolicyTraits()
    traits = TRAITS

    def allocate(self, state: SchedulerState) -> Allocation:
        tp = state.throughput_matrix()
        x = np.zeros_like(tp)
        if len(tp):
            x[np.arange(len(tp)), tp.argmax(axis=1)] = 1.0
        return Allocation.for_state(state, x)


def job(job_id: int, job_type: str = "ResNet-50 (batch size 64)", sf: int = 1, steps: float = 1000.0,
        arrival: float = 0.0) -> Job:
    return Job(job_id=job_id, job_type=job_type, scale_factor=sf, total_steps=steps, arrival_s=arrival)


def leased(policy, state: SchedulerState, alloc: Allocation | None = None) -> dict[int, tuple[int, ...]]:
    """GPU ids each job gets this round: ``policy``'s allocation through the planner its traits name
    (all of a job's copies together)."""
    from hadar.build import make_planner

    alloc = policy.allocate(state) if alloc is None else alloc
    plan = make_planner(policy.traits).plan(state, alloc, None)
    out: dict[int, tuple[int, ...]] = {}
    for lease in plan.leases:
        out[lease.job_id] = tuple(sorted(out.get(lease.job_id, ()) + lease.gpus))
    return out


class GreedyCountsPolicy:
    """Jobs in id order, each on its fastest type with room (whole gangs, placement planner); rounds
    may be cut (a test stand-in for Hadar's early round ends)."""

    name = "test_greedy_counts"
    TRAITS = PolicyTraits(resolve="every_round", cut_rounds=True, planner="placement")
    traits = TRAITS

    def allocate(self, state: SchedulerState) -> Allocation:
        free = {t: state.cluster.count(t) for t in state.gpu_types}
        x = np.zeros((len(state.jobs), len(state.gpu_types)))
        counts: dict[int, dict[str, int]] = {}
        for i in sorted(range(len(state.jobs)), key=lambda i: state.jobs[i].job_id):
            job = state.jobs[i]
            for r in np.argsort(-np.asarray(job.throughputs), kind="stable"):
                t = state.gpu_types[r]
                if job.throughputs[r] > 0 and free[t] >= job.scale_factor:
                    free[t] -= job.scale_factor
                    counts[job.job_id] = {t: job.scale_factor}
                    x[i, r] = 1.0
                    break
        return Allocation.for_state(state, x, counts=counts)


def two_type_cluster():
    """The executor contract's cluster: two nodes of two GPU types, two GPUs each (GPUs 0-1: v100, 2-3: k80).

    Its node names are also Ray resources of the test session's Ray instance (``tests/conftest.py``)."""
    from hadar.model.cluster import Cluster, Node

    return Cluster((Node("v100-0", "v100", 2), Node("k80-0", "k80", 2)))


def gang_cluster():
    """Two nodes of one V100 each: a 2-GPU job spans both (its node names are Ray resources of the test
    session's Ray instance, as ``two_type_cluster``'s)."""
    from hadar.model.cluster import Cluster, Node

    return Cluster((Node("gang-a", "v100", 1), Node("gang-b", "v100", 1)))


def load_bench(name: str) -> Any:
    """``bench/NAME.py`` as a module (the benches are scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "bench" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_scale() -> float:
    """How many times over the machine's cores are busy now (the 1-minute load average per core, at least 1):
    a tolerance on how late a real process answers is stated for a quiet machine and scaled by it (CI runs Ray
    and Slurm tests side by side, often beside other work: seen, 2-GPU leases ending 7 s past their deadline at
    load 15 on 2 cores, where 0.75 s is usual)."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
