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

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from hadar.numeric import SparseLDL, dot, norm

# ECOS 2.0.10 defaults.
MAXIT = 100
FEASTOL = ABSTOL = RELTOL = 1e-8
FTOL_INACC, ATOL_INACC, RTOL_INACC = 1e-4, 5e-5, 5e-5
GAMMA = 0.99
DELTASTAT = 7e-8
EPS = 1e-13
NITREF = 9
IRERRFACT = 6.0
LINSYSACC = 1e-14
SIGMAMIN, SIGMAMAX = 1e-4, 1.0
STEPMIN, STEPMAX = 1e-6, 0.999
SAFEGUARD = 500.0
EQUIL_ITERS = 3

OPTIMAL, INFEASIBLE, UNBOUNDED = "optimal", "infeasible", "unbounded"
INACCURATE = "_inaccurate"


@dataclass(frozen=True, slots=True)
class ConicResult:
    """Solution in the caller's (unequilibrated) units; ``status`` is cvxpy's name for ECOS's exit code."""

    x: np.ndarray
    y: np.ndarray
    z: np.ndarray
    s: np.ndarray
    status: str
    iterations: int
    log: tuple[dict[str, float], ...] = field(default=(), repr=False)


def _safediv(x: np.ndarray | float, y: np.ndarray | float) -> np.ndarray:
    y = np.asarray(y, dtype=float)
    return np.asarray(x, dtype=float) / np.where(y < EPS, EPS, y)


@dataclass(frozen=True, slots=True)
class _Cones:
    """Index bookkeeping for R^l_+ x SOCs laid out one after the other."""

    l: int
    sizes: np.ndarray  # (k,) SOC sizes

    @property
    def m(self) -> int:
        return self.l + int(self.sizes.sum())

    @property
    def degree(self) -> int:
        return self.l + int(self.sizes.size)

    @property
    def heads(self) -> np.ndarray:
        """Index of each SOC's first entry."""
        if self.sizes.size == 0:
            return np.zeros(0, dtype=int)
        return self.l + np.concatenate(([0], np.cumsum(self.sizes)[:-1])).astype(int)

    @property
    def owner(self) -> np.ndarray:
        """For every SOC entry (after the LP part): the cone it belongs to."""
        return np.repeat(np.arange(self.sizes.size), self.sizes)

    @property
    def tails(self) -> np.ndarray:
        """Boolean mask over SOC entries: True except at each cone's head."""
        mask = np.ones(int(self.sizes.sum()), dtype=bool)
        mask[self.heads - self.l] = False
        return mask

    def segsum(self, v: np.ndarray) -> np.ndarray:
        """Per-cone sums of an array over the SOC entries."""
        if self.sizes.size == 0:
            return np.zeros(0)
        return np.add.reduceat(v, self.heads - self.l)


@dataclass(slots=True)
class _Scaling:
    """Nesterov-Todd scaling ``W`` at the current (s, z)."""

    v: np.ndarray  # LP: s / z  (W^2)
    w: np.ndarray  # LP: sqrt(v)
    eta: np.ndarray  # SOC (k,)
    a: np.ndarray  # SOC (k,)
    q: np.ndarray  # SOC: over all SOC entries, 0 at heads
    qq: np.ndarray  # SOC (k,): q'q
    d1: np.ndarray  # SOC (k,): W^2 = eta^2 (diag(d1, 1, .., 1) + u u' - v v'), u = (u0, u1 q), v = (0, v1 q)
    u0: np.ndarray
    u1: np.ndarray
    v1: np.ndarray


class _ConeOps:
    def __init__(self, cones: _Cones) -> None:
        self.k = cones
        self.l = cones.l
        self.heads = cones.heads
        self.owner = cones.owner
        self.tails = cones.tails
        self.rel_heads = self.heads - self.l

    # --- cone algebra (SOC parts vectorized over all cones) ---
    def _soc_split(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(head values per cone, tail vector with zeros at heads) of the SOC part."""
        us = u[self.l:]
        tail = np.where(self.tails, us, 0.0)
        return us[self.rel_heads], tail

    def soc_res(self, u: np.ndarray) -> np.ndarray:
        u0, u1 = self._soc_split(u)
        return u0 * u0 - self.k.segsum(u1 * u1)

    def bring_to_cone(self, r: np.ndarray) -> np.ndarray:
        alpha = -GAMMA
        lp = r[:self.l]
        if lp.size:
            viol = lp[lp <= 0]
            if viol.size:
                alpha = max(alpha, float((-viol).max()))
        if self.heads.size:
            u0, u1 = self._soc_split(r)
            cres = u0 - np.sqrt(self.k.segsum(u1 * u1))
            viol = cres[cres <= 0]
            if viol.size:
                alpha = max(alpha, float((-viol).max()))
        alpha += 1.0
        s = r.copy()
        s[:self.l] += alpha
        s[self.heads] += alpha
        return s

    def scaling(self, s: np.ndarray, z: np.ndarray) -> _Scaling | None:
        v = _safediv(s[:self.l], z[:self.l])
        w = np.sqrt(v)
        if not self.heads.size:
            e = np.zeros(0)
            return _Scaling(v, w, e, e, e, e, e, e, e, e)
        sres, zres = self.soc_res(s), self.soc_res(z)
        if (sres <= 0).any() or (zres <= 0).any():
            return None
        snorm, znorm = np.sqrt(sres), np.sqrt(zres)
        sbar = _safediv(s[self.l:], snorm[self.owner])
        zbar = _safediv(z[self.l:], znorm[self.owner])
        eta2 = _safediv(snorm, znorm)
        gamma = np.sqrt(0.5 * (1.0 + self.k.segsum(sbar * zbar)))
        half_over_gamma = _safediv(0.5, gamma)
        a = half_over_gamma * (sbar[self.rel_heads] + zbar[self.rel_heads])
        q = np.where(self.tails, half_over_gamma[self.owner] * (sbar - zbar), 0.0)
        qq = self.k.segsum(q * q)
        c = 1.0 + a + _safediv(qq, 1.0 + a)
        d = 1.0 + _safediv(2.0, 1.0 + a) + _safediv(qq, (1.0 + a) ** 2)
        d1 = np.maximum(0.5 * (a * a + qq * (1.0 - _safediv(c * c, 1.0 + qq * d))), 0.0)
        u0sq = a * a + qq - d1
        c2u = _safediv(c * c, u0sq)
        if (c2u - d <= 0).any():
            return None
        return _Scaling(v, w, np.sqrt(eta2), a, q, qq, d1, np.sqrt(u0sq), np.sqrt(c2u), np.sqrt(c2u - d))

    def scale(self, sc: _Scaling, z: np.ndarray) -> np.ndarray:
        """``W z``."""
        out = np.empty_like(z)
        out[:self.l] = sc.w * z[:self.l]
        if self.heads.size:
            z0, z1 = self._soc_split(z)
            zeta = self.k.segsum(sc.q * z1)
            factor = z0 + _safediv(zeta, 1.0 + sc.a)
            tail = sc.eta[self.owner] * (z1 + factor[self.owner] * sc.q)
            tail[self.rel_heads] = sc.eta * (sc.a * z0 + zeta)
            out[self.l:] = tail
        return out

    def product(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Jordan product ``u o v``."""
        out = u * v
        if self.heads.size:
            u0, u1 = self._soc_split(u)
            v0, v1 = self._soc_split(v)
            tail = u0[self.owner] * v1 + v0[self.owner] * u1
            tail[self.rel_heads] = self.k.segsum(u[self.l:] * v[self.l:])
            out[self.l:] = tail
        return out

    def division(self, u: np.ndarray, w: np.ndarray) -> np.ndarray:
        """``u \\ w`` (the inverse of ``u o .``)."""
        out = np.empty_like(w)
        out[:self.l] = _safediv(w[:self.l], u[:self.l])
        if self.heads.size:
            u0, u1 = self._soc_split(u)
            w0, w1 = self._soc_split(w)
            rho = u0 * u0 - self.k.segsum(u1 * u1)
            zeta = self.k.segsum(u1 * w1)
            factor = _safediv(_safediv(zeta, u0) - w0, rho)
            tail = factor[self.owner] * u1 + _safediv(w1, u0[self.owner])
            tail[self.rel_heads] = _safediv(u0 * w0 - zeta, rho)
            out[self.l:] = tail
        return out

    def add_e(self, v: np.ndarray, alpha: float) -> np.ndarray:
        out = v.copy()
        out[:self.l] += alpha
        out[self.heads] += alpha
        return out

    def line_search(self, lam: np.ndarray, ds: np.ndarray, dz: np.ndarray, tau: float, dtau: float,
                    kap: float, dkap: float) -> float:
        """Largest step keeping ``lambda + a ds`` and ``lambda + a dz`` in the cone (ECOS's rule)."""
        if self.l > 0:
            lp = lam[:self.l]
            rhomin = float((ds[:self.l] / lp).min())
            sigmamin = float((dz[:self.l] / lp).min())
            if -sigmamin > -rhomin:
                alpha = 1.0 / -sigmamin if sigmamin < 0 else 1.0 / EPS
            else:
                alpha = 1.0 / -rhomin if rhomin < 0 else 1.0 / EPS
        else:
            alpha = 10.0
        with np.errstate(divide="ignore", invalid="ignore"):
            mt = -tau / dtau
            mk = -kap / dkap
        if 0 < mt < alpha:
            alpha = mt
        if 0 < mk < alpha:
            alpha = mk
        if self.heads.size:
            l0, l1 = self._soc_split(lam)
            n2 = l0 * l0 - self.k.segsum(l1 * l1)
            ok = n2 > 0
            nrm = np.sqrt(np.where(ok, n2, 1.0))
            lbar0 = l0 / nrm
            lbar1 = l1 / nrm[self.owner]
            steps = []
            for d in (ds, dz):
                d0, d1 = self._soc_split(d)
                prod = lbar0 * d0 - self.k.segsum(lbar1 * d1)
                r0 = prod / nrm
                factor = (prod + d0) / (lbar0 + 1.0)
                r1 = (d1 - factor[self.owner] * lbar1) / nrm[self.owner]
                steps.append(np.sqrt(self.k.segsum(r1 * r1)) - r0)
            conic = np.maximum(0.0, np.maximum(steps[0], steps[1]))
            conic = conic[ok & (conic != 0)]
            if conic.size:
                alpha = min(alpha, float((1.0 / conic).min()))
        return min(max(alpha, STEPMIN), STEPMAX)


class _Kkt:
    """ECOS's KKT system ``[[0, A', G'], [A, 0, 0], [G, 0, -W^2]]`` in its sparse form.

    Unknowns ``[x; y; z; t]``: each second-order cone's ``W^2 = eta^2 (D + u u' - v v')`` is
    represented with two extra unknowns ``t`` (ECOS's expansion, kept because the static
    regularization acts on it). The factored matrix carries ECOS's static regularization
    (+delta on x, -delta on y and z, +delta on each cone's ``u`` row); iterative refinement
    measures the error against the matrix ECOS uses for its residuals, which differs from the
    factored one at initialization (z block -(1+delta) I) and in the sign of the regularization of
    each cone's last entry and of the ``u`` rows. Reproducing these details matters: where the
    problem is degenerate (feasibility problems) the regularization decides the direction.
    """

    def __init__(self, a: sp.csc_matrix, g: sp.csc_matrix, cones: _Cones) -> None:
        self.n, self.p, self.m = g.shape[1], a.shape[0], g.shape[0]
        self.cones = cones
        n, p, m = self.n, self.p, self.m
        self.k = int(cones.sizes.size)
        self.size = n + p + m + 2 * self.k
        ag = sp.vstack([a, g]).tocoo()
        self.rows = np.concatenate([ag.row + n, ag.col])
        self.cols = np.concatenate([ag.col, ag.row + n])
        self.vals = np.concatenate([ag.data, ag.data])
        # +delta or -delta in the residual's z block: ECOS flips the sign on each cone's last entry
        self.zsign = np.ones(m)
        if self.k:
            self.zsign[cones.heads + cones.sizes - 1] = -1.0
        self.t1 = n + p + m + 2 * np.arange(self.k)
        self.t2 = self.t1 + 1
        self.k_true: sp.csr_matrix | None = None
        self.lu = None
        self.ir_steps: list[int] = []

    def _assemble(self, diag_f: np.ndarray, diag_t: np.ndarray, r: np.ndarray, c: np.ndarray,
                  v: np.ndarray) -> None:
        N = self.size
        idx = np.arange(N)
        rows = np.concatenate([self.rows, r, c])
        cols = np.concatenate([self.cols, c, r])
        vals = np.concatenate([self.vals, v, v])
        self.k_true = sp.csr_matrix((np.concatenate([vals, diag_t]), (np.concatenate([rows, idx]),
                                     np.concatenate([cols, idx]))), shape=(N, N))
        k_reg = sp.csc_matrix((np.concatenate([vals, diag_f]), (np.concatenate([rows, idx]),
                               np.concatenate([cols, idx]))), shape=(N, N))
        self.lu = SparseLDL(k_reg)

    def factor_init(self) -> None:
        n, p, m = self.n, self.p, self.m
        head = np.concatenate([np.full(n, DELTASTAT), np.full(p, -DELTASTAT)])
        t_f = np.tile([-1.0, 1.0], self.k)
        diag_f = np.concatenate([head, np.full(m, -1.0), t_f])
        diag_t = np.concatenate([head, -1.0 - DELTASTAT * self.zsign, np.full(2 * self.k, -1.0)])
        e = np.zeros(0, dtype=int)
        self._assemble(diag_f, diag_t, e, e, np.zeros(0))

    def factor(self, sc: _Scaling) -> None:
        n, p, m, cones = self.n, self.p, self.m, self.cones
        head = np.concatenate([np.full(n, DELTASTAT), np.full(p, -DELTASTAT)])
        vz = np.empty(m)
        vz[:cones.l] = sc.v
        r = c = np.zeros(0, dtype=int)
        v = np.zeros(0)
        t_f = t_t = np.zeros(0)
        if self.k:
            eta2 = sc.eta ** 2
            own = cones.owner
            vz[cones.l:] = eta2[own]
            vz[cones.heads] = eta2 * sc.d1
            tails = np.nonzero(cones.tails)[0] + cones.l
            ot = own[tails - cones.l]
            qt = sc.q[tails - cones.l]
            r = n + p + np.concatenate([tails, cones.heads, tails])
            c = np.concatenate([self.t1[ot], self.t2, self.t2[ot]])
            v = -np.concatenate([eta2[ot] * sc.v1[ot] * qt, eta2 * sc.u0, eta2[ot] * sc.u1[ot] * qt])
            t_f = np.column_stack([-eta2, eta2 + DELTASTAT]).ravel()
            t_t = np.column_stack([-eta2, eta2]).ravel()
        diag_f = np.concatenate([head, -vz - DELTASTAT, t_f])
        diag_t = np.concatenate([head, -vz - DELTASTAT * self.zsign, t_t])
        self._assemble(diag_f, diag_t, r, c, v)

    def solve(self, rhs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """ECOS's refinement loop: up to 9 steps, stop below 1e-14 relative or when the error stalls."""
        assert self.lu is not None and self.k_true is not None
        rhs = np.concatenate([rhs, np.zeros(2 * self.k)])
        threshold = (1.0 + float(np.abs(rhs).max(initial=0.0))) * LINSYSACC
        sol = self.lu.solve(rhs)
        prev_err, prev_sol = 0.0, sol
        for it in range(NITREF + 1):
            err = rhs - self.k_true @ sol
            nerr = float(np.abs(err).max(initial=0.0))
            if it > 0 and nerr > prev_err:
                sol = prev_sol
                it -= 1
                break
            if it == NITREF or nerr < threshold or (it > 0 and prev_err < IRERRFACT * nerr):
                break
            prev_err, prev_sol = nerr, sol
            sol = sol + self.lu.solve(err)
        self.ir_steps.append(it)
        n, p, m = self.n, self.p, self.m
        return sol[:n], sol[n:n + p], sol[n + p:n + p + m]


def _equilibrate(a: sp.csc_matrix, g: sp.csc_matrix, cones: _Cones) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = g.shape[1]
    xe, ae, ge = np.ones(n), np.ones(a.shape[0]), np.ones(g.shape[0])
    heads_rel = cones.heads
    for _ in range(EQUIL_ITERS):
        xt = np.zeros(n)
        if a.nnz:
            xt = np.maximum(xt, abs(a).max(axis=0).toarray().ravel())
        if g.nnz:
            xt = np.maximum(xt, abs(g).max(axis=0).toarray().ravel())
        at = abs(a).max(axis=1).toarray().ravel() if a.shape[0] else np.zeros(0)
        gt = abs(g).max(axis=1).toarray().ravel() if g.shape[0] else np.zeros(0)
        if cones.sizes.size:
            tot = np.add.reduceat(gt[cones.l:], heads_rel - cones.l)
            gt[cones.l:] = tot[cones.owner]
        xt = np.where(np.abs(xt) < 1e-6, 1.0, np.sqrt(xt))
        at = np.where(np.abs(at) < 1e-6, 1.0, np.sqrt(at))
        gt = np.where(np.abs(gt) < 1e-6, 1.0, np.sqrt(gt))
        a = (sp.diags(1.0 / at) @ a @ sp.diags(1.0 / xt)).tocsc()
        g = (sp.diags(1.0 / gt) @ g @ sp.diags(1.0 / xt)).tocsc()
        xe, ae, ge = xe * xt, ae * at, ge * gt
    return xe, ae, ge


def _status(code: str, mode_inacc: bool) -> str:
    return code + (INACCURATE if mode_inacc else "")


def solve_conic(c: np.ndarray, g: sp.spmatrix, h: np.ndarray, dims: dict, a: sp.spmatrix | None = None,
                b: np.ndarray | None = None, *, max_iters: int = MAXIT, keep_log: bool = False) -> ConicResult:
    """Solve ``min c'x s.t. A x = b, G x + s = h, s in K`` the way ECOS 2.0.10 does.

    ``dims``: ``{"l": size of the nonnegative orthant, "q": [SOC sizes]}`` (rows of ``G`` in that order).
    """
    c = np.asarray(c, dtype=float).copy()
    h = np.asarray(h, dtype=float).copy()
    g = sp.csc_matrix(g, dtype=float)
    n = c.size
    if a is None:
        a = sp.csc_matrix((0, n))
        b = np.zeros(0)
    a = sp.csc_matrix(a, dtype=float)
    b = np.asarray(b, dtype=float).copy()
    cones = _Cones(int(dims.get("l", 0)), np.asarray(dims.get("q", []), dtype=int))
    if cones.m != g.shape[0]:
        raise ValueError(f"dims describe {cones.m} rows, G has {g.shape[0]}")
    ops = _ConeOps(cones)
    p, m = a.shape[0], g.shape[0]

    xe, ae, ge = _equilibrate(a, g, cones)
    a = (sp.diags(1.0 / ae) @ a @ sp.diags(1.0 / xe)).tocsc()
    g = (sp.diags(1.0 / ge) @ g @ sp.diags(1.0 / xe)).tocsc()
    b, h, c = b / ae, h / ge, c / xe
    at, gt = a.T.tocsr(), g.T.tocsr()

    resx0 = max(1.0, float(norm(c)))
    resy0 = max(1.0, float(norm(b)))
    resz0 = max(1.0, float(norm(h)))
    big_d = cones.degree

    kkt = _Kkt(a, g, cones)
    kkt.factor_init()
    x, _, z1 = kkt.solve(np.concatenate([np.zeros(n), b, h]))
    s = ops.bring_to_cone(-z1)
    _, y, z2 = kkt.solve(np.concatenate([-c, np.zeros(p), np.zeros(m)]))
    z = ops.bring_to_cone(z2)
    tau = kap = 1.0

    log: list[dict[str, float]] = []
    best: dict | None = None
    pres_prev = np.nan
    step = 0.0
    status = "max_iters"
    it = 0

    def stats() -> dict:
        rx0 = -(at @ y) - gt @ z if p else -(gt @ z)
        hresx = float(norm(rx0))
        rx = rx0 - tau * c
        ry0 = a @ x
        hresy = float(norm(ry0)) if p else 0.0
        ry = ry0 - tau * b
        rz0 = g @ x + s
        hresz = float(norm(rz0))
        rz = rz0 - tau * h
        cx, by, hz = float(dot(c, x)), float(dot(b, y)) if p else 0.0, float(dot(h, z))
        rt = kap + cx + by + hz
        nx, ny, ns, nz = (float(norm(v)) for v in (x, y, s, z))
        gap = float(dot(s, z))
        mu = (gap + kap * tau) / (big_d + 1)
        pcost, dcost = cx / tau, -(hz + by) / tau
        relgap = gap / -pcost if pcost < 0 else (gap / dcost if dcost > 0 else np.nan)
        nry = float(norm(ry)) / max(resy0 + nx, 1.0) if p else 0.0
        nrz = float(norm(rz)) / max(resz0 + nx + ns, 1.0)
        pres = max(nry, nrz) / tau
        dres = float(norm(rx)) / max(resx0 + ny + nz, 1.0) / tau
        nyz = max(ny + nz, 1.0)
        pinfres = hresx / nyz if (hz + by) / nyz < -RELTOL else np.nan
        dinfres = max(hresy / max(nx, 1.0), hresz / max(nx + ns, 1.0)) if cx / max(nx, 1.0) < -RELTOL else np.nan
        return {"rx": rx, "ry": ry, "rz": rz, "rt": rt, "cx": cx, "by": by, "hz": hz, "gap": gap, "mu": mu,
                "pcost": pcost, "dcost": dcost, "relgap": relgap, "pres": pres, "dres": dres, "pinfres": pinfres,
                "dinfres": dinfres, "kapovert": kap / tau, "tau": tau, "kap": kap}

    def check(st: dict, inacc: bool) -> str | None:
        feastol, abstol, reltol = (FTOL_INACC, ATOL_INACC, RTOL_INACC) if inacc else (FEASTOL, ABSTOL, RELTOL)
        if ((-st["cx"] > 0 or -st["by"] - st["hz"] >= -abstol) and st["pres"] < feastol and st["dres"] < feastol
                and (st["gap"] < abstol or st["relgap"] < reltol)):
            return _status(OPTIMAL, inacc)
        if st["dinfres"] < feastol:
            return _status(UNBOUNDED, inacc)
        if st["pinfres"] < feastol or (st["tau"] < FEASTOL and st["kap"] < FEASTOL and st["pinfres"] < FEASTOL):
            return _status(INFEASIBLE, inacc)
        return None

    def better(A: dict, B: dict) -> bool:
        # ECOS compares "pinfres != NAN", which is always true in C; kept as is.
        if A["kapovert"] > 1:
            return bool(0 < A["gap"] < B["gap"] and 0 < A["pinfres"] < B["pres"] and 0 < A["mu"] < B["mu"])
        return bool(0 < A["gap"] < B["gap"] and 0 < A["pres"] < B["pres"] and 0 < A["dres"] < B["dres"]
                    and 0 < A["kapovert"] < B["kapovert"] and 0 < A["mu"] < B["mu"])

    def snapshot(st: dict) -> dict:
        return {"x": x.copy(), "y": y.copy(), "z": z.copy(), "s": s.copy(), "tau": tau, "kap": kap, "st": st, "it": it}

    restored: dict | None = None
    for it in range(max_iters + 1):
        st = stats()
        if keep_log:
            log.append({k: st[k] for k in ("pcost", "dcost", "gap", "pres", "dres", "kapovert", "mu")}
                       | {"step": step, "iter": it})
        if it > 0 and (st["pres"] > SAFEGUARD * pres_prev or st["gap"] < 0):
            restored = best
            status = check(best["st"], True) or "numerics" if best else "numerics"
            break
        pres_prev = st["pres"]
        done = check(st, False)
        if done is not None:
            status = done
            break
        if it > 0 and step == STEPMIN * GAMMA:
            restored = best
            status = check(best["st"], True) or "numerics"
            break
        if it == max_iters:
            if best is not None and not better(st, best["st"]):
                restored = best
                status = check(best["st"], True) or "max_iters"
            else:
                status = check(st, True) or "max_iters"
            break
        if it == 0 or better(st, best["st"]):
            best = snapshot(st)

        sc = ops.scaling(s, z)
        if sc is None:
            restored = best
            status = check(best["st"], True) or "numerics"
            break
        lam = ops.scale(sc, z)
        kkt.factor(sc)
        rx, ry, rz, rt, mu = st["rx"], st["ry"], st["rz"], st["rt"], st["mu"]
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
        x, y, z, s = x + step * dx, y + step * dy, z + step * dz, s + step * ds
        kap, tau = kap + step * dkap, tau + step * dtau

    if restored is not None:
        x, y, z, s, tau, kap = (restored[k] for k in ("x", "y", "z", "s", "tau", "kap"))
    return ConicResult(x=x / (xe * tau), y=y / (ae * tau), z=z / (ge * tau), s=s * (ge / tau), status=status,
                       iterations=it, log=tuple(log))
