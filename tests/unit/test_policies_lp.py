"""Shared LP helpers (hadar.solve.lp) and the interior-point centering (gavel.center)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from hadar.errors import SolverError
from hadar.policies.gavel.center import Face, analytic_center, blend_start, center_face
from hadar.solve.lp import (
    Variables,
    active_mask,
    base_constraints,
    clip_fractions,
    demand_rows,
    maxmin_lp,
    scale_to_unit,
    solve_lp,
    unique_rows,
)


def test_active_mask_needs_throughput_and_gpus():
    t = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 1.0]])
    assert active_mask(t, np.array([1.0, 1.0, 0.0])).tolist() == [[True, False, False], [False, True, False]]


def test_base_constraints_rows_and_columns():
    var = Variables.of(np.array([[True, False], [True, True]]))  # x00, x10, x11
    a, b = base_constraints(var, np.array([1.0, 2.0]), np.array([4.0, 3.0]))
    assert a.toarray().tolist() == [
        [1.0, 2.0, 0.0],  # type 0: s_0 x00 + s_1 x10 <= 4
        [0.0, 0.0, 2.0],  # type 1: s_1 x11 <= 3
        [1.0, 0.0, 0.0],  # job 0 row sum
        [0.0, 1.0, 1.0],  # job 1 row sum
    ]
    assert b.tolist() == [4.0, 3.0, 1.0, 1.0]


def test_maxmin_lp_two_jobs_one_gpu():
    # One GPU, job 0 twice as valuable per unit of time: max min(2 x0, x1) s.t. x0 + x1 <= 1 -> 2/3.
    var = Variables.of(np.ones((2, 1), dtype=bool))
    tau, x = maxmin_lp(var, np.array([[2.0], [1.0]]), np.ones(2), np.array([1.0]), np.ones(2, dtype=bool))
    assert tau == pytest.approx(2 / 3)
    assert x[:, 0] == pytest.approx([1 / 3, 2 / 3])


def test_maxmin_lp_respects_floors_of_frozen_rows():
    var = Variables.of(np.ones((2, 1), dtype=bool))
    free = np.array([True, False])
    tau, x = maxmin_lp(var, np.ones((2, 1)), np.ones(2), np.array([1.0]), free, floors=np.array([-np.inf, 0.75]))
    assert tau == pytest.approx(0.25)
    assert x[1, 0] >= 0.75 - 1e-9


def test_solve_lp_raises_solver_error_when_infeasible():
    with pytest.raises(SolverError, match="toy LP"):
        solve_lp(np.ones(1), sp.csr_matrix([[1.0]]), np.array([-1.0]), np.array([[0.0, np.inf]]), "toy LP")


def test_unique_rows_groups_identical_jobs():
    first, inverse, counts = unique_rows(np.array([[1.0, 2.0], [3.0, 4.0], [1.0, 2.0]]))
    assert counts.tolist() == [2, 1]
    assert inverse.tolist() == [0, 1, 0]
    assert first.tolist() == [0, 1]


def test_clip_and_scale():
    assert clip_fractions(np.array([-1e-9, 0.5, 1.0000001])).tolist() == [0.0, 0.5, 1.0]
    coef, factor = scale_to_unit(np.array([[2.0, 1.0], [8.0, 0.0], [4.0, 4.0]]))
    assert factor == pytest.approx(0.25)
    assert coef.max(axis=1).tolist() == [0.5, 2.0, 1.0]


def _face(m: int, n: int, caps, *, g=None, k=None, s=None) -> Face:
    return Face(a=np.ones((m, n)), g=np.full(m, -np.inf) if g is None else np.asarray(g, float),
                k=np.ones(m) if k is None else np.asarray(k, float),
                s=np.ones(m) if s is None else np.asarray(s, float),
                capacities=np.asarray(caps, float), active=np.ones((m, n), dtype=bool))


def test_analytic_center_of_a_simplex():
    # max log x1 + log x2 + log(1 - x1 - x2) + log(100 - x1) + log(100 - x2): symmetric, and
    # 1/x - 1/(1 - 2x) - 1/(100 - x) = 0 -> x = 0.332961 (1/3 without the far capacity rows).
    x = analytic_center(_face(1, 2, [100.0, 100.0]), np.array([[0.1, 0.2]]))
    assert x[0, 0] == pytest.approx(x[0, 1], abs=1e-9)
    assert x[0, 0] == pytest.approx(0.3329613, abs=1e-6)


def test_analytic_center_with_demand_floor():
    # One variable: log x + log(1 - x) + log(x - 0.5) + log(100 - x): center of (0.5, 1) with a pull
    # toward the middle; stationarity 1/x - 1/(1-x) + 1/(x-0.5) - 1/(100-x) = 0.
    x = analytic_center(_face(1, 1, [100.0], g=[0.5]), np.array([[0.9]]))[0, 0]
    assert 1 / x - 1 / (1 - x) + 1 / (x - 0.5) - 1 / (100 - x) == pytest.approx(0.0, abs=1e-5)


def test_class_multiplicity_matches_duplicated_rows():
    # Two identical jobs as one class with k=2 give the same point as two explicit rows.
    caps = [1.0, 0.5]
    merged = center_face(_face(1, 2, caps, k=[2.0]), np.zeros((1, 2)))
    split = center_face(_face(2, 2, caps), np.zeros((2, 2)))
    assert split[0] == pytest.approx(split[1], abs=1e-7)
    assert merged[0] == pytest.approx(split[0], abs=1e-6)


def test_blend_start_is_strictly_feasible():
    face = _face(2, 2, [1.0, 1.0], g=[0.4, 0.4])
    x0 = blend_start(face, np.array([[0.5, 0.0], [0.5, 0.0]]))  # on the boundary of x >= 0 and capacity
    assert (x0 > 0).all() and (x0.sum(axis=0) < 1).all() and (x0.sum(axis=1) > 0.4).all()


def test_blend_start_fails_on_an_empty_face():
    face = _face(1, 1, [1.0], g=[2.0])  # a job can never exceed x = 1
    with pytest.raises(SolverError):
        blend_start(face, np.array([[1.0]]))


def test_direct_highs_call_returns_linprogs_point_bit_for_bit():
    """solve_highs hands HiGHS what linprog(method=LP_METHOD, options=LP_OPTIONS) would: same point, same bits."""
    from scipy.optimize import linprog

    from hadar.solve.lp import LP_METHOD, LP_OPTIONS

    rng = np.random.default_rng(7)
    for m in (3, 12, 40):
        var = Variables.of(rng.random((m, 3)) > 0.2)
        coef = rng.random((m, 3)) * 3.0
        a_base, b_base = base_constraints(var, rng.integers(1, 5, m).astype(float), np.array([8.0, 6.0, 4.0]), 1)
        rows = np.arange(m)
        a = sp.vstack([a_base, demand_rows(var, coef, rows, extra_cols=1, tau_coef=1.0)]).tocsr()
        b = np.concatenate([b_base, np.zeros(m)])
        bounds = np.column_stack([np.zeros(var.count + 1), np.full(var.count + 1, np.inf)])
        bounds[-1] = (-np.inf, np.inf)
        c = np.zeros(var.count + 1)
        c[-1] = -1.0
        ours = solve_lp(c, a, b, bounds, "max-min")
        ref = linprog(c, A_ub=a, b_ub=b, bounds=bounds, method=LP_METHOD, options=LP_OPTIONS)
        assert ours.status == 0
        assert ours.x.tobytes() == ref.x.tobytes() and ours.fun == ref.fun


def test_solve_lp_rejects_nan_costs_with_a_solver_error():
    with pytest.raises(SolverError, match="rejected"):
        solve_lp(np.array([np.nan]), sp.csr_matrix([[1.0]]), np.array([1.0]), np.array([[0.0, np.inf]]), "toy LP")


def test_maxmin_matrix_is_the_stacked_sparse_matrix_entry_for_entry():
    from hadar.solve.highs import Csc
    from hadar.solve.lp import maxmin_matrix

    rng = np.random.default_rng(11)
    for m in (1, 5, 30):
        var = Variables.of(rng.random((m, 3)) > 0.3)
        coef, weights = rng.random((m, 3)), rng.integers(1, 9, m).astype(float)
        free = rng.random(m) > 0.4
        fixed = np.nonzero(~free & (rng.random(m) > 0.5))[0]
        blocks = [base_constraints(var, weights, np.ones(3), extra_cols=1)[0]]
        if free.any():
            blocks.append(demand_rows(var, coef, np.nonzero(free)[0], extra_cols=1, tau_coef=1.0))
        if fixed.size:
            blocks.append(demand_rows(var, coef, fixed, extra_cols=1))
        ref = sp.csc_array(sp.vstack(blocks).tocsr())
        ref.sort_indices()
        ours = maxmin_matrix(var, coef, weights, np.nonzero(free)[0], fixed)
        assert ours.shape == ref.shape
        assert ours.indptr.tolist() == ref.indptr.tolist() and ours.indices.tolist() == ref.indices.tolist()
        assert ours.data.tobytes() == ref.data.tobytes()
        # what HiGHS is given is what it was given through SciPy (Csc.from_sparse of the same matrix)
        via = Csc.from_sparse(ours.sparse())
        assert (via.indptr.tobytes(), via.indices.tobytes(), via.data.tobytes()) == (
            ours.indptr.tobytes(), ours.indices.tobytes(), ours.data.tobytes())
        assert ours.indptr.dtype == ours.indices.dtype == np.int32 and ours.data.dtype == np.float64


def test_without_the_binding_linprog_gives_the_same_point(monkeypatch):
    from hadar.solve import highs

    a = sp.csr_matrix([[1.0, 1.0], [1.0, -1.0]])
    args = (np.array([-1.0, -2.0]), a, np.array([4.0, 1.0]), np.array([[0.0, 3.0], [0.0, np.inf]]))
    direct = highs.solve_highs(*args)
    monkeypatch.setattr(highs, "_h", None)
    fallback = highs.solve_highs(*args)
    assert direct.status == fallback.status == 0
    assert direct.x.tobytes() == fallback.x.tobytes() and direct.fun == fallback.fun == -8.0


def test_unique_rows_is_numpys_unique():
    rng = np.random.default_rng(11)
    for m in (1, 2, 7, 60, 300):
        base = rng.choice([0.0, -0.0, 0.5, 1.0, 2.5, 1e-300], (9, 5))
        feats = base[rng.integers(0, 9, m)]
        _, first, inverse, counts = np.unique(feats, axis=0, return_index=True, return_inverse=True,
                                              return_counts=True)
        got = unique_rows(feats)
        assert [a.tolist() for a in got] == [first.tolist(), inverse.reshape(-1).tolist(), counts.tolist()]


def test_scale_to_unit_divides_by_numpys_median():
    rng = np.random.default_rng(5)
    for m in range(1, 40):
        coef = rng.choice([0.0, 0.3, 1.0, 2.7], (m, 3)) * rng.uniform(0.5, 2.0, (m, 3))
        row_max = coef.max(axis=1)
        positive = row_max[row_max > 0]
        expected = 1.0 / float(np.median(positive)) if positive.size else 1.0
        scaled, factor = scale_to_unit(coef)
        assert factor == expected and scaled.tobytes() == (coef * expected).tobytes()
