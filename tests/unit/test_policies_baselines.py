"""Solver-free baselines (FIFO, isolated) and max total throughput."""

from __future__ import annotations

import numpy as np
import pytest

from hadar.policies import create
from hadar.policies.gavel.fifo import MEMO_ASSIGNED
from tests.unit._policy_states import assert_feasible, state


def test_fifo_perf_fastest_type_with_room_in_arrival_order():
    jobs = [{"rates": {"v100": 3.0, "k80": 1.0}, "arrival": 0.0},
            {"rates": {"v100": 5.0, "k80": 2.0}, "arrival": 1.0},
            {"rates": {"v100": 1.0, "k80": 1.5}, "arrival": 2.0}]
    st = state(jobs, {"v100": 1, "k80": 2})
    x = create("fifo_perf").allocate(st).fractions
    # Job 0 takes the only V100, job 1 then gets a K80 (fastest with room), job 2 the other K80.
    assert x.tolist() == [[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]


def test_fifo_perf_head_of_line_blocking():
    jobs = [{"rates": {"v100": 1.0}}, {"rates": {"v100": 1.0}, "sf": 4}, {"rates": {"v100": 1.0}}]
    st = state(jobs, {"v100": 2})
    x = create("fifo_perf").allocate(st).fractions
    assert x[:, 0].tolist() == [1.0, 0.0, 0.0]  # job 2 would fit but may not jump the 4-GPU job


def test_fifo_perf_skips_types_where_the_job_cannot_run():
    jobs = [{"rates": {"v100": 1.0}}, {"rates": {"v100": 2.0, "k80": 0.0}}, {"rates": {"k80": 1.0}}]
    st = state(jobs, {"v100": 1, "k80": 1})
    x = create("fifo_perf").allocate(st).fractions
    assert x.tolist() == [[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]  # job 1 fits nowhere: the scan stops


def test_fifo_agnostic_keeps_types_and_draws_new_ones_from_the_seed():
    jobs = [{"id": i, "rates": {"v100": 1.0, "p100": 1.0, "k80": 1.0}} for i in range(3)]
    counts = {"v100": 2, "p100": 2, "k80": 2}
    policy = create("fifo")
    first = policy.allocate(state(jobs, counts))
    assert first.fractions.sum(axis=1).tolist() == [1.0, 1.0, 1.0]
    assigned = dict(first.memo[MEMO_ASSIGNED])
    assert set(assigned) == {0, 1, 2}
    # Same state and seed -> same draws; a running job keeps its type when others arrive.
    assert create("fifo").allocate(state(jobs, counts)).as_dict() == first.as_dict()
    more = [*jobs, {"id": 3, "rates": {"v100": 1.0, "p100": 1.0, "k80": 1.0}}]
    second = policy.allocate(state(more, counts, memo=first.memo))
    for jid, t in assigned.items():
        assert second.fraction(jid, t) == 1.0
    assert_feasible(second, state(more, counts))
    draws = {create("fifo", seed=s).allocate(state(jobs[:1], counts)).memo[MEMO_ASSIGNED][0] for s in range(12)}
    assert len(draws) > 1  # the type really is drawn


def test_fifo_agnostic_respects_capacity():
    jobs = [{"id": i, "rates": {"v100": 1.0, "k80": 1.0}} for i in range(5)]
    st = state(jobs, {"v100": 2, "k80": 2})
    alloc = create("fifo").allocate(st)
    assert alloc.fractions.sum() == 4.0
    assert_feasible(alloc, st)
    assert alloc.fractions[4].sum() == 0.0  # the last arrival waits


def test_isolated_equal_slices():
    # 4 V100 + 2 K80, 3 jobs (s = 1, 1, 2): x_ij = (N_j / 3) / s_i, rows capped at 1.
    jobs = [{"rates": {"v100": 1.0, "k80": 1.0}}, {"rates": {"v100": 1.0, "k80": 0.0}},
            {"rates": {"v100": 1.0, "k80": 1.0}, "sf": 2}]
    st = state(jobs, {"v100": 4, "k80": 2})
    raw = np.array([[4 / 3, 2 / 3], [4 / 3, 2 / 3], [2 / 3, 1 / 3]])
    expected = raw / np.maximum(1, raw.sum(axis=1))[:, None]
    expected[1, 1] = 0.0  # no throughput on the K80
    alloc = create("isolated").allocate(st)
    assert alloc.fractions == pytest.approx(expected)
    assert_feasible(alloc, st)


def test_max_sum_throughput_picks_the_fastest_job_per_gpu():
    jobs = [{"rates": {"v100": 5.0, "k80": 1.0}}, {"rates": {"v100": 3.0, "k80": 2.0}}]
    st = state(jobs, {"v100": 1, "k80": 1})
    x = create("max_sum_throughput_perf").allocate(st).fractions
    assert x == pytest.approx(np.array([[1.0, 0.0], [0.0, 1.0]]), abs=1e-4)


def test_max_sum_throughput_splits_ties_evenly():
    jobs = [{"rates": {"v100": 2.0}}] * 3
    st = state(jobs, {"v100": 2})
    x = create("max_sum_throughput_perf").allocate(st).fractions
    assert x[:, 0] == pytest.approx([2 / 3] * 3, abs=1e-4)  # a vertex would give (1, 1, 0)
