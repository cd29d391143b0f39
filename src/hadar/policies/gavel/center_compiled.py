"""The compiled centering, start to end: ``center.center_face`` in a few kernel calls per step.

``center_jit`` holds the Newton step, the slacks and the barrier; this module adds, with the
same rule (NumPy's operations in NumPy's order, so the same bits):

* :func:`repair` (``center.repair``), :func:`interior` (``center.interior_point``) and
  :func:`start` (``center.blend_start``: both, the slacks of each, the blend and its halvings);
* :func:`trial` (``x + t dx`` and its slacks, one call per trial point of the line search);
* :func:`center_face` and :func:`analytic_center`, the Python loops around them (the
  logarithms stay with ``np.log``: see ``center_jit``).

A sign of zero may differ from NumPy's ``clip`` where the solver point has ``-0.0``: no slack,
sum or blend downstream can tell the two apart (``0.0 + -0.0 = 0.0``, and every test is ``> 0``).
``tests/unit/test_center_jit.py`` checks every function here against its NumPy original.
"""

from __future__ import annotations

import math

import numpy as np

from hadar.arrays import FloatArray
from hadar.errors import SolverError
from hadar.policies.gavel.center import _DECREMENT_TOL as DECREMENT_TOL
from hadar.policies.gavel.center import _MAX_NEWTON as MAX_NEWTON
from hadar.policies.gavel.center import _STALL_DECREMENT as STALL_DECREMENT
from hadar.policies.gavel.center import Face
from hadar.policies.gavel.center_jit import (
    _cholesky,
    _col_sum,
    _compiled,
    _max_step,
    _pairwise,
    _row_sum,
    _two_lanes,
    barrier,
    fits,
    slacks,
)
from hadar.policies.gavel.problem import fattened

__all__ = ["analytic_center", "center_capped", "center_face", "fits", "repair"]


@_compiled
def repair(x: FloatArray, act: FloatArray, ks: FloatArray, caps: FloatArray) -> FloatArray:  # pragma: no cover
    """``center.repair``: clipped at 0 (0 off ``act``), rows scaled to sum at most 1, then columns
    scaled to the capacities (``ks`` = k s per row)."""
    m, n = x.shape
    out = np.empty((m, n))
    for i in range(m):
        for j in range(n):
            v = x[i, j]
            out[i, j] = (0.0 if v < 0.0 else v) if act[i, j] != 0.0 else 0.0
        s = _row_sum(out, i)
        d = 1.0 if s <= 1.0 else s  # np.maximum(1.0, s), NaN kept
        for j in range(n):
            out[i, j] = out[i, j] / d
    for j in range(n):
        used = _col_sum(ks, out, j)
        if used > caps[j]:  # (else NumPy multiplies by 1.0: no change)
            scale = caps[j] / (used if used > 0.0 else 1.0)
            for i in range(m):
                out[i, j] = out[i, j] * scale
    return out


@_compiled
def interior(act: FloatArray, ks: FloatArray, caps: FloatArray) -> FloatArray:  # pragma: no cover - compiled
    """``center.interior_point``: half of each type's capacity shared by its rows, rows at most 1/2."""
    m, n = act.shape
    per_type = np.empty(n)
    for j in range(n):
        load = _col_sum(ks, act, j)
        per_type[j] = (0.5 * caps[j]) / load if load > 0.0 else 0.0
    out = np.empty((m, n))
    for i in range(m):
        for j in range(n):
            out[i, j] = act[i, j] * per_type[j]
        s = 2.0 * _row_sum(out, i)
        d = 1.0 if s <= 1.0 else s
        for j in range(n):
            out[i, j] = out[i, j] / d
    return out


@_compiled
def start(x_opt: FloatArray, a: FloatArray, act: FloatArray, kc: FloatArray, rows: FloatArray, caps: FloatArray,
          c_floor: float, has_c: bool) -> tuple[FloatArray, bool]:  # pragma: no cover - compiled
    """``center.blend_start``: ``(x0, True)``, or ``(_, False)`` where no blend is strictly inside."""
    m, n = a.shape
    xv = repair(x_opt, act, rows[3], caps)
    xi = interior(act, rows[3], caps)
    sv, _ = slacks(xv, a, act, kc, rows, caps, c_floor, has_c)
    si, _ = slacks(xi, a, act, kc, rows, caps, c_floor, has_c)
    theta = 0.5
    worst, worse = np.inf, False
    for i in range(m):  # the demand rows whose slack is smaller at the interior point
        p, q = sv[m * n + m + i], si[m * n + m + i]
        if rows[1, i] != 0.0 and q < p:
            frac = p / (p - q)
            worst = frac if (not worse or frac < worst) else worst
            worse = True
    if worse:
        theta = min(theta, 0.5 * worst)
    if has_c and si[-1] < sv[-1]:
        theta = min(theta, 0.5 * (sv[-1] / (sv[-1] - si[-1])))
    x0 = np.empty((m, n))
    for _ in range(60):
        for i in range(m):
            for j in range(n):
                x0[i, j] = (1.0 - theta) * xv[i, j] + theta * xi[i, j]
        _, ok = slacks(x0, a, act, kc, rows, caps, c_floor, has_c)
        if ok:
            return x0, True
        theta *= 0.5
    return x0, False


#: a face's arrays as the line search's kernels take them, one tuple (``_Arrays.kernel``): ``a``, ``act``,
#: ``kc``, ``cvec``, ``rows``, ``caps``, ``c_floor``, ``has_c`` (a plain tuple: Numba dispatches one fastest)
Kernel = tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, float, bool]


@_compiled
def trial(x: FloatArray, dx: FloatArray, t: float,
          face: Kernel) -> tuple[FloatArray, FloatArray, bool]:  # pragma: no cover - compiled
    """The line search's trial point ``x + t dx`` with its :func:`slacks` and feasibility."""
    a, act, kc, _, rows, caps, c_floor, has_c = face
    m, n = x.shape
    xc = np.empty((m, n))
    for i in range(m):
        for j in range(n):
            xc[i, j] = x[i, j] + t * dx[i, j]
    sl, ok = slacks(xc, a, act, kc, rows, caps, c_floor, has_c)
    return xc, sl, ok


@_compiled
def direction(x: FloatArray, sl: FloatArray, a: FloatArray, act: FloatArray, kc: FloatArray, cvec: FloatArray,
              rows: FloatArray, has_c: bool) -> tuple[FloatArray, float, float, bool]:  # pragma: no cover
    """``center._newton_step`` then ``center._max_step``: ``(dx, decrement, step bound, factorized)``.

    Each row's Hessian block, right-hand sides and Cholesky solve are ``center_jit``'s per-row
    arithmetic, done for all rows at once (the row index innermost, so rows proceed side by side);
    the coupling's sums run over rows then types in index order, as ``einsum`` did."""
    m, n = x.shape
    r = n + 1 if has_c else n
    w = 1 + r
    grad, hess, rhs = _blocks(x, sl, a, act, cvec, rows, has_c)
    v = rhs[:, 1:, :].copy()  # the Woodbury columns, before the solve overwrites them
    if not _cholesky_rows(hess, rhs):
        return grad, 0.0, 0.0, False
    sums = np.zeros((r, w))  # v' b_g (column 0) and v' B_v: each sum over rows then types in index order
    for i in range(m):
        for j in range(n):
            for p in range(r):
                vp = v[j, p, i]
                for c in range(w):
                    sums[p, c] += vp * rhs[j, c, i]
    small = np.empty((r, r))
    vb = np.empty((r, 1))
    for p in range(r):  # diag(1/dcoef) + v' B_v
        cap = sl[-1] if has_c and p == n else sl[m * n + 2 * m + p]
        for q in range(r):
            small[p, q] = (1.0 / (1.0 / (cap * cap)) if p == q else 0.0) + sums[p, 1 + q]
        vb[p, 0] = sums[p, 0]
    if not _cholesky(small, vb, np.empty((r, r))):
        return grad, 0.0, 0.0, False
    dx = np.empty((m, n))
    prod = np.empty(r)
    for i in range(m):
        for p in range(n):
            for q in range(r):
                prod[q] = rhs[p, 1 + q, i] * vb[q, 0]
            dx[i, p] = (rhs[p, 0, i] - _two_lanes(prod, r)) * act[i, p]
    dec = -(0.0 + _pairwise((grad * dx).ravel(), 0, m * n))
    return dx, dec, _max_step(dx, sl, a, act, kc, rows, has_c), True


@_compiled
def _blocks(x: FloatArray, sl: FloatArray, a: FloatArray, act: FloatArray, cvec: FloatArray, rows: FloatArray,
            has_c: bool) -> tuple[FloatArray, FloatArray, FloatArray]:  # pragma: no cover - compiled
    """Each row's gradient, Hessian block ``hess[:, :, i]`` and right-hand sides ``rhs[:, :, i]``
    (``-grad``, then the Woodbury columns): ``center_jit``'s per-row arithmetic."""
    m, n = x.shape
    r = n + 1 if has_c else n
    grad = np.empty((m, n))
    hess = np.empty((n, n, m))
    rhs = np.empty((n, 1 + r, m))
    for i in range(m):
        row, dem = sl[m * n + i], sl[m * n + m + i]
        inv_d = rows[1, i] / dem
        quad = inv_d * inv_d
        k, ks = rows[2, i], rows[3, i]
        for p in range(n):
            inv_x = act[i, p] / sl[i * n + p]
            g = k * ((-inv_x + (1.0 / row) * act[i, p]) - inv_d * a[i, p])
            g = g + (ks * (1.0 / sl[m * n + 2 * m + p])) * act[i, p]
            if has_c:
                g = g - cvec[i, p] / sl[-1]
            grad[i, p] = g
            rhs[p, 0, i] = -g
            for q in range(n):
                eye = 1.0 if p == q else 0.0
                h = ((inv_x * inv_x) * eye + (1.0 / (row * row)) * (act[i, p] * act[i, q])) + (quad * a[i, p]) * a[i, q]
                hess[p, q, i] = k * h + (1.0 - act[i, p]) * eye
                rhs[p, 1 + q, i] = (ks * act[i, p]) * eye
            if has_c:
                rhs[p, 1 + n, i] = cvec[i, p]
    return grad, hess, rhs


@_compiled
def _cholesky_rows(h: FloatArray, b: FloatArray) -> bool:  # pragma: no cover - compiled
    """``center_jit._cholesky`` of every row's block ``h[:, :, i]`` in place of ``b[:, :, i]``; False
    if some block is not positive definite."""
    n, w, m = b.shape
    low = np.empty((n, n, m))
    piv = np.empty(m)
    acc = np.empty(m)
    ok = True
    for j in range(n):
        for i in range(m):
            acc[i] = h[j, j, i]
        for k in range(j):
            for i in range(m):
                acc[i] = acc[i] - low[j, k, i] * low[j, k, i]
        for i in range(m):
            ok = ok and acc[i] > 0.0
            piv[i] = math.sqrt(acc[i]) if acc[i] > 0.0 else 1.0
        for t in range(j + 1, n):
            for i in range(m):
                acc[i] = h[t, j, i]
            for k in range(j):
                for i in range(m):
                    acc[i] = acc[i] - low[t, k, i] * low[j, k, i]
            for i in range(m):
                low[t, j, i] = acc[i] / piv[i]
        for i in range(m):
            low[j, j, i] = piv[i]
    if not ok:
        return False
    for c in range(w):
        for t in range(n):  # forward: L y = b
            for i in range(m):
                acc[i] = b[t, c, i]
            for k in range(t):
                for i in range(m):
                    acc[i] = acc[i] - low[t, k, i] * b[k, c, i]
            for i in range(m):
                b[t, c, i] = acc[i] / low[t, t, i]
        for t in range(n - 1, -1, -1):  # backward: L' x = y
            for i in range(m):
                acc[i] = b[t, c, i]
            for k in range(t + 1, n):
                for i in range(m):
                    acc[i] = acc[i] - low[k, t, i] * b[k, c, i]
            for i in range(m):
                b[t, c, i] = acc[i] / low[t, t, i]
    return True


@_compiled
def step(logs: FloatArray, f: float, t: float, dec: float, xc: FloatArray, cand: FloatArray,
         face: Kernel) -> tuple[bool, float, FloatArray, float, float, bool]:  # pragma: no cover - compiled
    """The line search's test of a strictly feasible trial point ``xc`` (slacks ``cand``, their logarithms
    ``logs``): ``(passed, barrier there, then where it passed the next Newton step: dx, decrement, step
    bound, factorized)``."""
    a, act, kc, cvec, rows, _, _, has_c = face
    m, n = xc.shape
    fc = barrier(logs, rows, m, n)
    if fc <= f - 0.25 * t * dec:
        dx, d, bound, ok = direction(xc, cand, a, act, kc, cvec, rows, has_c)
        return True, fc, dx, d, bound, ok
    return False, fc, xc, 0.0, 0.0, True


class _Arrays:
    """A face as the kernels read it (contiguous float arrays)."""

    __slots__ = ("a", "act", "c_floor", "caps", "cvec", "has_c", "kc", "rows")

    def __init__(self, face: Face) -> None:
        self.has_c = face.c is not None
        self.a = np.ascontiguousarray(face.a, dtype=float)
        self.act = face.active.astype(float)
        has_demand = face.has_demand
        k = np.asarray(face.k, dtype=float)
        self.rows = np.ascontiguousarray(np.stack([np.where(has_demand, face.g, 0.0), has_demand.astype(float), k,
                                                   face.k * face.s]))
        self.kc = face.k[:, None] * face.c if face.c is not None else np.zeros_like(self.a)
        self.cvec = self.kc * self.act
        self.caps = np.asarray(face.capacities, dtype=float)
        self.c_floor = face.c_floor

    def kernel(self) -> Kernel:
        """These arrays as :data:`Kernel` orders them."""
        return self.a, self.act, self.kc, self.cvec, self.rows, self.caps, self.c_floor, self.has_c


def center_capped(face: Face, x_opt: FloatArray) -> FloatArray:
    """``center.center_capped`` through the kernels: :func:`repair`, the floors capped (NumPy, as
    ``center.capped``), :func:`start` from the repaired point, then the Newton loop."""
    arr = _Arrays(face)
    x_rep = repair(np.ascontiguousarray(x_opt, dtype=float), arr.act, arr.rows[3], arr.caps)
    g = np.minimum(face.g, np.asarray(fattened((face.a * x_rep).sum(axis=1))))
    has_demand = np.isfinite(g)
    arr.rows[0] = np.where(has_demand, g, 0.0)
    arr.rows[1] = has_demand
    if face.c is not None:
        arr.c_floor = min(face.c_floor, float(fattened(float((face.k[:, None] * face.c * x_rep).sum()))))
    x0, ok = start(x_rep, arr.a, arr.act, arr.kc, arr.rows, arr.caps, arr.c_floor, arr.has_c)
    if not ok:
        raise SolverError("centering: found no strictly feasible start (the face is empty at this tolerance)")
    return _newton(face, x0, arr)


def center_face(face: Face, x_opt: FloatArray) -> FloatArray:
    """``center.center_face`` through the kernels: :func:`start`, then the Newton loop."""
    arr = _Arrays(face)
    x0, ok = start(np.ascontiguousarray(x_opt, dtype=float), arr.a, arr.act, arr.kc, arr.rows, arr.caps,
                   arr.c_floor, arr.has_c)
    if not ok:
        raise SolverError("centering: found no strictly feasible start (the face is empty at this tolerance)")
    return _newton(face, x0, arr)


def analytic_center(face: Face, x0: FloatArray) -> FloatArray:
    """``center.analytic_center`` through the kernels (same stopping rules, same point)."""
    return _newton(face, x0, _Arrays(face))


def _newton(face: Face, x0: FloatArray, arr: _Arrays) -> FloatArray:
    a, act, kc, cvec, rows, caps, c_floor, has_c = (arr.a, arr.act, arr.kc, arr.cvec, arr.rows, arr.caps, arr.c_floor,
                                                    arr.has_c)
    m, n = a.shape
    x = np.where(face.active, x0, 0.0)
    sl, ok = slacks(x, a, act, kc, rows, caps, c_floor, has_c)
    if not ok:
        raise SolverError("centering: the starting point is not strictly inside the face (numerical trouble)")
    f, last_dec = float(barrier(np.log(sl), rows, m, n)), np.inf
    dx, dec, t, factored = direction(x, sl, a, act, kc, cvec, rows, has_c)
    face_arrays = arr.kernel()
    for _ in range(MAX_NEWTON):
        if not factored:
            raise np.linalg.LinAlgError("matrix is not positive definite")
        if dec / 2 <= DECREMENT_TOL or (dec <= STALL_DECREMENT and dec > 0.25 * last_dec):
            break
        last_dec = dec
        while t > 1e-12:
            xc, cand, ok = trial(x, dx, t, face_arrays)
            if ok:  # the barrier there and, where it falls enough, the next Newton step (one call)
                passed, fc, dx_next, dec_next, t_next, factored_next = step(np.log(cand), f, t, dec, xc, cand,
                                                                            face_arrays)
                if passed:
                    break
            t *= 0.5
        else:
            break  # no progress possible at double precision
        x, sl, f = xc, cand, fc
        dx, dec, t, factored = dx_next, dec_next, t_next, factored_next
    return x
