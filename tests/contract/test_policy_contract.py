"""Contract every registered policy obeys (hadar.policies.base.Policy), whoever registered it."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

from hadar.model import Cluster, JobView, SchedulerState, ThroughputTable
from hadar.policies import Policy, available, create
from hadar.policies.base import PolicyTraits
from hadar.policies.registry import entry

TOL = 1e-6


def _views(table: ThroughputTable, cluster: Cluster, specs, now: float) -> tuple[JobView, ...]:
    views = []
    for i, (jt, sf, done, age, w) in enumerate(specs):
        total = 10_000.0
        views.append(JobView(job_id=100 + i, job_type=jt, scale_factor=sf, priority_weight=w, arrival_s=now - age,
                             total_steps=total, remaining_steps=total * (1 - done),
                             throughputs=table.row(jt, sf, cluster.gpu_types)))
    return tuple(views)


def _bundled_state(n_jobs: int) -> SchedulerState:
    table = ThroughputTable.load()
    cluster = Cluster.from_counts({"v100": 2, "p100": 2, "k80": 2})
    kinds = [("ResNet-50 (batch size 64)", 1), ("Transformer (batch size 128)", 2), ("A3C", 1),
             ("Recommendation (batch size 1024)", 1), ("ResNet-18 (batch size 256)", 4), ("CycleGAN", 1),
             ("LM (batch size 40)", 2), ("ResNet-50 (batch size 128)", 2)]
    specs = [(kinds[i % len(kinds)][0], kinds[i % len(kinds)][1], 0.1 * (i % 7), 300.0 * i, 1.0 + (i % 3 == 0))
             for i in range(n_jobs)]
    now = 5_000.0
    return SchedulerState(now_s=now, round_s=360.0, cluster=cluster, jobs=_views(table, cluster, specs, now),
                          table=table)


def _zero_throughput_state() -> SchedulerState:
    """A hand-made table where job type 'no-k80' cannot run on K80s and 'k80-only' only runs there."""
    table = ThroughputTable({
        ("no-k80", 1): {"v100": 4.0, "p100": 2.0, "k80": 0.0},
        ("no-k80", 2): {"v100": 7.0, "p100": 3.5, "k80": 0.0},
        ("k80-only", 1): {"v100": 0.0, "p100": 0.0, "k80": 1.0},
        ("any", 1): {"v100": 3.0, "p100": 2.0, "k80": 1.0},
    }, "contract")
    cluster = Cluster.from_counts({"v100": 1, "p100": 1, "k80": 2})
    specs = [("no-k80", 1, 0.0, 0.0, 1.0), ("k80-only", 1, 0.2, 100.0, 1.0), ("no-k80", 2, 0.5, 50.0, 2.0),
             ("any", 1, 0.0, 10.0, 1.0), ("no-k80", 1, 0.3, 20.0, 1.0)]
    return SchedulerState(now_s=1_000.0, round_s=360.0, cluster=cluster,
                          jobs=_views(table, cluster, specs, 1_000.0), table=table)


STATES = {
    "crowded": lambda: _bundled_state(14),  # more jobs than GPUs, mixed scale factors and weights
    "sparse": lambda: _bundled_state(3),  # fewer jobs than GPUs
    "zero_throughput": _zero_throughput_state,
}


@pytest.fixture(params=sorted(available()))
def name(request) -> str:
    return request.param


def test_is_a_policy(name):
    policy = create(name)
    assert isinstance(policy, Policy)
    assert policy.name == name
    assert isinstance(policy.traits, PolicyTraits)
    assert policy.traits == dataclasses.replace(entry(name).traits, type_aware=policy.traits.type_aware,
                                                yield_after_s=policy.traits.yield_after_s)


@pytest.mark.parametrize("which", sorted(STATES))
def test_allocation_obeys_the_contract(name, which):
    st = STATES[which]()
    alloc = create(name).allocate(st)
    assert alloc.job_ids == st.job_ids
    assert alloc.gpu_types == st.gpu_types
    x = alloc.fractions
    assert x.shape == (len(st.jobs), len(st.gpu_types))
    assert np.isfinite(x).all()
    assert (x >= 0).all(), "negative share"
    assert (x.sum(axis=1) <= 1 + TOL).all(), "a job gets more than all of its time"
    used = (x * st.scale_factors()[:, None]).sum(axis=0)
    assert (used <= st.capacities() + TOL).all(), f"over capacity: {used} > {st.capacities()}"
    assert (x[st.throughput_matrix() == 0] == 0).all(), "share where the job cannot run"


@pytest.mark.parametrize("which", sorted(STATES))
def test_deterministic_for_a_fixed_seed(name, which):
    st = STATES[which]()
    a, b = create(name).allocate(st), create(name).allocate(st)
    assert np.array_equal(a.fractions, b.fractions)
    assert dict(a.memo) == dict(b.memo)


@pytest.mark.parametrize("which", sorted(STATES))
def test_input_state_not_mutated(name, which):
    st = STATES[which]()
    st = SchedulerState(now_s=st.now_s, round_s=st.round_s, cluster=st.cluster, jobs=st.jobs, table=st.table,
                        memo={"unrelated": {"k": [1, 2]}})
    before = (copy.deepcopy(st.jobs), copy.deepcopy(dict(st.memo)), st.now_s, st.cluster, dict(st.table.rates))
    first = create(name).allocate(st)
    create(name).allocate(SchedulerState(now_s=st.now_s, round_s=st.round_s, cluster=st.cluster, jobs=st.jobs,
                                         table=st.table, memo=first.memo))
    assert (st.jobs, dict(st.memo), st.now_s, st.cluster, dict(st.table.rates)) == before


def test_empty_state_gives_empty_allocation(name):
    st = _bundled_state(0)
    alloc = create(name).allocate(st)
    assert alloc.job_ids == ()
    assert alloc.gpu_types == st.gpu_types
    assert alloc.fractions.shape == (0, len(st.gpu_types))
