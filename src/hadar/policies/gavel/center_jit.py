"""The centering's Newton loop compiled with Numba: the same IEEE operations in the same order.

``center.analytic_center`` spends its time on NumPy's per-call overhead (some 150 calls on
arrays of a few dozen entries per Newton step), not on arithmetic. These kernels (the sums,
the slacks, the barrier, a Cholesky solve and the step-length bound; ``center_compiled`` builds
the Newton step, the start point and the loop on them) repeat NumPy's arithmetic exactly, so
the centered point is the same to the bit (Gavel's round mechanism amplifies any last-bit change
into another schedule):

* element-wise operations in the order NumPy evaluates the expressions of ``center.py``
  (Numba, without ``fastmath``, fuses no multiply-add);
* ``sum(axis=1)``, whole-array sums and ``sum(axis=0)`` of one column: NumPy's pairwise
  summation (:func:`_pairwise`); ``sum(axis=0)`` of several columns and the contractions
  ``einsum("mnr,mnq->rq")``, ``einsum("mnr,mn->r")``: sequential sums in index order;
* ``einsum("mnr,r->mn")``: the order of NumPy's einsum kernel (:func:`_two_lanes`);
* logarithms: not here. The caller takes them with ``np.log`` (whose results differ from the
  C library's in the last bit for ~0.02 % of arguments) and :func:`barrier` sums them.

``tests/unit/test_center_jit.py`` checks the kernels against the NumPy code bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
from numba import njit

from hadar.arrays import FloatArray
from hadar.policies.gavel.center import Face

_F = TypeVar("_F", bound=Callable[..., Any])


def _compiled(fn: _F) -> _F:
    """Compile ``fn`` on its first call; the machine code is cached beside this file (or in the
    user's cache where that is read-only). ``error_model="numpy"``: x / 0 gives inf, as NumPy does."""
    return cast(_F, njit(cache=True, nogil=True, error_model="numpy")(fn))


@_compiled
def _pairwise_block(v: FloatArray, lo: int, n: int) -> float:  # pragma: no cover - compiled
    """NumPy's ``pairwise_sum`` of ``v[lo:lo + n]`` for ``n <= 128``: in order below 8 entries,
    else 8 accumulators combined in pairs, then the remainder in order."""
    res: float = 0.0
    if n < 8:
        for i in range(lo, lo + n):
            res += v[i]
        return res
    r0, r1, r2, r3, r4, r5, r6, r7 = v[lo], v[lo + 1], v[lo + 2], v[lo + 3], v[lo + 4], v[lo + 5], v[lo + 6], v[lo + 7]
    i = 8
    while i < n - (n % 8):
        k = lo + i
        r0, r1, r2, r3 = r0 + v[k], r1 + v[k + 1], r2 + v[k + 2], r3 + v[k + 3]
        r4, r5, r6, r7 = r4 + v[k + 4], r5 + v[k + 5], r6 + v[k + 6], r7 + v[k + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += v[lo + i]
        i += 1
    return res


@_compiled
def _half(n: int) -> int:  # pragma: no cover - compiled
    """Where NumPy splits a pairwise sum of ``n > 128`` entries: half, rounded down to a multiple of 8."""
    n2 = n // 2
    return n2 - n2 % 8


@_compiled
def _pairwise(v: FloatArray, lo: int, n: int) -> float:  # pragma: no cover - compiled
    """NumPy's ``pairwise_sum`` of ``v[lo:lo + n]``: blocks of up to 128 entries, halved above.

    NumPy recurses; this walks the same tree with a stack of its own (Numba's cache cannot
    hold a recursive function): ``stage`` 0 = left half next, 1 = right half next, 2 = add.
    """
    if n <= 128:
        return _pairwise_block(v, lo, n)
    los, ns, stage = np.empty(64, np.int64), np.empty(64, np.int64), np.zeros(64, np.int64)
    left = np.empty(64)
    top, ret = 0, 0.0
    los[0], ns[0] = lo, n
    while top >= 0:
        k = ns[top]
        if k <= 128:
            ret = _pairwise_block(v, los[top], k)
            top -= 1
        elif stage[top] == 2:
            ret = left[top] + ret
            top -= 1
        else:
            half = _half(k)
            if stage[top] == 1:
                left[top] = ret
            stage[top] += 1
            los[top + 1] = los[top] + (half if stage[top] == 2 else 0)
            ns[top + 1] = k - half if stage[top] == 2 else half
            stage[top + 1] = 0
            top += 1
    return ret


@_compiled
def _row_sum(mat: FloatArray, i: int) -> float:  # pragma: no cover - compiled
    """``mat.sum(axis=1)[i]`` of a C-contiguous 2-D array: 0.0 plus the row's pairwise sum."""
    return 0.0 + _pairwise(mat[i], 0, mat.shape[1])


@_compiled
def _all_sum(mat: FloatArray) -> float:  # pragma: no cover - compiled
    """``mat.sum()`` of a C-contiguous array: the pairwise sum of its flattened entries."""
    return 0.0 + _pairwise(mat.ravel(), 0, mat.size)


@_compiled
def _col_sum(w: FloatArray, mat: FloatArray, j: int) -> float:  # pragma: no cover - compiled
    """``(w[:, None] * mat).sum(axis=0)[j]``: rows added in order, except that a single column is
    contiguous and NumPy then sums it pairwise."""
    m, n = mat.shape
    if n == 1:
        return _all_sum(w * mat[:, 0])
    acc: float = w[0] * mat[0, j]
    for i in range(1, m):
        acc += w[i] * mat[i, j]
    return acc


@_compiled
def _two_lanes(p: FloatArray, r: int) -> float:  # pragma: no cover - compiled
    """``einsum("mnr,r->mn")``'s sum of the ``r`` products ``p``: NumPy's einsum kernels are built
    for the x86-64 baseline (SSE2: two lanes, multiply then add), blocks of 8 added last to first,
    then pairs, then the two lanes, then added to the output's 0.0."""
    l0 = l1 = 0.0
    i = 0
    while r - i >= 8:
        a0, a1 = p[i + 6] + l0, p[i + 7] + l1
        a0, a1 = p[i + 4] + a0, p[i + 5] + a1
        a0, a1 = p[i + 2] + a0, p[i + 3] + a1
        l0, l1 = p[i] + a0, p[i + 1] + a1
        i += 8
    while i < r:
        l0 = p[i] + l0
        l1 = (p[i + 1] if i + 1 < r else 0.0) + l1
        i += 2
    return 0.0 + (l0 + l1)


@_compiled
def slacks(x: FloatArray, a: FloatArray, act: FloatArray, kc: FloatArray, rows: FloatArray,
           caps: FloatArray, c_floor: float, has_c: bool) -> tuple[FloatArray, bool]:  # pragma: no cover
    """``center._slacks`` flattened: ``[x (m n), row (m), demand (m), cap (n), glob]`` and feasibility.

    ``rows`` = ``(g0, has_demand, k, k s)`` stacked (4, m).
    """
    m, n = x.shape
    out = np.empty(m * n + 2 * m + n + 1)
    prod = np.empty(n)
    ok = True
    for i in range(m):
        for j in range(n):
            out[i * n + j] = x[i, j] if act[i, j] != 0.0 else 1.0
            prod[j] = a[i, j] * x[i, j]
            ok = ok and out[i * n + j] > 0.0
        u = 0.0 + _pairwise(prod, 0, n)
        row = 1.0 - _row_sum(x, i)
        dem = u - rows[0, i] if rows[1, i] != 0.0 else 1.0
        out[m * n + i], out[m * n + m + i] = row, dem
        ok = ok and row > 0.0 and dem > 0.0
    for j in range(n):
        acc = _col_sum(rows[3], x, j)
        cap = caps[j] - acc if caps[j] > 0.0 else 1.0
        out[m * n + 2 * m + j] = cap
        ok = ok and cap > 0.0
    glob = _all_sum(kc * x) - c_floor if has_c else 1.0
    out[-1] = glob
    return out, ok and glob > 0.0


@_compiled
def barrier(logs: FloatArray, rows: FloatArray, m: int, n: int) -> float:  # pragma: no cover - compiled
    """``center._barrier`` (``socp=False``) from ``np.log`` of the flat slacks of :func:`slacks`."""
    weighted = np.empty(m)
    for i in range(m):
        per_row = (0.0 + _pairwise(logs, i * n, n)) + logs[m * n + i]
        per_row = per_row + (1.0 * logs[m * n + m + i]) * rows[1, i]
        weighted[i] = rows[2, i] * per_row
    cap_sum = 0.0 + _pairwise(logs, m * n + 2 * m, n)
    total: float = (-(0.0 + _pairwise(weighted, 0, m)) - cap_sum) - logs[-1]
    return total


@_compiled
def _cholesky(h: FloatArray, b: FloatArray, low: FloatArray) -> bool:  # pragma: no cover - compiled
    """``numeric.cholesky_solve`` of one (n, n) ``h`` in place of ``b`` (n, r); False if not SPD.
    ``low`` (n, n) is scratch space for the factor."""
    n, r = b.shape
    for j in range(n):
        acc = h[j, j]
        for k in range(j):
            acc = acc - low[j, k] * low[j, k]
        if not acc > 0.0:
            return False
        piv = math.sqrt(acc)
        for i in range(j + 1, n):
            acc = h[i, j]
            for k in range(j):
                acc = acc - low[i, k] * low[j, k]
            low[i, j] = acc / piv
        low[j, j] = piv
    for c in range(r):
        for i in range(n):  # forward: L y = b
            acc = b[i, c]
            for k in range(i):
                acc = acc - low[i, k] * b[k, c]
            b[i, c] = acc / low[i, i]
        for i in range(n - 1, -1, -1):  # backward: L' x = y
            acc = b[i, c]
            for k in range(i + 1, n):
                acc = acc - low[k, i] * b[k, c]
            b[i, c] = acc / low[i, i]
    return True


@_compiled
def _max_step(dx: FloatArray, sl: FloatArray, a: FloatArray, act: FloatArray, kc: FloatArray,
              rows: FloatArray, has_c: bool) -> float:  # pragma: no cover - compiled
    """``center._max_step``: the largest step keeping every slack positive, times 0.99, capped at 1."""
    m, n = dx.shape
    best = np.inf
    prod = np.empty(n)
    for i in range(m):
        for j in range(n):
            if act[i, j] != 0.0 and dx[i, j] < 0.0:
                best = min(best, sl[i * n + j] / -dx[i, j])
            prod[j] = a[i, j] * dx[i, j]
        drow = _row_sum(dx, i)
        if drow > 0.0:
            best = min(best, sl[m * n + i] / drow)
        du = 0.0 + _pairwise(prod, 0, n)
        if rows[1, i] != 0.0 and du < 0.0:
            best = min(best, sl[m * n + m + i] / -du)
    for j in range(n):
        acc = _col_sum(rows[3], dx, j)
        if acc > 0.0:
            best = min(best, sl[m * n + 2 * m + j] / acc)
    if has_c:
        dg = _all_sum(kc * dx)
        if dg < 0.0:
            best = min(best, sl[-1] / -dg)
    return min(1.0, 0.99 * best)


def fits(face: Face) -> bool:
    """Whether these kernels cover ``face`` (else ``center`` runs its NumPy code): no second-order
    cone, at most 4,096 entries (NumPy may sum larger arrays in buffered chunks)."""
    return not face.socp and 0 < face.a.size <= 4096

