"""Cone algebra of the ECOS re-implementation (ecos_ipm.py): R^l_+ x second-order cones.

The nonnegative orthant comes first, then the second-order cones one after
the other; every operation on the SOC part is vectorized over all cones
(``Cones.segsum`` sums per cone). ``ConeOps`` holds what ECOS 2.0.10 does
with a point of the cone: shifting into it, the Nesterov-Todd scaling
``W``, the Jordan product and its inverse, and the line search that keeps
an iterate inside. Nothing here is meant for use outside the solver.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hadar.arrays import BoolArray, FloatArray, IntArray

# ECOS 2.0.10 defaults used by the cone operations.
GAMMA = 0.99  # step = GAMMA x the largest step to the boundary
EPS = 1e-13  # smallest divisor
STEPMIN, STEPMAX = 1e-6, 0.999


def safediv(x: FloatArray | float, y: FloatArray | float) -> FloatArray:
    y = np.asarray(y, dtype=float)
    return np.asarray(x, dtype=float) / np.where(y < EPS, EPS, y)


@dataclass(frozen=True, slots=True)
class Cones:
    """Index bookkeeping for R^l_+ x SOCs laid out one after the other."""

    orthant: int  # size of the nonnegative orthant R^l_+ (ECOS's l)
    sizes: IntArray  # (k,) SOC sizes

    @property
    def m(self) -> int:
        return self.orthant + int(self.sizes.sum())

    @property
    def degree(self) -> int:
        return self.orthant + int(self.sizes.size)

    @property
    def heads(self) -> IntArray:
        """Index of each SOC's first entry."""
        if self.sizes.size == 0:
            return np.zeros(0, dtype=int)
        return self.orthant + np.concatenate(([0], np.cumsum(self.sizes)[:-1])).astype(int)

    @property
    def owner(self) -> IntArray:
        """For every SOC entry (after the LP part): the cone it belongs to."""
        return np.repeat(np.arange(self.sizes.size), self.sizes)

    @property
    def tails(self) -> BoolArray:
        """Boolean mask over SOC entries: True except at each cone's head."""
        mask = np.ones(int(self.sizes.sum()), dtype=bool)
        mask[self.heads - self.orthant] = False
        return mask

    def segsum(self, v: FloatArray) -> FloatArray:
        """Per-cone sums of an array over the SOC entries."""
        if self.sizes.size == 0:
            return np.zeros(0)
        return np.add.reduceat(v, self.heads - self.orthant)


@dataclass(slots=True)
class Scaling:
    """Nesterov-Todd scaling ``W`` at the current (s, z)."""

    v: FloatArray  # LP: s / z  (W^2)
    w: FloatArray  # LP: sqrt(v)
    eta: FloatArray  # SOC (k,)
    a: FloatArray  # SOC (k,)
    q: FloatArray  # SOC: over all SOC entries, 0 at heads
    qq: FloatArray  # SOC (k,): q'q
    d1: FloatArray  # SOC (k,): W^2 = eta^2 (diag(d1, 1, .., 1) + u u' - v v'), u = (u0, u1 q), v = (0, v1 q)
    u0: FloatArray
    u1: FloatArray
    v1: FloatArray


class ConeOps:
    def __init__(self, cones: Cones) -> None:
        self.cones = cones
        self.orthant = cones.orthant
        self.heads = cones.heads
        self.owner = cones.owner
        self.tails = cones.tails
        self.rel_heads = self.heads - self.orthant

    # --- cone algebra (SOC parts vectorized over all cones) ---
    def _soc_split(self, u: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(head values per cone, tail vector with zeros at heads) of the SOC part."""
        us = u[self.orthant:]
        tail = np.where(self.tails, us, 0.0)
        return us[self.rel_heads], tail

    def soc_res(self, u: FloatArray) -> FloatArray:
        u0, u1 = self._soc_split(u)
        return u0 * u0 - self.cones.segsum(u1 * u1)

    def bring_to_cone(self, r: FloatArray) -> FloatArray:
        alpha = -GAMMA
        lp = r[:self.orthant]
        if lp.size:
            viol = lp[lp <= 0]
            if viol.size:
                alpha = max(alpha, float((-viol).max()))
        if self.heads.size:
            u0, u1 = self._soc_split(r)
            cres = u0 - np.sqrt(self.cones.segsum(u1 * u1))
            viol = cres[cres <= 0]
            if viol.size:
                alpha = max(alpha, float((-viol).max()))
        alpha += 1.0
        s = r.copy()
        s[:self.orthant] += alpha
        s[self.heads] += alpha
        return s

    def scaling(self, s: FloatArray, z: FloatArray) -> Scaling | None:
        v = safediv(s[:self.orthant], z[:self.orthant])
        w = np.sqrt(v)
        if not self.heads.size:
            e = np.zeros(0)
            return Scaling(v, w, e, e, e, e, e, e, e, e)
        sres, zres = self.soc_res(s), self.soc_res(z)
        if (sres <= 0).any() or (zres <= 0).any():
            return None
        snorm, znorm = np.sqrt(sres), np.sqrt(zres)
        sbar = safediv(s[self.orthant:], snorm[self.owner])
        zbar = safediv(z[self.orthant:], znorm[self.owner])
        eta2 = safediv(snorm, znorm)
        gamma = np.sqrt(0.5 * (1.0 + self.cones.segsum(sbar * zbar)))
        half_over_gamma = safediv(0.5, gamma)
        a = half_over_gamma * (sbar[self.rel_heads] + zbar[self.rel_heads])
        q = np.where(self.tails, half_over_gamma[self.owner] * (sbar - zbar), 0.0)
        qq = self.cones.segsum(q * q)
        c = 1.0 + a + safediv(qq, 1.0 + a)
        d = 1.0 + safediv(2.0, 1.0 + a) + safediv(qq, (1.0 + a) ** 2)
        d1 = np.maximum(0.5 * (a * a + qq * (1.0 - safediv(c * c, 1.0 + qq * d))), 0.0)
        u0sq = a * a + qq - d1
        c2u = safediv(c * c, u0sq)
        if (c2u - d <= 0).any():
            return None
        return Scaling(v, w, np.sqrt(eta2), a, q, qq, d1, np.sqrt(u0sq), np.sqrt(c2u), np.sqrt(c2u - d))

    def scale(self, sc: Scaling, z: FloatArray) -> FloatArray:
        """``W z``."""
        out = np.empty_like(z)
        out[:self.orthant] = sc.w * z[:self.orthant]
        if self.heads.size:
            z0, z1 = self._soc_split(z)
            zeta = self.cones.segsum(sc.q * z1)
            factor = z0 + safediv(zeta, 1.0 + sc.a)
            tail = sc.eta[self.owner] * (z1 + factor[self.owner] * sc.q)
            tail[self.rel_heads] = sc.eta * (sc.a * z0 + zeta)
            out[self.orthant:] = tail
        return out

    def product(self, u: FloatArray, v: FloatArray) -> FloatArray:
        """Jordan product ``u o v``."""
        out = u * v
        if self.heads.size:
            u0, u1 = self._soc_split(u)
            v0, v1 = self._soc_split(v)
            tail = u0[self.owner] * v1 + v0[self.owner] * u1
            tail[self.rel_heads] = self.cones.segsum(u[self.orthant:] * v[self.orthant:])
            out[self.orthant:] = tail
        return out

    def division(self, u: FloatArray, w: FloatArray) -> FloatArray:
        """``u \\ w`` (the inverse of ``u o .``)."""
        out = np.empty_like(w)
        out[:self.orthant] = safediv(w[:self.orthant], u[:self.orthant])
        if self.heads.size:
            u0, u1 = self._soc_split(u)
            w0, w1 = self._soc_split(w)
            rho = u0 * u0 - self.cones.segsum(u1 * u1)
            zeta = self.cones.segsum(u1 * w1)
            factor = safediv(safediv(zeta, u0) - w0, rho)
            tail = factor[self.owner] * u1 + safediv(w1, u0[self.owner])
            tail[self.rel_heads] = safediv(u0 * w0 - zeta, rho)
            out[self.orthant:] = tail
        return out

    def add_e(self, v: FloatArray, alpha: float) -> FloatArray:
        out = v.copy()
        out[:self.orthant] += alpha
        out[self.heads] += alpha
        return out

    def line_search(self, lam: FloatArray, ds: FloatArray, dz: FloatArray, tau: float, dtau: float,
                    kap: float, dkap: float) -> float:
        """Largest step keeping ``lambda + a ds`` and ``lambda + a dz`` in the cone (ECOS's rule)."""
        if self.orthant > 0:
            lp = lam[:self.orthant]
            rhomin = float((ds[:self.orthant] / lp).min())
            sigmamin = float((dz[:self.orthant] / lp).min())
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
            n2 = l0 * l0 - self.cones.segsum(l1 * l1)
            ok = n2 > 0
            nrm = np.sqrt(np.where(ok, n2, 1.0))
            lbar0 = l0 / nrm
            lbar1 = l1 / nrm[self.owner]
            steps = []
            for d in (ds, dz):
                d0, d1 = self._soc_split(d)
                prod = lbar0 * d0 - self.cones.segsum(lbar1 * d1)
                r0 = prod / nrm
                factor = (prod + d0) / (lbar0 + 1.0)
                r1 = (d1 - factor[self.owner] * lbar1) / nrm[self.owner]
                steps.append(np.sqrt(self.cones.segsum(r1 * r1)) - r0)
            conic = np.maximum(0.0, np.maximum(steps[0], steps[1]))
            conic = conic[ok & (conic != 0)]
            if conic.size:
                alpha = min(alpha, float((1.0 / conic).min()))
        return min(max(alpha, STEPMIN), STEPMAX)
