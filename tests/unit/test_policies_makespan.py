"""Makespan minimization: Gavel's bisection replay and hand-solved allocations."""

from __future__ import annotations

import numpy as np
import pytest

from hadar.errors import SolverError
from hadar.policies import create
from hadar.policies.gavel.makespan import gavel_bisection
from tests.unit._policy_states import assert_feasible, state


def _reference_bisection(feasible, low=100.0, high=1e6):
    """Gavel's loop, verbatim in structure, against an arbitrary feasibility oracle."""
    last_high, found = high, None
    while found is None:
        while 1.05 * low < high:
            mid = (low + high) / 2
            if feasible(mid):
                found, high = mid, mid
            else:
                low = mid
        high, low, last_high = last_high * 10, last_high, last_high * 10
    return found


@pytest.mark.parametrize(("t_star", "expected"), [
    (137.886, 138.1432),  # values Gavel's ECOS run returned on small_test states
    (19058.246, 19141.0645),
    (2244.234, 2297.0459),
])
def test_bisection_lands_on_gavels_T(t_star, expected):
    assert gavel_bisection(t_star) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("t_star", [1.0, 99.0, 100.0, 5e3, 999_999.0, 1e6, 3.3e6, 4e8])
def test_bisection_matches_reference_loop(t_star):
    got = gavel_bisection(t_star)
    assert got == _reference_bisection(lambda t: t >= t_star)
    assert got >= t_star


def test_bisection_rejects_unreachable_optimum():
    with pytest.raises(SolverError):
        gavel_bisection(float("inf"))


def test_one_type_two_jobs():
    # Two V100s, rates 1 step/s: B needs 300 s alone, A 100 s. T* = 300, Gavel's T = 305.17...
    st = state([{"rates": {"v100": 1.0}, "remaining": 100.0}, {"rates": {"v100": 1.0}, "remaining": 300.0}],
               {"v100": 2})
    alloc = create("min_total_duration_perf").allocate(st)
    t_g = gavel_bisection(300.0)
    x = alloc.fractions[:, 0]
    assert x[1] >= 300.0 / t_g - 1e-9  # B finishes by T
    assert x[0] >= 100.0 / t_g - 1e-9
    assert x[0] < 0.99  # A has slack; the centered point does not max it out
    assert_feasible(alloc, st)


def _optimal_makespan(t, s, caps, r):
    """Independent dense LP: max lam s.t. T_i . x_i >= lam R_i, base constraints; returns 1 / lam."""
    from scipy.optimize import linprog

    m, n = t.shape
    rows = []
    for i in range(m):  # -T_i . x_i + lam R_i <= 0
        row = np.zeros(m * n + 1)
        row[i * n:(i + 1) * n] = -t[i]
        row[-1] = r[i]
        rows.append(row)
    for j in range(n):
        row = np.zeros(m * n + 1)
        row[j:m * n:n] = s
        rows.append(row)
    for i in range(m):
        row = np.zeros(m * n + 1)
        row[i * n:(i + 1) * n] = 1
        rows.append(row)
    b = np.concatenate([np.zeros(m), caps, np.ones(m)])
    c = np.zeros(m * n + 1)
    c[-1] = -1
    res = linprog(c, A_ub=np.array(rows), b_ub=b, bounds=(0, None), method="highs-ipm")
    return 1 / res.x[-1]


def test_heterogeneous_every_job_finishes_by_gavels_T():
    jobs = [{"rates": {"v100": 4.0, "p100": 2.0, "k80": 1.0}, "remaining": 4000.0},
            {"rates": {"v100": 1.0, "p100": 1.0, "k80": 0.9}, "remaining": 900.0},
            {"rates": {"v100": 6.0, "p100": 3.0, "k80": 0.0}, "remaining": 3000.0, "sf": 2},
            {"rates": {"v100": 2.0, "p100": 2.0, "k80": 2.0}, "remaining": 500.0}]
    st = state(jobs, {"v100": 2, "p100": 1, "k80": 1})
    alloc = create("min_total_duration_perf").allocate(st)
    assert_feasible(alloc, st)
    t_star = _optimal_makespan(st.throughput_matrix(), st.scale_factors(), st.capacities(), st.remaining_steps())
    t_g = gavel_bisection(t_star)
    assert t_star <= t_g <= 1.05 * t_star
    finish = st.remaining_steps() / (st.throughput_matrix() * alloc.fractions).sum(axis=1)
    assert finish.max() <= t_g * (1 + 1e-6)
    assert finish.max() > t_star * (1 - 1e-6)


def test_agnostic_uses_v100_rates():
    # The agnostic view sees equal rates on both types, so the two identical jobs split both types evenly.
    jobs = [{"rates": {"v100": 4.0, "k80": 1.0}, "remaining": 1000.0}] * 2
    st = state(jobs, {"v100": 1, "k80": 1})
    x = create("min_total_duration").allocate(st).fractions
    assert x[0] == pytest.approx(x[1], abs=1e-9)
    assert x[0, 0] == pytest.approx(x[0, 1], abs=1e-3)
    perf = create("min_total_duration_perf").allocate(st).fractions
    assert perf[0, 0] > perf[0, 1]  # the aware variant leans on the V100


def test_finished_jobs_need_nothing():
    st = state([{"rates": {"v100": 1.0}, "remaining": 0.0, "total": 10.0}], {"v100": 1})
    x = create("min_total_duration_perf").allocate(st).fractions
    assert np.isfinite(x).all() and 0 <= x[0, 0] <= 1
