"""Pick the point of an optimal face that an interior-point solver returns.

Why: Gavel solved its LPs with cvxpy + ECOS, an interior-point method. When
the optimum is not unique (max-min: jobs that are not bottlenecks can take
any leftover; identical jobs can swap GPU types; makespan: any point of the
feasible set at the chosen T), ECOS returns a point in the relative interior
of the optimal face, close to its *analytic center*, while HiGHS's simplex
returns a vertex. Gavel's round mechanism turns ``x`` into priorities, so the
choice shows in job completion times. We therefore solve every LP with HiGHS
(optimal value, certified), fatten the optimal face by a relative ``FACE_TOL``
and return the maximizer of the log-barrier of all its inequalities: the limit
point of the central path, i.e. what an exact interior-point method converges
to. Measured against cvxpy 1.5.4 + ECOS on states built from the bundled
traces, max-min and max-sum allocations agree to ~1e-4 per entry (a vertex is
off by up to 0.67); see tests/unit/test_policies_ecos_reference.py. Where
the optimal face is large and flat (finish-time fairness with few bottleneck
jobs, makespan's feasibility problem) ECOS stops early at a point that is not
its center, so entries there differ by 0.01-0.2; no barrier weighting or
linear tilt we tried explains ECOS's point better than the plain center.
HiGHS's own interior point without crossover was also tried: it matches ECOS
on unique optima but lands elsewhere on degenerate faces (0.12 off on the
agnostic max-min of a 2:0:4 cluster, where the center is 0.002 off).

``FACE_TOL = 1e-6`` was chosen on the Gavel reference runs: 1e-5, 1e-7 and
1e-8 all reproduce fewer of them, because Gavel's round mechanism ranks jobs
by ``x / share``, so even 1e-6-level entries order the jobs that get spare
GPUs (ECOS leaves ~1e-10 there, of either sign).

The face is ``{x >= 0 on active entries; sum_i k_i s_i x_ij <= N_j;
sum_j x_ij <= 1; a_i . x_i >= g_i; optionally sum k_i c_ij x_ij >= c_floor}``
with rows = job classes of multiplicity ``k_i``. The Newton system is
block-diagonal per row (n x n) plus a rank-(n+1) coupling (capacities and
the optional global floor), solved with the Woodbury identity in O(m n^3).

The start point and the Newton loop also exist compiled (``center_jit.py`` and
``center_compiled.py``, Numba), with the same operations in the same order:
:func:`center_face` and :func:`analytic_center` use them once the policy's
:class:`Centering` has counted ``JIT_AFTER`` faces: the same point to the bit.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from types import ModuleType
from typing import cast

import numpy as np

from hadar.arrays import BoolArray, FloatArray
from hadar.errors import SolverError
from hadar.numeric import cholesky_solve

log = logging.getLogger(__name__)

#: Relative thickness of the fattened optimal face (objective within 1e-6).
FACE_TOL = 1e-6
_MAX_NEWTON = 100
_DECREMENT_TOL = 1e-10
_STALL_DECREMENT = 1e-5


@dataclass(frozen=True, slots=True)
class Face:
    """A polytope over job-class rows; see the module docstring.

    ``socp=True`` uses ECOS's barrier for the demand rows of finish-time
    fairness (an ``inv_pos`` second-order cone): ``2 log(u - g) - log(u)``
    with ``u = a_i . x_i`` instead of ``log(u - g)``.
    """

    a: FloatArray  # (m, n) demand coefficients, 0 where inactive
    g: FloatArray  # (m,) demand floors; -inf = no demand row
    k: FloatArray  # (m,) multiplicities
    s: FloatArray  # (m,) scale factors
    capacities: FloatArray  # (n,)
    active: BoolArray  # (m, n)
    c: FloatArray | None = None  # (m, n) global floor coefficients
    c_floor: float = 0.0
    socp: bool = False

    @property
    def has_demand(self) -> BoolArray:
        return np.isfinite(self.g)


@dataclass(slots=True)
class _Slacks:
    x: FloatArray
    row: FloatArray
    demand: FloatArray
    cap: FloatArray
    glob: float
    u: FloatArray


@dataclass(frozen=True, slots=True)
class _Prep:
    """What every Newton step of one centering reuses, computed once per face (the same values
    the steps would compute, so the same bits)."""

    face: Face
    act: FloatArray  # (m, n) active entries as 0/1
    g0: FloatArray  # (m,) demand floors, 0 where there is no demand row
    k_col: FloatArray  # (m, 1)
    ks_col: FloatArray  # (m, 1): GPUs a unit of x holds, k s
    kc: FloatArray | None  # (m, n): k c (the global floor's coefficients times multiplicities)
    cvec: FloatArray | None  # (m, n): k c on active entries
    v: FloatArray  # (m, n, r): the Woodbury columns of the coupling rows
    actact: FloatArray  # (m, n, n): act_i act_j
    fill: FloatArray  # (m, n, n): 1 on the diagonal of inactive entries (their dx = 0)
    eye: FloatArray  # (n, n)

    @classmethod
    def of(cls, face: Face, *, steps: bool = True) -> _Prep:
        """``steps=False``: only what ``_slacks`` reads (``v``, ``actact``, ``fill`` and ``eye`` empty)."""
        act = face.active.astype(float)
        ks = face.k * face.s
        n = act.shape[1]
        eye = np.eye(n) if steps else np.zeros((0, 0))
        cols = [ks[:, None] * act * eye[j] for j in range(n)] if steps else []
        kc = cvec = None
        if face.c is not None:
            kc = face.k[:, None] * face.c
            cvec = kc * act
            cols.append(cvec)
        g0 = np.where(face.has_demand, face.g, 0.0)
        if not steps:
            none = np.zeros((0, 0, 0))
            return cls(face, act, g0, face.k[:, None], ks[:, None], kc, cvec, none, none, none, eye)
        return cls(face, act, g0, face.k[:, None], ks[:, None], kc, cvec,
                   np.stack(cols, axis=2), act[:, :, None] * act[:, None, :], (1.0 - act)[:, :, None] * eye, eye)


def _slacks(p: _Prep, x: FloatArray) -> _Slacks:
    face = p.face
    u = (face.a * x).sum(axis=1)
    demand = np.where(face.has_demand, u - p.g0, 1.0)
    # a type with no GPUs (all its nodes down) has no variables: its capacity row is left out (slack 1)
    cap = np.where(face.capacities > 0, face.capacities - (p.ks_col * x).sum(axis=0), 1.0)
    glob = float((p.kc * x).sum() - face.c_floor) if p.kc is not None else 1.0
    return _Slacks(np.where(face.active, x, 1.0), 1.0 - x.sum(axis=1), demand, cap, glob, u)


def _feasible(sl: _Slacks) -> bool:
    return bool((sl.x > 0).all() and (sl.row > 0).all() and (sl.demand > 0).all() and (sl.cap > 0).all()
                and sl.glob > 0)


def _barrier(face: Face, sl: _Slacks) -> float:
    alpha = 2.0 if face.socp else 1.0
    per_row = np.log(sl.x).sum(axis=1) + np.log(sl.row) + alpha * np.log(sl.demand) * face.has_demand
    if face.socp:
        per_row = per_row - np.log(np.where(face.has_demand, sl.u, 1.0))
    return float(-(face.k * per_row).sum() - np.log(sl.cap).sum() - np.log(sl.glob))


def _newton_step(p: _Prep, sl: _Slacks) -> tuple[FloatArray, float]:
    """Newton direction of the barrier at the point of ``sl`` and the squared Newton decrement.

    Per row the Hessian is ``k (diag(1/x^2) + 11^T / r^2 + quad a a^T)`` (n x n, positive definite,
    solved by a batched Cholesky factorization: a closed-form Woodbury inverse loses too much
    precision next to the boundary, and LAPACK's result depends on the CPU); the capacity rows and
    the global floor couple the rows (Woodbury on r = n or n + 1 columns).
    """
    face, act = p.face, p.act
    inv_x = act / sl.x
    inv_d = face.has_demand / sl.demand
    lin, quad = inv_d, inv_d**2
    if face.socp:
        inv_u = face.has_demand / np.where(face.has_demand, sl.u, 1.0)
        lin, quad = 2.0 * inv_d - inv_u, 2.0 * quad - inv_u**2
    grad = p.k_col * (-inv_x + (1.0 / sl.row)[:, None] * act - lin[:, None] * face.a)
    grad += p.ks_col * (1.0 / sl.cap)[None, :] * act
    hess = p.k_col[:, :, None] * (inv_x[:, :, None] ** 2 * p.eye + (1.0 / sl.row**2)[:, None, None] * p.actact
                                  + quad[:, None, None] * face.a[:, :, None] * face.a[:, None, :])
    hess += p.fill
    dcoef = 1.0 / sl.cap**2
    if p.cvec is not None:
        grad -= p.cvec / sl.glob
        dcoef = np.append(dcoef, 1.0 / sl.glob**2)
    v = p.v
    sol = cholesky_solve(hess, np.concatenate([-grad[:, :, None], v], axis=2))
    b_g, b_v = sol[:, :, 0], sol[:, :, 1:]
    small = np.diag(1.0 / dcoef) + _running_sum(v[:, :, :, None] * b_v[:, :, None, :])
    w = cholesky_solve(small[None], _running_sum(v * b_g[:, :, None])[None])[0]
    dx = (b_g - _two_lanes(b_v * w)) * act
    return dx, float(-(grad * dx).sum())


def _running_sum(terms: FloatArray) -> FloatArray:
    """``terms.sum(axis=(0, 1))`` added in index order (what ``einsum("mnr,mnq->rq")`` did here)."""
    out: FloatArray = np.cumsum(terms.reshape((-1, *terms.shape[2:])), axis=0)[-1]
    return out


def _two_lanes(prod: FloatArray) -> FloatArray:
    """``prod.sum(axis=2)`` in the order of ``einsum("mnr,r->mn")`` (what this code called before):
    NumPy builds its einsum kernels for the x86-64 baseline, two lanes of multiply-then-add, blocks
    of 8 added last to first, then pairs, then the two lanes, then 0.0 plus that."""
    r = prod.shape[2]
    l0, l1 = np.zeros(prod.shape[:2]), np.zeros(prod.shape[:2])
    i = 0
    while r - i >= 8:
        a0, a1 = prod[:, :, i + 6] + l0, prod[:, :, i + 7] + l1
        a0, a1 = prod[:, :, i + 4] + a0, prod[:, :, i + 5] + a1
        a0, a1 = prod[:, :, i + 2] + a0, prod[:, :, i + 3] + a1
        l0, l1 = prod[:, :, i] + a0, prod[:, :, i + 1] + a1
        i += 8
    while i < r:
        l0 = prod[:, :, i] + l0
        l1 = (prod[:, :, i + 1] if i + 1 < r else 0.0) + l1
        i += 2
    out: FloatArray = 0.0 + (l0 + l1)
    return out


def _max_step(p: _Prep, dx: FloatArray, sl: _Slacks) -> float:
    """Largest step keeping every slack positive (times 0.99), capped at 1."""
    face = p.face
    neg = dx < 0
    ratios = [np.where(face.active & neg, sl.x / np.where(neg, -dx, 1.0), np.inf).min(initial=np.inf)]
    drow = dx.sum(axis=1)
    ratios.append(np.where(drow > 0, sl.row / np.where(drow > 0, drow, 1.0), np.inf).min(initial=np.inf))
    du = (face.a * dx).sum(axis=1)
    ratios.append(np.where(face.has_demand & (du < 0), sl.demand / np.where(du < 0, -du, 1.0), np.inf)
                  .min(initial=np.inf))
    dcap = (p.ks_col * dx).sum(axis=0)
    ratios.append(np.where(dcap > 0, sl.cap / np.where(dcap > 0, dcap, 1.0), np.inf).min(initial=np.inf))
    if p.kc is not None:
        dg = float((p.kc * dx).sum())
        if dg < 0:
            ratios.append(sl.glob / -dg)
    return float(min(1.0, 0.99 * min(ratios)))


def analytic_center(face: Face, x0: FloatArray, centering: Centering | None = None) -> FloatArray:
    """Maximize the log-barrier of ``face`` from the strictly feasible ``x0`` (damped Newton).

    Stops at a Newton decrement of ``_DECREMENT_TOL`` or once quadratic
    convergence stalls at round-off (decrement below ``_STALL_DECREMENT`` and
    no longer shrinking): every slack is then within ~0.1 % of its optimum.
    Runs the compiled kernels of ``center_compiled`` (the same point to the bit)
    where they cover the face, Numba is installed and ``centering`` has
    counted its ``after`` faces already, else :func:`center_numpy`.
    """
    jit = compiled_for(face, centering)
    return center_numpy(face, x0) if jit is None else cast(FloatArray, jit.analytic_center(face, x0))


#: Centerings a policy runs in NumPy before it loads the kernels: importing Numba, loading the
#: compiled kernels from its cache and checking them take 0.4-0.8 s, what 130-250 centerings of the
#: steady-state workload save (docs/results.md, "Simulator speed"); the bundled traces' runs (3-31
#: re-solves) never pay it.
JIT_AFTER = 128


class Centering:
    """When one policy's centerings run compiled (after ``after`` faces, or at once if told to expect
    many): a Gavel policy owns one and hands it to every centering (``Inputs.centering``; None: NumPy).
    The point is the same to the bit either way, only the time differs."""

    __slots__ = ("after", "done")

    def __init__(self, after: int = JIT_AFTER) -> None:
        self.after, self.done = after, 0

    def expect_many(self) -> None:
        """A long run: load the kernels now, not after ``after`` NumPy centerings (6 ms, not 0.4)."""
        self.done = max(self.done, self.after)

    def compiled_for(self, face: Face) -> ModuleType | None:
        """The kernels where in use and covering ``face``, else None (one centering counted)."""
        if self.done < self.after:
            self.done += 1
            return None
        jit = _load_kernels()
        return jit if jit is not None and jit.fits(face) else None


def compiled_for(face: Face, centering: Centering | None) -> ModuleType | None:
    """``centering.compiled_for(face)``; None (NumPy) without a centering."""
    return None if centering is None else centering.compiled_for(face)


def expect_many(policy: object = None) -> None:
    """Many centerings are coming for ``policy`` (a Gavel policy's ``centering``; others: nothing)."""
    centering = getattr(policy, "centering", None)
    if isinstance(centering, Centering):
        centering.expect_many()


@functools.cache
def _load_kernels() -> ModuleType | None:
    """The kernels, once they have centered a small face to the bit as NumPy does; None without
    Numba, with ``HADAR_NO_JIT`` set, or where they fail to compile, cache or agree (NumPy then)."""
    if os.environ.get("HADAR_NO_JIT"):
        return None
    try:
        from hadar.policies.gavel import center_compiled

        rows = np.arange(1.0, 4.0)
        face = Face(np.outer(rows, [1.0, 0.5, 2.0]), 0.02 * rows, rows, np.ones(3), np.array([2.0, 0.0, 3.0]),
                    np.array([[True, False, True], [True, False, True], [False, False, True]]))
        x0 = interior_point(face)
        x_opt = np.where(face.active, 0.25, 0.0)
        agrees = (center_compiled.analytic_center(face, x0).tobytes() == center_numpy(face, x0).tobytes()
                  and center_compiled.center_face(face, x_opt).tobytes()
                  == center_numpy(face, blend_start(face, x_opt)).tobytes())
    except Exception as e:  # no Numba, or it cannot compile or cache here: the NumPy code, same results
        log.debug("centering kernels not used: %s", e)
        return None
    if not agrees:
        log.warning("centering kernels disagree with NumPy on this machine; using NumPy")
        return None
    return center_compiled


def center_numpy(face: Face, x0: FloatArray) -> FloatArray:
    """:func:`analytic_center` in NumPy (the reference the kernels are tested against)."""
    p = _Prep.of(face)
    x = np.where(face.active, x0, 0.0)
    sl = _slacks(p, x)
    if not _feasible(sl):
        raise SolverError("centering: the starting point is not strictly inside the face (numerical trouble)")
    f, last_dec = _barrier(face, sl), np.inf
    for _ in range(_MAX_NEWTON):
        dx, dec = _newton_step(p, sl)
        if dec / 2 <= _DECREMENT_TOL or (dec <= _STALL_DECREMENT and dec > 0.25 * last_dec):
            break
        last_dec = dec
        t = _max_step(p, dx, sl)
        while t > 1e-12:
            cand = _slacks(p, x + t * dx)
            if _feasible(cand):
                fc = _barrier(face, cand)
                if fc <= f - 0.25 * t * dec:
                    break
            t *= 0.5
        else:
            break  # no progress possible at double precision
        x, sl, f = x + t * dx, cand, fc
    else:
        log.debug("centering stopped after %d Newton steps (decrement %.2e)", _MAX_NEWTON, dec)
    return x


def interior_point(face: Face) -> FloatArray:
    """A point strictly inside the base constraints (half capacity, rows <= 1/2)."""
    act = face.active.astype(float)
    load = ((face.k * face.s)[:, None] * act).sum(axis=0)
    per_type = np.where(load > 0, 0.5 * face.capacities / np.where(load > 0, load, 1.0), 0.0)
    x = act * per_type[None, :]
    out: FloatArray = x / np.maximum(1.0, 2.0 * x.sum(axis=1))[:, None]
    return out


def repair(face: Face, x: FloatArray) -> FloatArray:
    """Project a solver point into the base constraints (clips tolerance-level violations)."""
    x = np.where(face.active, np.clip(x, 0.0, None), 0.0)
    x = x / np.maximum(1.0, x.sum(axis=1))[:, None]
    used = ((face.k * face.s)[:, None] * x).sum(axis=0)
    scale = np.where(used > face.capacities, face.capacities / np.where(used > 0, used, 1.0), 1.0)
    return x * scale[None, :]


def blend_start(face: Face, x_opt: FloatArray) -> FloatArray:
    """A strictly feasible start near ``x_opt`` (a solver point on the face, before fattening)."""
    xv = repair(face, x_opt)
    xi = interior_point(face)
    prep = _Prep.of(face, steps=False)
    sv, si = _slacks(prep, xv), _slacks(prep, xi)
    theta = 0.5
    pairs = [(sv.demand[face.has_demand], si.demand[face.has_demand])]
    if face.c is not None:
        pairs.append((np.array([sv.glob]), np.array([si.glob])))
    for a, b in pairs:
        worse = b < a
        if worse.any():
            frac = a[worse] / (a[worse] - b[worse])
            theta = min(theta, 0.5 * float(frac.min()))
    for _ in range(60):
        x0 = (1.0 - theta) * xv + theta * xi
        if _feasible(_slacks(prep, x0)):
            return x0
        theta *= 0.5
    raise SolverError("centering: found no strictly feasible start (the face is empty at this tolerance)")


def center_face(face: Face, x_opt: FloatArray, centering: Centering | None = None) -> FloatArray:
    """Analytic center of ``face`` starting next to the solver point ``x_opt`` (:func:`blend_start`,
    then :func:`analytic_center`; both compiled where :func:`analytic_center` would be)."""
    if face.a.shape[0] == 0:
        return np.zeros(face.a.shape)
    jit = compiled_for(face, centering)
    if jit is None:
        return center_numpy(face, blend_start(face, x_opt))
    return cast(FloatArray, jit.center_face(face, x_opt))
