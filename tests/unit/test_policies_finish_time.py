"""Finish-time fairness: rho, the accumulated isolated time in the memo, hand-solved cases."""

from __future__ import annotations

import numpy as np
import pytest

from hadar.policies import create
from hadar.policies.gavel.common import isolated_throughputs
from hadar.policies.gavel.finish_time import MEMO_CUMULATIVE, MEMO_ISOLATED, MEMO_REMAINING
from tests.unit._policy_states import assert_feasible, state


def _rho(st, alloc, cumulative=None, throughputs=None):
    t = st.throughput_matrix() if throughputs is None else throughputs
    iso = isolated_throughputs(t, st.scale_factors(), st.capacities())
    r = st.remaining_steps()
    age = np.array([st.now_s - j.arrival_s for j in st.jobs])
    c = np.zeros(len(r)) if cumulative is None else cumulative
    return (age + r / (t * alloc.fractions).sum(axis=1)) / (c + r / iso)


def test_single_job_takes_its_fastest_type():
    st = state([{"rates": {"v100": 3.0, "k80": 1.0}, "remaining": 300.0}], {"v100": 1, "k80": 1}, now=50.0)
    alloc = create("finish_time_fairness_perf").allocate(st)
    assert alloc.fraction(0, "v100") == pytest.approx(1.0, abs=1e-4)


def test_fresh_jobs_get_the_max_min_allocation():
    # t_i = 0 and C_i = 0: rho_i = T^iso_i / thr_i, so minimizing max rho is LAS with prop -> T^iso
    # (same ratios when all scale factors are 1).
    jobs = [{"rates": {"v100": 4.0, "p100": 2.0, "k80": 1.0}, "remaining": 5000.0},
            {"rates": {"v100": 1.0, "p100": 1.0, "k80": 0.8}, "remaining": 800.0},
            {"rates": {"v100": 2.0, "p100": 1.5, "k80": 1.0}, "remaining": 1000.0}]
    st = state(jobs, {"v100": 1, "p100": 1, "k80": 1})
    ftf = create("finish_time_fairness_perf").allocate(st).fractions
    las = create("max_min_fairness_perf").allocate(st).fractions
    assert ftf == pytest.approx(las, abs=2e-3)


def test_hand_solved_two_jobs_one_gpu():
    # One V100 at 1 step/s, m = 2: x^iso = 1/2 each, T^iso = 1/2. A: age 100, R = 100 -> D = 200;
    # B: age 0, R = 100 -> D = 200. rho_A = (100 + 100/x)/200, rho_B = (100/(1-x))/200, equal at
    # the optimum (the GPU is fully used).
    st = state([{"rates": {"v100": 1.0}, "remaining": 100.0, "arrival": 0.0},
                {"rates": {"v100": 1.0}, "remaining": 100.0, "arrival": 100.0}], {"v100": 1}, now=100.0)
    alloc = create("finish_time_fairness_perf").allocate(st)
    x = alloc.fraction(0, "v100")
    # 1 + 1/x = 1/(1 - x)  ->  x^2 + x - 1 = 0  ->  x = (sqrt(5) - 1) / 2
    assert x == pytest.approx((np.sqrt(5) - 1) / 2, abs=1e-4)
    assert alloc.fraction(1, "v100") == pytest.approx(1 - x, abs=1e-4)
    rho = _rho(st, alloc)
    assert rho[0] == pytest.approx(rho[1], rel=1e-4)


def test_memo_accumulates_isolated_time():
    jobs = [{"id": 7, "rates": {"v100": 2.0, "k80": 1.0}, "remaining": 1000.0},
            {"id": 9, "rates": {"v100": 1.0, "k80": 1.0}, "remaining": 500.0}]
    policy = create("finish_time_fairness_perf")
    first = policy.allocate(state(jobs, {"v100": 1, "k80": 1}))
    iso = first.memo[MEMO_ISOLATED]
    assert iso[7] == pytest.approx((2.0 + 1.0) / 2)  # x^iso = (1/2, 1/2): T^iso = 1.5
    assert first.memo[MEMO_CUMULATIVE] == {7: 0.0, 9: 0.0}
    assert first.memo[MEMO_REMAINING] == {7: 1000.0, 9: 500.0}
    # Later: job 7 did 300 steps, job 9 left, job 11 arrived.
    later = [{"id": 7, "rates": {"v100": 2.0, "k80": 1.0}, "remaining": 700.0, "total": 1000.0},
             {"id": 11, "rates": {"v100": 1.0, "k80": 1.0}, "remaining": 400.0}]
    second = policy.allocate(state(later, {"v100": 1, "k80": 1}, now=600.0, memo=first.memo))
    assert second.memo[MEMO_CUMULATIVE][7] == pytest.approx(300.0 / 1.5)
    assert second.memo[MEMO_CUMULATIVE][11] == 0.0
    assert set(second.memo[MEMO_REMAINING]) == {7, 11}
    assert_feasible(second, state(later, {"v100": 1, "k80": 1}, now=600.0))


def test_optimum_is_min_max_rho():
    # Perturbing the returned allocation along any feasible direction does not lower max rho.
    jobs = [{"rates": {"v100": 4.0, "k80": 1.0}, "remaining": 4000.0, "arrival": 0.0},
            {"rates": {"v100": 1.0, "k80": 1.0}, "remaining": 600.0, "arrival": 300.0},
            {"rates": {"v100": 3.0, "k80": 2.0}, "remaining": 900.0, "arrival": 500.0, "sf": 2}]
    st = state(jobs, {"v100": 2, "k80": 2}, now=1000.0)
    alloc = create("finish_time_fairness_perf").allocate(st)
    assert_feasible(alloc, st)
    best = _rho(st, alloc).max()
    rng = np.random.default_rng(0)
    x0 = alloc.fractions
    s = st.scale_factors()
    for _ in range(200):
        x = np.clip(x0 + rng.normal(0, 0.05, x0.shape), 0, 1)
        x = x / np.maximum(1, x.sum(axis=1))[:, None]
        x = x * np.minimum(1, st.capacities() / (x * s[:, None]).sum(axis=0))[None, :]
        trial = type(alloc).for_state(st, x)
        assert _rho(st, trial).max() >= best * (1 - 1e-5)


def test_agnostic_pretends_every_gpu_is_a_v100():
    jobs = [{"rates": {"v100": 4.0, "k80": 1.0}, "remaining": 1000.0}] * 2
    st = state(jobs, {"v100": 1, "k80": 1})
    x = create("finish_time_fairness").allocate(st).fractions
    assert x[0] == pytest.approx(x[1], abs=1e-9)
    assert x[0, 0] == pytest.approx(x[0, 1], abs=1e-3)
