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
    ``np.linalg.LinAlgError`` if a pivot is not positive.
    """
    h = np.asarray(h, dtype=float)
    rhs = np.asarray(b, dtype=float)
    vec = rhs.ndim == 2
    if vec:
        rhs = rhs[:, :, None]
    n = h.shape[1]
    low = np.zeros_like(h)
    for j in range(n):
        acc = h[:, j, j].copy()
        for k in range(j):
            acc -= low[:, j, k] * low[:, j, k]
        if not (acc > 0).all():
            raise np.linalg.LinAlgError("matrix is not positive definite")
        low[:, j, j] = np.sqrt(acc)
        for i in range(j + 1, n):
            acc = h[:, i, j].copy()
            for k in range(j):
                acc -= low[:, i, k] * low[:, j, k]
            low[:, i, j] = acc / low[:, j, j]
    y = np.empty_like(rhs)
    for i in range(n):  # forward: L y = b
        acc = rhs[:, i, :].copy()
        for k in range(i):
            acc -= low[:, i, k, None] * y[:, k, :]
        y[:, i, :] = acc / low[:, i, i, None]
    x = np.empty_like(rhs)
    for i in reversed(range(n)):  # backward: L' x = y
        acc = y[:, i, :].copy()
        for k in range(i + 1, n):
            acc -= low[:, k, i, None] * x[:, k, :]
        x[:, i, :] = acc / low[:, i, i, None]
    return x[:, :, 0] if vec else x


class SparseLDL:
    """``K x = b`` for a sparse symmetric quasi-definite ``K`` (QDLDL: AMD ordering, LDL', no BLAS)."""

    def __init__(self, k: sp.spmatrix) -> None:
        import qdldl

        self._solver = qdldl.Solver(sp.csc_matrix(k))

    def solve(self, b: FloatArray) -> FloatArray:
        return np.asarray(self._solver.solve(np.asarray(b, dtype=float)), dtype=float)
