"""Arithmetic whose result does not depend on the CPU.

Scheduling decisions must be the same on every machine. Dense BLAS and
LAPACK calls (``a @ b`` on dense arrays, ``np.dot``, ``np.linalg.norm``,
``np.linalg.solve``) and SuperLU (``scipy.sparse.linalg.splu``) pick their
kernels at run time from the CPU (OpenBLAS's Haswell, SkylakeX, Sandybridge,
... kernels sum in different orders), so their last bits differ from one
machine to the next, and an interior-point method or a tie in the round
mechanism can amplify those bits into a different schedule. Everything the
policies compute goes through the functions here instead: IEEE element-wise
operations (exact on every CPU) and NumPy's own reductions (pairwise sums in
a fixed order, compiled for the x86-64 baseline), and for sparse systems the
QDLDL factorization (plain C, no BLAS). ``tests/unit/test_numeric.py`` and
``tests/integration/test_determinism.py`` check it under several OpenBLAS
kernels.

Rule for new code on a decision path: no ``@`` or ``np.dot`` between dense
arrays, no ``np.linalg``; use these.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from hadar.arrays import FloatArray


def dot(a: FloatArray, b: FloatArray) -> float:
    """``a . b`` of two 1-D arrays (NumPy's pairwise sum of the products)."""
    return float(np.add.reduce(np.asarray(a, dtype=float) * np.asarray(b, dtype=float)))


def norm(a: FloatArray) -> float:
    """Euclidean norm of a 1-D array."""
    v = np.asarray(a, dtype=float)
    return math.sqrt(float(np.add.reduce(v * v)))


def matvec(m: FloatArray, v: FloatArray) -> FloatArray:
    """``m @ v`` for a dense 2-D ``m`` (row sums of the products)."""
    out: FloatArray = (np.asarray(m, dtype=float) * np.asarray(v, dtype=float)[None, :]).sum(axis=1)
    return out


def cholesky_solve(h: FloatArray, b: FloatArray) -> FloatArray:
    """Solve ``h[i] @ x[i] = b[i]`` for a batch of symmetric positive definite ``h`` (m, n, n).

    ``b`` is (m, n) or (m, n, r). Cholesky ``h = L L'`` with the batch
    vectorized and the (small) n looped in a fixed order; raises
    ``np.linalg.LinAlgError`` if a pivot is not positive. A batch of one is
    solved in Python floats (the same IEEE operations in the same order, so
    the same bits, without NumPy's per-call cost).
    """
    h = np.asarray(h, dtype=float)
    rhs = np.asarray(b, dtype=float)
    vec = rhs.ndim == 2
    if vec:
        rhs = rhs[:, :, None]
    x = _cholesky_one(h[0], rhs[0]) if h.shape[0] == 1 else _cholesky_batch(h, rhs)
    return x[:, :, 0] if vec else x


def _cholesky_batch(h: FloatArray, rhs: FloatArray) -> FloatArray:
    """``cholesky_solve`` on (m, n, n) and (m, n, r): ``low[i][j]`` is the batch's column of L[i, j]."""
    n = h.shape[1]
    low: list[list[FloatArray]] = [[] for _ in range(n)]
    for j in range(n):
        acc = h[:, j, j]
        for k in range(j):
            acc = acc - low[j][k] * low[j][k]
        if not (acc > 0).all():
            raise np.linalg.LinAlgError("matrix is not positive definite")
        piv = np.sqrt(acc)
        for i in range(j + 1, n):
            acc = h[:, i, j]
            for k in range(j):
                acc = acc - low[i][k] * low[j][k]
            low[i].append(acc / piv)
        low[j].append(piv)
    col = [[v[:, None] for v in row] for row in low]
    y: list[FloatArray] = []
    for i in range(n):  # forward: L y = b
        acc = rhs[:, i, :]
        for k in range(i):
            acc = acc - col[i][k] * y[k]
        y.append(acc / col[i][i])
    x: list[FloatArray] = [y[0]] * n
    for i in reversed(range(n)):  # backward: L' x = y
        acc = y[i]
        for k in range(i + 1, n):
            acc = acc - col[k][i] * x[k]
        x[i] = acc / col[i][i]
    return np.stack(x, axis=1)


def _cholesky_one(h: FloatArray, rhs: FloatArray) -> FloatArray:
    """``cholesky_solve`` on one (n, n) matrix and (n, r) right-hand sides, in Python floats."""
    hh: list[list[float]] = h.tolist()
    bb: list[list[float]] = rhs.tolist()
    n, r = len(hh), rhs.shape[1]
    low = [[0.0] * n for _ in range(n)]
    for j in range(n):
        acc = hh[j][j]
        for k in range(j):
            acc -= low[j][k] * low[j][k]
        if not acc > 0:
            raise np.linalg.LinAlgError("matrix is not positive definite")
        low[j][j] = math.sqrt(acc)
        for i in range(j + 1, n):
            acc = hh[i][j]
            for k in range(j):
                acc -= low[i][k] * low[j][k]
            low[i][j] = acc / low[j][j]
    y = [[0.0] * r for _ in range(n)]
    for i in range(n):
        for c in range(r):
            acc = bb[i][c]
            for k in range(i):
                acc -= low[i][k] * y[k][c]
            y[i][c] = acc / low[i][i]
    x = [[0.0] * r for _ in range(n)]
    for i in reversed(range(n)):
        for c in range(r):
            acc = y[i][c]
            for k in range(i + 1, n):
                acc -= low[k][i] * x[k][c]
            x[i][c] = acc / low[i][i]
    return np.array(x, dtype=float).reshape(1, n, r)


class SparseLDL:
    """``K x = b`` for a sparse symmetric quasi-definite ``K`` (QDLDL: AMD ordering, LDL', no BLAS)."""

    def __init__(self, k: sp.spmatrix) -> None:
        import qdldl

        self._solver = qdldl.Solver(sp.csc_matrix(k))

    def solve(self, b: FloatArray) -> FloatArray:
        return np.asarray(self._solver.solve(np.asarray(b, dtype=float)), dtype=float)
