"""The linear algebra of the ECOS re-implementation (ecos_ipm.py): equilibration and ECOS's KKT system.

``equilibrate`` is ECOS's Ruiz scaling (3 passes); ``Kkt`` assembles,
factors (QDLDL, ``hadar.numeric.SparseLDL``: no BLAS) and solves the KKT
system with ECOS's static regularization and iterative refinement. Both
follow ECOS 2.0.10 to the detail, since on degenerate problems those
details decide the iterates (see ecos_ipm.py).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from hadar.arrays import FloatArray, IntArray
from hadar.numeric import SparseLDL
from hadar.policies.gavel.ecos_cones import Cones, Scaling

# ECOS 2.0.10 defaults used by the linear algebra.
DELTASTAT = 7e-8  # static regularization
NITREF = 9  # iterative refinement steps at most
IRERRFACT = 6.0  # refinement stops when the error no longer falls by this factor
LINSYSACC = 1e-14  # refinement target (relative)
EQUIL_ITERS = 3  # Ruiz passes


class Kkt:
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

    def __init__(self, a: sp.csc_matrix, g: sp.csc_matrix, cones: Cones) -> None:
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
        self.lu: SparseLDL | None = None
        self.ir_steps: list[int] = []

    def _assemble(self, diag_f: FloatArray, diag_t: FloatArray, r: IntArray, c: IntArray,
                  v: FloatArray) -> None:
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

    def factor(self, sc: Scaling) -> None:
        n, p, m, cones = self.n, self.p, self.m, self.cones
        head = np.concatenate([np.full(n, DELTASTAT), np.full(p, -DELTASTAT)])
        vz = np.empty(m)
        vz[:cones.orthant] = sc.v
        r = c = np.zeros(0, dtype=int)
        v = np.zeros(0)
        t_f = t_t = np.zeros(0)
        if self.k:
            eta2 = sc.eta ** 2
            own = cones.owner
            vz[cones.orthant:] = eta2[own]
            vz[cones.heads] = eta2 * sc.d1
            tails = np.nonzero(cones.tails)[0] + cones.orthant
            ot = own[tails - cones.orthant]
            qt = sc.q[tails - cones.orthant]
            r = n + p + np.concatenate([tails, cones.heads, tails])
            c = np.concatenate([self.t1[ot], self.t2, self.t2[ot]])
            v = -np.concatenate([eta2[ot] * sc.v1[ot] * qt, eta2 * sc.u0, eta2[ot] * sc.u1[ot] * qt])
            t_f = np.column_stack([-eta2, eta2 + DELTASTAT]).ravel()
            t_t = np.column_stack([-eta2, eta2]).ravel()
        diag_f = np.concatenate([head, -vz - DELTASTAT, t_f])
        diag_t = np.concatenate([head, -vz - DELTASTAT * self.zsign, t_t])
        self._assemble(diag_f, diag_t, r, c, v)

    def solve(self, rhs: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """ECOS's refinement loop: up to 9 steps, stop below 1e-14 relative or when the error stalls."""
        assert self.lu is not None and self.k_true is not None
        rhs = np.concatenate([rhs, np.zeros(2 * self.k)])
        threshold = (1.0 + float(np.abs(rhs).max(initial=0.0))) * LINSYSACC
        sol = self.lu.solve(rhs)
        prev_err, prev_sol = 0.0, sol
        steps = 0
        for it in range(NITREF + 1):
            steps = it
            err = rhs - self.k_true @ sol
            nerr = float(np.abs(err).max(initial=0.0))
            if it > 0 and nerr > prev_err:  # the last step made it worse: undo it
                sol, steps = prev_sol, it - 1
                break
            if it == NITREF or nerr < threshold or (it > 0 and prev_err < IRERRFACT * nerr):
                break
            prev_err, prev_sol = nerr, sol
            sol = sol + self.lu.solve(err)
        self.ir_steps.append(steps)
        n, p, m = self.n, self.p, self.m
        return sol[:n], sol[n:n + p], sol[n + p:n + p + m]


def equilibrate(a: sp.csc_matrix, g: sp.csc_matrix, cones: Cones) -> tuple[FloatArray, FloatArray, FloatArray]:
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
            tot = np.add.reduceat(gt[cones.orthant:], heads_rel - cones.orthant)
            gt[cones.orthant:] = tot[cones.owner]
        xt = np.where(np.abs(xt) < 1e-6, 1.0, np.sqrt(xt))
        at = np.where(np.abs(at) < 1e-6, 1.0, np.sqrt(at))
        gt = np.where(np.abs(gt) < 1e-6, 1.0, np.sqrt(gt))
        a = (sp.diags(1.0 / at) @ a @ sp.diags(1.0 / xt)).tocsc()
        g = (sp.diags(1.0 / gt) @ g @ sp.diags(1.0 / xt)).tocsc()
        xe, ae, ge = xe * xt, ae * at, ge * gt
    return xe, ae, ge
