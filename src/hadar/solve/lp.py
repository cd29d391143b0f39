"""Shared LP helpers for the allocation policies: sparse base constraints, HiGHS calls.

Every Gavel LP lives on the same variables: ``x[i, j]`` = fraction of time
job (or job class) ``i`` runs on GPU type ``j``. Only *active* entries are
variables (throughput > 0 and at least one GPU of the type); the others are
fixed to 0, which is what the contract "zero share where the throughput is
zero" asks for. The base constraints (Gavel's ``get_base_constraints``) are

* ``x >= 0``;
* per type ``j``: ``sum_i k_i s_i x_ij <= N_j`` (``k_i`` = number of identical
  jobs a row stands for, 1 without aggregation);
* per job ``i``: ``sum_j x_ij <= 1``.

Matrices are built with vectorized COO construction (no Python loop over
``m x n``) and solved by HiGHS's dual simplex without presolve, called
directly (``hadar.solve.highs``: the model and options ``linprog(method=
"highs-ds")`` would pass, without its overhead); failures raise
:class:`hadar.errors.SolverError`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from hadar.arrays import BoolArray, FloatArray, IntArray
from hadar.errors import SolverError
from hadar.solve.highs import DUAL, Csc, LPResult, solve, solve_highs

#: HiGHS method used for every LP (``solve_highs``), as ``linprog`` names it. The dual simplex
#: without presolve was the fastest on these block-angular LPs (bench/bench_policies.py); any
#: vertex is fine because the Gavel policies re-center the solution afterwards.
LP_METHOD = "highs-ds"
LP_OPTIONS = {"presolve": False}


def clip_fractions(x: FloatArray) -> FloatArray:
    """Clip to [0, 1] as Gavel does after every solve (removes solver round-off)."""
    out: FloatArray = np.clip(np.asarray(x, dtype=float), 0.0, 1.0)
    return out


def active_mask(throughputs: FloatArray, capacities: FloatArray) -> BoolArray:
    """Entries that may be non-zero: positive throughput on a type that has GPUs."""
    return (np.asarray(throughputs) > 0) & (np.asarray(capacities) > 0)[None, :]


def unique_rows(features: FloatArray) -> tuple[IntArray, IntArray, IntArray]:
    """Group identical rows: ``(first index, inverse, counts)`` of each class.

    Identical jobs are interchangeable in every Gavel LP, and the centered
    solution treats them identically (the barrier is symmetric), so the
    policies solve one row per class with multiplicity ``counts``.
    """
    if features.shape[0] == 0:
        empty = np.zeros(0, dtype=int)
        return empty, empty, empty
    if not np.isfinite(features).all():
        _, first, inverse, counts = np.unique(
            features, axis=0, return_index=True, return_inverse=True, return_counts=True
        )
        return first, inverse.reshape(-1), counts
    # What np.unique(axis=0) returns (classes in lexicographic order of their rows, each class's
    # first row): a stable lexicographic sort of the rows, cut where a row differs from the one
    # before (rows compare by value, so -0.0 and 0.0 are alike, as np.unique and tuples have them).
    m = features.shape[0]
    order = np.lexsort(features.T[::-1]) if features.shape[1] else np.arange(m)
    ranked = features[order]
    starts = np.empty(m, dtype=bool)
    starts[0] = True
    np.any(ranked[1:] != ranked[:-1], axis=1, out=starts[1:])
    cls = np.cumsum(starts) - 1
    inverse_out = np.empty(m, dtype=np.intp)
    inverse_out[order] = cls
    return order[starts].astype(np.intp), inverse_out, np.bincount(cls, minlength=int(cls[-1]) + 1)


@dataclass(frozen=True, slots=True)
class Variables:
    """Index of the active entries: variable ``v`` is ``x[rows[v], cols[v]]``."""

    shape: tuple[int, int]
    rows: IntArray
    cols: IntArray

    @classmethod
    def of(cls, active: BoolArray) -> Variables:
        rows, cols = np.nonzero(active)
        m, n = active.shape
        return cls((m, n), rows, cols)

    @property
    def count(self) -> int:
        return int(self.rows.size)

    def to_matrix(self, values: FloatArray) -> FloatArray:
        x = np.zeros(self.shape)
        x[self.rows, self.cols] = values[: self.count]
        return x

    def gather(self, matrix: FloatArray) -> FloatArray:
        out: FloatArray = np.asarray(matrix)[self.rows, self.cols]
        return out


def base_constraints(
    var: Variables, weights: FloatArray, capacities: FloatArray, extra_cols: int = 0
) -> tuple[sp.csr_matrix, FloatArray]:
    """``A x <= b`` for the capacity rows (first ``n``) then the per-job rows (next ``m``).

    ``weights[i]`` is the GPUs one unit of ``x[i, j]`` holds (``k_i * s_i``);
    ``extra_cols`` zero columns are appended for auxiliary variables.
    """
    m, n = var.shape
    nv = var.count
    data = np.concatenate([np.asarray(weights, dtype=float)[var.rows], np.ones(nv)])
    row_idx = np.concatenate([var.cols, n + var.rows])
    col_idx = np.concatenate([np.arange(nv), np.arange(nv)])
    a = sp.csr_matrix((data, (row_idx, col_idx)), shape=(n + m, nv + extra_cols))
    b = np.concatenate([np.asarray(capacities, dtype=float), np.ones(m)])
    return a, b


def demand_rows(
    var: Variables, coef: FloatArray, rows: IntArray, extra_cols: int, tau_coef: float | None = None
) -> sp.csr_matrix:
    """``-sum_j coef_ij x_ij (+ tau_coef * tau)`` for each job in ``rows``; tau is the last column."""
    m, _ = var.shape
    pos = np.full(m, -1)
    pos[rows] = np.arange(rows.size)
    keep = pos[var.rows] >= 0
    vals = -np.asarray(coef, dtype=float)[var.rows[keep], var.cols[keep]]
    r_idx, c_idx = pos[var.rows[keep]], np.nonzero(keep)[0]
    if tau_coef is not None:
        vals = np.concatenate([vals, np.full(rows.size, tau_coef)])
        r_idx = np.concatenate([r_idx, np.arange(rows.size)])
        c_idx = np.concatenate([c_idx, np.full(rows.size, var.count + extra_cols - 1)])
    return sp.csr_matrix((vals, (r_idx, c_idx)), shape=(rows.size, var.count + extra_cols))


def solve_lp(
    c: FloatArray,
    a_ub: sp.spmatrix | Csc,
    b_ub: FloatArray,
    bounds: FloatArray,
    what: str,
) -> LPResult:
    """Minimize ``c @ z`` s.t. ``a_ub @ z <= b_ub`` and ``bounds``; raise SolverError unless optimal."""
    try:
        res = solve_highs(c, a_ub, b_ub, bounds)
    except ValueError as e:  # malformed input (NaN, inf coefficients)
        raise SolverError(f"{what}: HiGHS rejected the problem ({e})") from None
    if res.status != 0:
        raise SolverError(f"{what}: HiGHS did not find an optimal solution (status {res.status}: {res.message})")
    return res


def maxmin_lp(
    var: Variables,
    coef: FloatArray,
    weights: FloatArray,
    capacities: FloatArray,
    free: BoolArray,
    floors: FloatArray | None = None,
    what: str = "max-min LP",
) -> tuple[float, FloatArray]:
    """Maximize ``tau`` s.t. ``coef_i . x_i >= tau`` for ``free`` rows, ``>= floors_i`` for the others.

    Rows that are neither free nor have a finite floor are unconstrained.
    Returns ``(tau, x)``; ``coef`` should be scaled so that ``tau`` is O(1)
    (see :func:`scale_to_unit`). The LP :func:`solve_lp` would be given (the base rows, then the
    free rows, then the fixed ones; ``0 <= x``, tau free, or fixed at 0 without a free row), handed
    to HiGHS as the arrays it is built from.
    """
    m, nv = var.shape[0], var.count
    free_rows = np.flatnonzero(free)
    fixed = np.flatnonzero(~free & np.isfinite(floors)) if floors is not None else _NO_ROWS
    caps = np.asarray(capacities, dtype=float)
    n, nf = caps.size, free_rows.size
    rhs = np.zeros(n + m + nf + fixed.size)
    rhs[:n] = caps
    rhs[n:n + m] = 1.0
    if fixed.size and floors is not None:
        rhs[n + m + nf:] = -floors[fixed]
    lower, upper, c = np.zeros(nv + 1), np.full(nv + 1, np.inf), np.zeros(nv + 1)
    if nf:
        lower[-1] = -np.inf
    else:
        upper[-1] = 0.0
    c[-1] = -1.0
    a = maxmin_matrix(var, coef, weights, free_rows, fixed)
    if not np.isfinite(a.data).all() or np.isnan(rhs).any():  # what solve_highs rejects
        raise SolverError(f"{what}: HiGHS rejected the problem (NaN or infinite values in the costs or constraints)")
    res = solve(c, a, rhs, col_lower=lower, col_upper=upper, options=DUAL)
    if res.status != 0:
        raise SolverError(f"{what}: HiGHS did not find an optimal solution (status {res.status}: {res.message})")
    return float(res.x[-1]), var.to_matrix(res.x)


_NO_ROWS = np.zeros(0, dtype=np.intp)


def maxmin_matrix(var: Variables, coef: FloatArray, weights: FloatArray, free_rows: IntArray,
                  fixed: IntArray) -> Csc:
    """The max-min LP's constraint matrix, built column by column: the base rows (capacities, then
    jobs), ``tau - coef_i . x_i`` for ``free_rows``, ``-coef_i . x_i`` for ``fixed``; tau is the last
    column. The same matrix as ``vstack`` of ``base_constraints`` and ``demand_rows`` in compressed-
    column form (sorted indices, every entry kept, what ``Csc.from_sparse`` makes of it), without SciPy's
    conversions."""
    m, n = var.shape
    nv, nf = var.count, free_rows.size
    pos = np.full(m, -1)
    pos[free_rows] = np.arange(nf)
    pos[fixed] = nf + np.arange(fixed.size)
    job_pos = pos[var.rows]
    dem = job_pos >= 0  # the variable's job has a demand row
    every = bool(dem.all())  # each variable's column: its type's row, its job's row, (its demand row)
    rows = np.empty((nv, 3), dtype=np.int32)
    vals = np.empty((nv, 3))
    rows[:, 0], rows[:, 1], rows[:, 2] = var.cols, n + var.rows, n + m + job_pos
    vals[:, 0], vals[:, 1] = np.asarray(weights, dtype=float)[var.rows], 1.0
    vals[:, 2] = -np.asarray(coef, dtype=float)[var.rows, var.cols]
    indptr = np.empty(nv + 2, dtype=np.int32)
    indptr[0] = 0
    if every:
        indptr[1:nv + 1] = np.arange(3, 3 * nv + 1, 3)
        indices, data = rows.reshape(-1), vals.reshape(-1)
    else:
        keep = np.ones((nv, 3), dtype=bool)
        keep[:, 2] = dem
        np.cumsum(2 + dem, out=indptr[1:nv + 1])
        indices, data = rows[keep], vals[keep]
    indptr[-1] = indptr[nv] + nf
    tau_rows = np.arange(n + m, n + m + nf, dtype=np.int32)
    return Csc(indptr, np.concatenate([indices, tau_rows]), np.concatenate([data, np.ones(nf)]),
               (n + m + nf + fixed.size, nv + 1))


def scale_to_unit(coef: FloatArray) -> tuple[FloatArray, float]:
    """Rescale ``coef`` by one positive factor so its typical row maximum is 1 (better HiGHS numerics)."""
    row_max = coef.max(axis=1) if coef.size else np.zeros(0)
    positive = sorted(row_max[row_max > 0].tolist())
    if not positive:
        return coef * 1.0, 1.0
    half = len(positive) // 2
    # np.median's value (the middle entry, or the mean of the two middle ones), without its overhead
    median = positive[half] if len(positive) % 2 else (positive[half - 1] + positive[half]) / 2.0
    factor = 1.0 / median
    return coef * factor, factor
