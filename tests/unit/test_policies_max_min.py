"""LAS / max-min fairness and its water-filling variant on hand-solved cases."""

from __future__ import annotations

import numpy as np
import pytest

from hadar.policies import create
from tests.unit._policy_states import assert_feasible, normalized, state


def test_agnostic_priority_weights_split_one_gpu():
    # max min(x_A / 1, x_B / 2) s.t. x_A + x_B <= 1  ->  x_A = 1/3, x_B = 2/3 (unique).
    st = state([{"rates": {"v100": 1.0}}, {"rates": {"v100": 5.0}, "w": 2.0}], {"v100": 1})
    x = create("max_min_fairness").allocate(st).fractions
    assert x[:, 0] == pytest.approx([1 / 3, 2 / 3], abs=1e-4)


def test_agnostic_counts_gpu_time_times_scale_factor():
    # Equal GPU shares: a 2-GPU job needs half the time fraction of a 1-GPU job.
    # max min(x_A, 2 x_B) s.t. x_A + 2 x_B <= 2 (two V100s) -> x_A = 1, x_B = 1/2.
    st = state([{"rates": {"v100": 1.0}}, {"rates": {"v100": 1.0}, "sf": 2}], {"v100": 2})
    x = create("max_min_fairness").allocate(st).fractions
    assert x[:, 0] == pytest.approx([1.0, 0.5], abs=1e-4)


def test_perf_identical_jobs_split_both_types_evenly():
    # Two identical jobs, 1 V100 + 1 K80, T = (2, 1): prop = 1.5, c = (4/3, 2/3). The only optimum
    # with min normalized throughput 1 is x = (1/2, 1/2) for both (rows must be full).
    st = state([{"rates": {"v100": 2.0, "k80": 1.0}}] * 2, {"v100": 1, "k80": 1})
    alloc = create("max_min_fairness_perf").allocate(st)
    assert alloc.fractions == pytest.approx(np.full((2, 2), 0.5), abs=1e-4)
    assert normalized(alloc, st) == pytest.approx([1.0, 1.0], abs=1e-4)


def test_perf_optimum_value_and_comparative_advantage():
    # A: T = (3, 1), B: T = (1, 1) on 1 V100 + 1 K80. B's normalized rate is at most 1 (row sum),
    # and A can reach 1 too, so the optimum is 1; A should lean on the V100.
    st = state([{"rates": {"v100": 3.0, "k80": 1.0}}, {"rates": {"v100": 1.0, "k80": 1.0}}], {"v100": 1, "k80": 1})
    alloc = create("max_min_fairness_perf").allocate(st)
    assert_feasible(alloc, st)
    assert normalized(alloc, st).min() == pytest.approx(1.0, abs=1e-4)
    assert alloc.fraction(0, "v100") > alloc.fraction(0, "k80")


def test_leftover_goes_to_non_bottleneck_job_like_an_interior_point():
    # A and B only run on the V100, C only on the K80. A = B = 1/2 is forced (bottleneck, level 1);
    # C can take anything in [1/2, 1]: a vertex picks an end, the centered point lies strictly inside.
    jobs = [{"rates": {"v100": 1.0}}, {"rates": {"v100": 1.0}}, {"rates": {"k80": 1.0}}]
    st = state(jobs, {"v100": 1, "k80": 1})
    x = create("max_min_fairness_perf").allocate(st).fractions
    assert x[:2, 0] == pytest.approx([0.5, 0.5], abs=1e-4)
    assert 0.55 < x[2, 1] < 0.95
    # Water filling raises C to its own maximum instead.
    w = create("max_min_fairness_water_filling_perf").allocate(st).fractions
    assert w[:2, 0] == pytest.approx([0.5, 0.5], abs=1e-4)
    assert w[2, 1] == pytest.approx(1.0, abs=1e-4)


def test_water_filling_three_levels():
    # 1 V100 + 2 K80. A: V100 only (c = 3), C: both (c = (1, 1)), D: K80 only (c = 1.5).
    # Level 1: C <= 1 (row sum, c <= 1) -> 1. Level 2: D <= 1.5 (row) -> 1.5. Level 3: A -> 3,
    # which needs the whole V100, so C moves to a K80: x = A (1, 0), C (0, 1), D (0, 1), unique.
    jobs = [{"rates": {"v100": 1.0}}, {"rates": {"v100": 1.0, "k80": 1.0}}, {"rates": {"k80": 1.0}}]
    st = state(jobs, {"v100": 1, "k80": 2})
    alloc = create("max_min_fairness_water_filling_perf").allocate(st)
    assert_feasible(alloc, st)
    assert alloc.fractions == pytest.approx(np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]), abs=1e-4)
    assert normalized(alloc, st) == pytest.approx([3.0, 1.0, 1.5], abs=1e-3)
    # Plain LAS only guarantees the first level.
    las = normalized(create("max_min_fairness_perf").allocate(st), st)
    assert las.min() == pytest.approx(1.0, abs=1e-4)
    assert las[0] < 3.0 - 1e-3


def test_zero_throughput_entry_gets_nothing():
    st = state([{"rates": {"v100": 2.0, "k80": 0.0}}, {"rates": {"v100": 1.0, "k80": 1.0}}], {"v100": 1, "k80": 1})
    for name in ("max_min_fairness", "max_min_fairness_perf", "max_min_fairness_water_filling_perf"):
        alloc = create(name).allocate(st)
        assert alloc.fraction(0, "k80") == 0.0
        assert_feasible(alloc, st)


def test_job_that_runs_nowhere_gets_zero_and_others_proceed():
    st = state([{"rates": {"k80": 1.0}}, {"rates": {"v100": 1.0}}], {"v100": 1})
    x = create("max_min_fairness_perf").allocate(st).fractions
    assert x[0, 0] == 0.0
    assert x[1, 0] > 0.5
