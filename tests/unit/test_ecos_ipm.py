"""Our ECOS-style interior-point solver: known answers, ECOS's own iteration log, ECOS's allocations."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from hadar.errors import InputError
from hadar.policies import create
from hadar.policies.gavel import cvx_forms
from hadar.policies.gavel.ecos_ipm import solve_conic

from .test_policies_ecos_reference import CASES, _state


def _solve(c, g, h, orthant, q=(), a=None, b=None):
    return solve_conic(np.array(c, float), sp.csc_matrix(np.array(g, float)), np.array(h, float),
                       {"l": orthant, "q": list(q)}, None if a is None else sp.csc_matrix(np.array(a, float)),
                       None if b is None else np.array(b, float))


def test_lp_unique_optimum():
    # max 2 x1 + x2  s.t.  x1 + x2 <= 1, x1 <= 0.6, x >= 0
    r = _solve([-2, -1], [[1, 1], [1, 0], [-1, 0], [0, -1]], [1, 0.6, 0, 0], 4)
    assert r.status == "optimal"
    assert r.x == pytest.approx([0.6, 0.4], abs=1e-7)


def test_lp_with_equality():
    # min x1 + x2  s.t.  x1 - x2 = 0.5, x >= 0
    r = _solve([1, 1], [[-1, 0], [0, -1]], [0, 0], 2, a=[[1, -1]], b=[0.5])
    assert r.status == "optimal"
    assert r.x == pytest.approx([0.5, 0.0], abs=1e-7)


def test_infeasible_lp_is_reported():
    # x <= -1 and x >= 0
    r = _solve([1], [[1], [-1]], [-1, 0], 2)
    assert r.status.startswith("infeasible")


def test_socp_distance_to_a_halfplane():
    # min t  s.t.  ||(x1 - 1, x2 - 2)|| <= t,  x1 >= 3   ->  x = (3, 2), t = 2
    g = [[-1, 0, 0], [0, 0, -1], [-1, 0, 0], [0, -1, 0]]
    r = _solve([0, 0, 1], g, [-3, 0, -1, -2], 1, q=[3])
    assert r.status == "optimal"
    assert r.x == pytest.approx([3.0, 2.0, 2.0], abs=1e-6)


# ECOS 2.0.10's verbose log (pcost, dcost per iteration) for max sum(T * x) on a 3x3 instance.
ECOS_LOG_PCOST = [-3.919, -4.849, -5.754, -5.989, -6.000, -6.000, -6.000]
ECOS_LOG_DCOST = [-17.63, -7.497, -6.488, -6.017, -6.000, -6.000, -6.000]


def test_iterates_follow_ecos_log():
    t = np.array([[3.0, 2.0, 1.0], [1.0, 1.5, 0.5], [2.0, 2.0, 2.0]])
    form = cvx_forms.max_sum_throughput(t, np.array([1.0, 2.0, 1.0]), np.array([1.0, 1.0, 2.0]))
    res = solve_conic(form.c, form.g, form.h, form.dims, keep_log=True)
    assert res.status == "optimal" and res.iterations == 6
    assert [e["pcost"] for e in res.log] == pytest.approx(ECOS_LOG_PCOST, rel=1e-3)
    assert [e["dcost"] for e in res.log] == pytest.approx(ECOS_LOG_DCOST, rel=1e-3)
    # ECOS returns x = [[1, 0, 0], [0, .5, .5], [0, 0, 1]] (row = job)
    x, _ = form.solve()
    assert x == pytest.approx(np.array([[1, 0, 0], [0, 0.5, 0.5], [0, 0, 1.0]]), abs=1e-7)


# ECOS's answer on the reference states is matched to round-off amplified by the degenerate faces.
ECOS_TOL = {"max_sum_throughput_perf": 1e-6, "min_total_duration_perf": 1e-6, "min_total_duration": 1e-6,
            "finish_time_fairness_perf": 1e-5, "finish_time_fairness": 1e-4}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("policy", sorted(ECOS_TOL))
def test_ecos_path_reproduces_ecos_allocation(name, policy):
    case = CASES[name]
    x = create(policy, solver="ecos").allocate(_state(case)).fractions
    assert np.abs(x - np.array(case["ecos"]["x"][policy])).max() <= ECOS_TOL[policy]


@pytest.mark.parametrize("policy", sorted(ECOS_TOL))
def test_reference_solver_policies_accept_the_solver_knob(policy):
    assert create(policy).traits.reference_solver
    with pytest.raises(InputError):
        create(policy, solver="gurobi")
