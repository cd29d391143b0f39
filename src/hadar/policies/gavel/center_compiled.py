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

import numpy as np

from hadar.arrays import FloatArray
from hadar.errors import SolverError
from hadar.policies.gavel.center import Face
from hadar.policies.gavel.center_jit import (
    DECREMENT_TOL,
    MAX_NEWTON,
    STALL_DECREMENT,
    _col_sum,
    _compiled,
    _row_sum,
    barrier,
    direction,
    fits,
    slacks,
)

__all__ = ["analytic_center", "center_face", "fits", "repair"]


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


@_compiled
def trial(x: FloatArray, dx: FloatArray, t: float, a: FloatArray, act: FloatArray, kc: FloatArray,
          rows: FloatArray, caps: FloatArray, c_floor: float,
          has_c: bool) -> tuple[FloatArray, FloatArray, bool]:  # pragma: no cover - compiled
    """The line search's trial point ``x + t dx`` with its :func:`slacks` and feasibility."""
    m, n = x.shape
    xc = np.empty((m, n))
    for i in range(m):
        for j in range(n):
            xc[i, j] = x[i, j] + t * dx[i, j]
    sl, ok = slacks(xc, a, act, kc, rows, caps, c_floor, has_c)
    return xc, sl, ok


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
    for _ in range(MAX_NEWTON):
        dx, dec, t, factored = direction(x, sl, a, act, kc, cvec, rows, has_c)
        if not factored:
            raise np.linalg.LinAlgError("matrix is not positive definite")
        if dec / 2 <= DECREMENT_TOL or (dec <= STALL_DECREMENT and dec > 0.25 * last_dec):
            break
        last_dec = dec
        while t > 1e-12:
            xc, cand, ok = trial(x, dx, t, a, act, kc, rows, caps, c_floor, has_c)
            if ok:
                fc = float(barrier(np.log(cand), rows, m, n))
                if fc <= f - 0.25 * t * dec:
                    break
            t *= 0.5
        else:
            break  # no progress possible at double precision
        x, sl, f = xc, cand, fc
    return x
