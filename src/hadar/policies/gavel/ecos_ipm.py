"""A primal-dual interior-point method for LPs and SOCPs that follows ECOS 2.0.10 step by step.

Gavel solves its policies with cvxpy + ECOS. Where the optimal set is large
(the makespan feasibility problem has no objective at all; min-max and
max-sum problems have free coordinates) the allocation Gavel uses is simply
the iterate at which ECOS's stopping test first passes. To reproduce Gavel we
therefore follow the same iterates, not just any optimal point.

Problem (ECOS's form)::

    minimize c'x  s.t.  A x = b,  G x + s = h,  s in K = R^l_+ x Q^{q_1} x ... x Q^{q_k}

The algorithm (Domahidi, Chu, Boyd: "ECOS: An SOCP solver for embedded
systems", ECC 2013; Vandenberghe: "The CVXOPT linear and quadratic cone
program solvers", 2010), written from those descriptions and checked against
ECOS's per-iteration log on the Gavel formulations:

* Ruiz equilibration, 3 passes: rows of ``A`` and ``G`` and columns of
  ``[A; G]`` divided by the square root of their largest magnitude (a
  second-order cone's rows share the sum of their row maxima; norms below
  1e-6 are left alone); ``b``, ``h``, ``c`` scaled accordingly.
* Homogeneous self-dual embedding (tau, kappa), initialized at tau = kappa = 1
  with the least-squares primal point (min ||G x - h|| s.t. A x = b) and
  least-norm dual point (min ||z|| s.t. G'z + A'y + c = 0), each shifted into
  the cone by ``(1 + max(-0.99, largest violation)) e``.
* Nesterov-Todd scaling ``W``; Mehrotra predictor-corrector: affine step,
  ``sigma = clip((1 - alpha_aff)^3, 1e-4, 1)``, combined direction with the
  second-order correction, step = 0.99 x the largest step to the cone
  boundary, itself capped to [1e-6, 0.999].
* Stopping rules, relative residual definitions, "reduced accuracy" fallback
  (feastol 1e-4, abstol/reltol 5e-5), best-iterate bookkeeping and the
  safeguards (primal residual growing 500-fold, negative gap, minimum step).
* The KKT systems are ECOS's: each second-order cone's scaling in ECOS's
  sparse expanded form (two extra rows), ECOS's static regularization
  (7e-8) in the factored matrix, and ECOS's iterative refinement (up to 9
  steps, error measured against ECOS's residual matrix, a step undone when it
  increases the error). This matters: on feasibility problems (no objective)
  the regularization, not the data, decides the direction in the free
  subspace, so an exact KKT solve would wander off ECOS's path.

Agreement with ECOS 2.0.10 (cvxpy 1.5.4's data): identical per-iteration log
and iteration count on every instance tried; returned ``x`` equal to 1e-13
on LPs (max-sum, makespan feasibility; up to 512 jobs). On the finish-time
SOCPs, whose optimal faces are degenerate, round-off is amplified ~100x per
late iteration and ``x`` agrees to 1e-8..1e-6.

Known differences: we factor with QDLDL (AMD ordering, LDL' without
pivoting, as ECOS does, but not ECOS's code), so round-off differs;
refinement decisions taken at round-off level (stop or take a second step)
can then differ too. Between identical jobs, ECOS's own round-off (~1e-9)
decides which is larger; we cannot reproduce that bit for bit. We solve in
Gavel's matrix order (cvx_forms.gavel_order), which on the bundled traces
breaks most of those ties as ECOS does, but nothing guarantees it.
Exponential cones and ECOS's dynamic regularization (which only acts on
pivots below 1e-13) are not implemented.

Determinism: every operation is CPU-independent (``hadar.numeric``: no
BLAS, no SuperLU), so the iterates, and the ties they break, are the same
bits on every machine. With SuperLU and BLAS dot products the finish-time
SOCPs' points differed by up to 7e-3 between OpenBLAS kernels of one CPU,
and a simulation's makespan by up to 25 %.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from hadar.arrays import FloatArray
from hadar.numeric import dot, norm
from hadar.policies.gavel.ecos_cones import GAMMA, STEPMIN, ConeOps, Cones, Scaling
from hadar.policies.gavel.ecos_kkt import Kkt, equilibrate

# ECOS 2.0.10 defaults (the cone and KKT ones live in ecos_cones.py and ecos_kkt.py).
MAXIT = 100
FEASTOL = ABSTOL = RELTOL = 1e-8
FTOL_INACC, ATOL_INACC, RTOL_INACC = 1e-4, 5e-5, 5e-5
SIGMAMIN, SIGMAMAX = 1e-4, 1.0
SAFEGUARD = 500.0

OPTIMAL, INFEASIBLE, UNBOUNDED = "optimal", "infeasible", "unbounded"
INACCURATE = "_inaccurate"
#: The residuals and costs of an iterate kept in ``ConicResult.log`` (ECOS's per-iteration log).
LOG_KEYS = ("pcost", "dcost", "gap", "pres", "dres", "kapovert", "mu")


@dataclass(frozen=True, slots=True)
class ConicResult:
    """Solution in the caller's (unequilibrated) units; ``status`` is cvxpy's name for ECOS's exit code."""

    x: FloatArray
    y: FloatArray
    z: FloatArray
    s: FloatArray
    status: str
    iterations: int
    log: tuple[dict[str, float], ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class _Problem:
    """The equilibrated problem, and what every iteration reads of it."""

    c: FloatArray
    b: FloatArray
    h: FloatArray
    a: sp.csc_matrix
    g: sp.csc_matrix
    at: sp.csr_matrix
    gt: sp.csr_matrix
    resx0: float
    resy0: float
    resz0: float
    degree: int

    @property
    def p(self) -> int:
        return int(self.a.shape[0])


@dataclass(frozen=True, slots=True)
class _Point:
    """An iterate of the homogeneous self-dual embedding."""

    x: FloatArray
    y: FloatArray
    z: FloatArray
    s: FloatArray
    tau: float
    kap: float


@dataclass(frozen=True, slots=True)
class _Stats:
    """ECOS's residuals, costs and stopping quantities at one iterate."""

    rx: FloatArray
    ry: FloatArray
    rz: FloatArray
    rt: float
    cx: float
    by: float
    hz: float
    gap: float
    mu: float
    pcost: float
    dcost: float
    relgap: float
    pres: float
    dres: float
    pinfres: float
    dinfres: float
    kapovert: float
    tau: float
    kap: float


@dataclass(frozen=True, slots=True)
class _Best:
    """The best iterate so far (ECOS falls back to it when it stops early)."""

    point: _Point
    st: _Stats


def _status(code: str, mode_inacc: bool) -> str:
    return code + (INACCURATE if mode_inacc else "")


def solve_conic(c: FloatArray, g: sp.spmatrix, h: FloatArray, dims: Mapping[str, Any], a: sp.spmatrix | None = None,
                b: FloatArray | None = None, *, max_iters: int = MAXIT, keep_log: bool = False) -> ConicResult:
    """Solve ``min c'x s.t. A x = b, G x + s = h, s in K`` the way ECOS 2.0.10 does.

    ``dims``: ``{"l": size of the nonnegative orthant, "q": [SOC sizes]}`` (rows of ``G`` in that order).
    """
    prob, cones, (xe, ae, ge) = _prepare(c, g, h, dims, a, b)
    ops = ConeOps(cones)
    kkt = Kkt(prob.a, prob.g, cones)
    start = _initial_point(prob, ops, kkt)
    pt, status, it, log = _iterate(prob, ops, kkt, start, max_iters, keep_log)
    tau = pt.tau
    return ConicResult(x=pt.x / (xe * tau), y=pt.y / (ae * tau), z=pt.z / (ge * tau), s=pt.s * (ge / tau),
                       status=status, iterations=it, log=tuple(log))


def _prepare(c: FloatArray, g: sp.spmatrix, h: FloatArray, dims: Mapping[str, Any], a: sp.spmatrix | None,
             b: FloatArray | None) -> tuple[_Problem, Cones, tuple[FloatArray, FloatArray, FloatArray]]:
    """The problem in ECOS's equilibrated units, its cones and the scalings (x, A rows, G rows)."""
    c = np.asarray(c, dtype=float).copy()
    h = np.asarray(h, dtype=float).copy()
    g = sp.csc_matrix(g, dtype=float)
    n = c.size
    if a is None:
        a = sp.csc_matrix((0, n))
        b = np.zeros(0)
    a = sp.csc_matrix(a, dtype=float)
    b = np.asarray(b, dtype=float).copy()
    cones = Cones(int(dims.get("l", 0)), np.asarray(dims.get("q", []), dtype=int))
    if cones.m != g.shape[0]:
        raise ValueError(f"dims describe {cones.m} rows, G has {g.shape[0]}")

    xe, ae, ge = equilibrate(a, g, cones)
    a = (sp.diags(1.0 / ae) @ a @ sp.diags(1.0 / xe)).tocsc()
    g = (sp.diags(1.0 / ge) @ g @ sp.diags(1.0 / xe)).tocsc()
    b, h, c = b / ae, h / ge, c / xe
    prob = _Problem(c=c, b=b, h=h, a=a, g=g, at=a.T.tocsr(), gt=g.T.tocsr(), resx0=max(1.0, float(norm(c))),
                    resy0=max(1.0, float(norm(b))), resz0=max(1.0, float(norm(h))), degree=cones.degree)
    return prob, cones, (xe, ae, ge)


def _initial_point(prob: _Problem, ops: ConeOps, kkt: Kkt) -> _Point:
    """ECOS's start: least-squares primal and least-norm dual points, shifted into the cone; tau = kappa = 1."""
    n, p, m = kkt.n, kkt.p, kkt.m
    kkt.factor_init()
    x, _, z1 = kkt.solve(np.concatenate([np.zeros(n), prob.b, prob.h]))
    s = ops.bring_to_cone(-z1)
    _, y, z2 = kkt.solve(np.concatenate([-prob.c, np.zeros(p), np.zeros(m)]))
    z = ops.bring_to_cone(z2)
    return _Point(x, y, z, s, 1.0, 1.0)


def _stats(prob: _Problem, pt: _Point) -> _Stats:
    """Residuals and stopping quantities of ``pt``, computed as ECOS computes them."""
    c, b, h, p = prob.c, prob.b, prob.h, prob.p
    x, y, z, s, tau, kap = pt.x, pt.y, pt.z, pt.s, pt.tau, pt.kap
    rx0 = -(prob.at @ y) - prob.gt @ z if p else -(prob.gt @ z)
    hresx = float(norm(rx0))
    rx = rx0 - tau * c
    ry0 = prob.a @ x
    hresy = float(norm(ry0)) if p else 0.0
    ry = ry0 - tau * b
    rz0 = prob.g @ x + s
    hresz = float(norm(rz0))
    rz = rz0 - tau * h
    cx, by, hz = float(dot(c, x)), float(dot(b, y)) if p else 0.0, float(dot(h, z))
    rt = kap + cx + by + hz
    nx, ny, ns, nz = (float(norm(v)) for v in (x, y, s, z))
    gap = float(dot(s, z))
    mu = (gap + kap * tau) / (prob.degree + 1)
    pcost, dcost = cx / tau, -(hz + by) / tau
    relgap = gap / -pcost if pcost < 0 else (gap / dcost if dcost > 0 else np.nan)
    nry = float(norm(ry)) / max(prob.resy0 + nx, 1.0) if p else 0.0
    nrz = float(norm(rz)) / max(prob.resz0 + nx + ns, 1.0)
    pres = max(nry, nrz) / tau
    dres = float(norm(rx)) / max(prob.resx0 + ny + nz, 1.0) / tau
    nyz = max(ny + nz, 1.0)
    pinfres = hresx / nyz if (hz + by) / nyz < -RELTOL else np.nan
    dinfres = max(hresy / max(nx, 1.0), hresz / max(nx + ns, 1.0)) if cx / max(nx, 1.0) < -RELTOL else np.nan
    return _Stats(rx=rx, ry=ry, rz=rz, rt=rt, cx=cx, by=by, hz=hz, gap=gap, mu=mu, pcost=pcost, dcost=dcost,
                  relgap=relgap, pres=pres, dres=dres, pinfres=pinfres, dinfres=dinfres, kapovert=kap / tau,
                  tau=tau, kap=kap)


def _check(st: _Stats, inacc: bool) -> str | None:
    """ECOS's exit test (at full or at reduced accuracy): a status, or None to go on."""
    feastol, abstol, reltol = (FTOL_INACC, ATOL_INACC, RTOL_INACC) if inacc else (FEASTOL, ABSTOL, RELTOL)
    if ((-st.cx > 0 or -st.by - st.hz >= -abstol) and st.pres < feastol and st.dres < feastol
            and (st.gap < abstol or st.relgap < reltol)):
        return _status(OPTIMAL, inacc)
    if st.dinfres < feastol:
        return _status(UNBOUNDED, inacc)
    if st.pinfres < feastol or (st.tau < FEASTOL and st.kap < FEASTOL and st.pinfres < FEASTOL):
        return _status(INFEASIBLE, inacc)
    return None


def _better(a: _Stats, b: _Stats) -> bool:
    """ECOS's "is this iterate better than the best one" test."""
    # ECOS compares "pinfres != NAN", which is always true in C; kept as is.
    if a.kapovert > 1:
        return bool(0 < a.gap < b.gap and 0 < a.pinfres < b.pres and 0 < a.mu < b.mu)
    return bool(0 < a.gap < b.gap and 0 < a.pres < b.pres and 0 < a.dres < b.dres
                and 0 < a.kapovert < b.kapovert and 0 < a.mu < b.mu)


def _fallback(best: _Best | None, default: str) -> str:
    """The status when ECOS stops early: the best iterate's at reduced accuracy, else ``default``."""
    return (_check(best.st, True) if best is not None else None) or default


def _iterate(prob: _Problem, ops: ConeOps, kkt: Kkt, pt: _Point, max_iters: int,
             keep_log: bool) -> tuple[_Point, str, int, list[dict[str, float]]]:
    """ECOS's main loop from ``pt``: (the point returned, status, iterations, log)."""
    log: list[dict[str, float]] = []
    best: _Best | None = None
    pres_prev = np.nan
    step = 0.0
    status = "max_iters"
    it = 0
    restored: _Best | None = None
    for it in range(max_iters + 1):
        st = _stats(prob, pt)
        if keep_log:
            log.append({k: getattr(st, k) for k in LOG_KEYS} | {"step": step, "iter": it})
        if it > 0 and (st.pres > SAFEGUARD * pres_prev or st.gap < 0):
            restored = best
            status = _fallback(best, "numerics")
            break
        pres_prev = st.pres
        done = _check(st, False)
        if done is not None:
            status = done
            break
        if it > 0 and step == STEPMIN * GAMMA:
            restored = best
            status = _fallback(best, "numerics")
            break
        if it == max_iters:
            if best is not None and not _better(st, best.st):
                restored = best
                status = _check(best.st, True) or "max_iters"
            else:
                status = _check(st, True) or "max_iters"
            break
        if best is None or _better(st, best.st):  # best is None only at it = 0
            best = _Best(pt, st)
        sc = ops.scaling(pt.s, pt.z)
        if sc is None:
            restored = best
            status = _fallback(best, "numerics")
            break
        pt, step = _step(prob, ops, kkt, pt, st, sc)
    return (restored.point if restored is not None else pt), status, it, log


def _step(prob: _Problem, ops: ConeOps, kkt: Kkt, pt: _Point, st: _Stats, sc: Scaling) -> tuple[_Point, float]:
    """One Mehrotra predictor-corrector step from ``pt``: (the next point, the step length)."""
    c, b, h = prob.c, prob.b, prob.h
    x, y, z, s, tau, kap = pt.x, pt.y, pt.z, pt.s, pt.tau, pt.kap
    lam = ops.scale(sc, z)
    kkt.factor(sc)
    rx, ry, rz, rt, mu = st.rx, st.ry, st.rz, st.rt, st.mu
    dx1, dy1, dz1 = kkt.solve(np.concatenate([-c, b, h]))
    dx2, dy2, dz2 = kkt.solve(np.concatenate([rx, -ry, s - rz]))
    dtau_denom = kap / tau - (dot(c, dx1) + dot(b, dy1) + dot(h, dz1))
    dtauaff = (rt - kap + dot(c, dx2) + dot(b, dy2) + dot(h, dz2)) / dtau_denom
    dzaff = dz2 + dtauaff * dz1
    w_dzaff = ops.scale(sc, dzaff)
    dsaff_w = -w_dzaff - lam
    dkapaff = -kap - kap / tau * dtauaff
    step_aff = ops.line_search(lam, dsaff_w, w_dzaff, tau, dtauaff, kap, dkapaff)
    sigma = min(max((1.0 - step_aff) ** 3, SIGMAMIN), SIGMAMAX)

    ds1 = ops.add_e(ops.product(lam, lam) + ops.product(dsaff_w, w_dzaff), -sigma * mu)
    lam_ds = ops.division(lam, ds1)
    w_lam_ds = ops.scale(sc, lam_ds)
    om = 1.0 - sigma
    dx, dy, dz = kkt.solve(np.concatenate([om * rx, -om * ry, -om * rz + w_lam_ds]))
    bkap = kap * tau + dkapaff * dtauaff - sigma * mu
    dtau = (om * rt - bkap / tau + dot(c, dx) + dot(b, dy) + dot(h, dz)) / dtau_denom
    dx, dy, dz = dx + dtau * dx1, dy + dtau * dy1, dz + dtau * dz1
    w_dz = ops.scale(sc, dz)
    ds_w = -(lam_ds + w_dz)
    dkap = -(bkap + kap * dtau) / tau
    step = ops.line_search(lam, ds_w, w_dz, tau, dtau, kap, dkap) * GAMMA
    ds = ops.scale(sc, ds_w)
    nxt = _Point(x + step * dx, y + step * dy, z + step * dz, s + step * ds, tau + step * dtau, kap + step * dkap)
    return nxt, step
