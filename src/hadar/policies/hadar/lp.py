"""A thin, low-overhead call into HiGHS for Hadar's small per-round LPs.

``scipy.optimize.linprog(method="highs")`` costs about 3 ms per call on top
of the solve (option checks, input validation, sparse re-stacking), which
at steady state is more than the solve itself: Hadar solves two or three
LPs each round. This module hands the same model, with the same options
(presolve on, dual simplex), straight to the HiGHS build that SciPy ships
(``scipy.optimize._highspy._core``), so the answers are the ones
``linprog`` gives. Where that private module is missing (another SciPy),
it falls back to ``linprog``.

A ``Warm`` holder carries a solve's final basis to the next solve of an LP
with the same rows and columns (the same ``key``): the dual simplex then
starts there and needs a handful of iterations rather than hundreds.
Hadar's JCT plan passes it from round to round in ``Allocation.memo``, so
the answer depends on the state and its memo only. Where an LP has
several optimal solutions, a warm start may end at another of them than
a cold one.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from hadar.arrays import FloatArray, IntArray

try:  # SciPy's own HiGHS bindings (the ones linprog calls)
    from scipy.optimize._highspy import _core as _highs
except ImportError:  # pragma: no cover - another SciPy layout
    _highs = None



@dataclass(frozen=True, slots=True)
class Solution:
    """An optimal solution: ``x`` (columns) and ``dual`` (one per row, linprog's marginals' sign)."""

    x: FloatArray
    dual: FloatArray


@dataclass(frozen=True, slots=True)
class Basis:
    """A final simplex basis (HiGHS's status codes per column and row, a byte each) of the LP named
    ``key`` (bytes, so that two memos compare and pickle as plain values)."""

    key: Hashable
    cols: bytes
    rows: bytes


class Warm:
    """Holds the basis a warm start begins from, and receives the next solve's."""

    __slots__ = ("basis",)

    def __init__(self, basis: Basis | None = None) -> None:
        self.basis = basis


@dataclass(frozen=True, slots=True)
class Csc:
    """A constraint matrix column by column (SciPy's CSC arrays, row indices sorted in each column)."""

    indptr: IntArray
    indices: IntArray
    data: FloatArray
    shape: tuple[int, int]

    @classmethod
    def of(cls, rows: IntArray, cols: IntArray, vals: FloatArray, shape: tuple[int, int]) -> Csc:
        """From (row, column, value) triplets, at most one per cell (what scipy.sparse builds from
        them, without its checks and conversions)."""
        order = np.lexsort((rows, cols))
        indptr: IntArray = np.concatenate([[0], np.cumsum(np.bincount(cols, minlength=shape[1]))]).astype(np.int32)
        indices: IntArray = np.asarray(rows[order], dtype=np.int32)
        return cls(indptr, indices, np.asarray(vals[order], dtype=float), shape)

    def sparse(self) -> sparse.csc_matrix:
        return sparse.csc_matrix((self.data, self.indices, self.indptr), shape=self.shape)


def minimize(c: FloatArray, a: Csc | sparse.csr_matrix | sparse.csc_matrix, upper: FloatArray, *,
             lower: FloatArray | None = None, col_upper: FloatArray | None = None, warm: Warm | None = None,
             key: Hashable = None) -> Solution | None:
    """min ``c x`` s.t. ``lower <= a x <= upper`` (``lower`` None: -inf; a row with a finite lower
    bound must be an equality, lower = upper), ``0 <= x <= col_upper`` (None: +inf). Rows in the
    order linprog stacks them (inequalities, then equalities) give linprog's answer. None unless
    HiGHS reports an optimum. With ``warm`` and a ``key``: start from ``warm``'s basis when it is
    of an LP with this key, and leave this solve's final basis there."""
    n_row, n_col = a.shape
    lo = np.full(n_row, -np.inf) if lower is None else np.asarray(lower, dtype=float)
    hi_col = np.full(n_col, np.inf) if col_upper is None else np.asarray(col_upper, dtype=float)
    if _highs is None:  # pragma: no cover - exercised only on other SciPy builds
        return _by_linprog(c, a.sparse() if isinstance(a, Csc) else a, lo, np.asarray(upper, dtype=float), hi_col)
    if isinstance(a, Csc):
        csc = a
    else:
        csc = sparse.csc_matrix(a)
        csc.sort_indices()
    h: Any = _highs._Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("simplex_strategy", 1)  # dual simplex, as linprog asks
    # the model from arrays (column-wise, minimize, no offset): numpy buffers, not element by element
    if h.passModel(n_col, n_row, int(csc.indptr[-1]), int(_highs.MatrixFormat.kColwise),
                   int(_highs.ObjSense.kMinimize), 0.0, np.asarray(c, dtype=float), np.zeros(n_col), hi_col, lo,
                   np.asarray(upper, dtype=float), np.asarray(csc.indptr, dtype=np.int32),
                   np.asarray(csc.indices, dtype=np.int32), np.asarray(csc.data, dtype=float),
                   np.zeros(n_col, dtype=np.int32)) == _highs.HighsStatus.kError:  # every column continuous
        return None
    if warm is not None and warm.basis is not None and key is not None and warm.basis.key == key:
        _set_basis(h, warm.basis)
    if h.run() == _highs.HighsStatus.kError:
        return None
    if h.getModelStatus() != _highs.HighsModelStatus.kOptimal:
        return None
    sol = h.getSolution()
    if warm is not None and key is not None:
        got = h.getBasis()
        warm.basis = Basis(key, bytes(map(int, got.col_status)), bytes(map(int, got.row_status))) if got.valid else None
    return Solution(np.array(sol.col_value), np.array(sol.row_dual))


def _set_basis(h: Any, basis: Basis) -> None:
    assert _highs is not None
    status = [_highs.HighsBasisStatus(v) for v in range(max(basis.cols + basis.rows, default=0) + 1)]
    hb = _highs.HighsBasis()
    hb.col_status = [status[v] for v in basis.cols]
    hb.row_status = [status[v] for v in basis.rows]
    hb.valid = True
    h.setBasis(hb)


def _by_linprog(c: FloatArray, a: sparse.csr_matrix | sparse.csc_matrix, lo: FloatArray, hi: FloatArray,
                hi_col: FloatArray) -> Solution | None:  # pragma: no cover - see minimize
    eq = np.isfinite(lo)
    res = linprog(c, A_ub=a[~eq] if (~eq).any() else None, b_ub=hi[~eq] if (~eq).any() else None,
                  A_eq=a[eq] if eq.any() else None, b_eq=hi[eq] if eq.any() else None,
                  bounds=np.column_stack([np.zeros(c.size), hi_col]), method="highs")
    if res.status != 0:
        return None
    dual = np.zeros(a.shape[0])
    dual[~eq] = res.ineqlin.marginals
    if eq.any():
        dual[eq] = res.eqlin.marginals
    return Solution(np.asarray(res.x), dual)
