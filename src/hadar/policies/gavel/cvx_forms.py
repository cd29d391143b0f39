"""The conic problems cvxpy 1.5 hands to ECOS for Gavel's policies, built directly.

ECOS's iterates depend on the exact rows, columns and coefficients of its
input (through equilibration and the residual norms), so these builders
reproduce what ``cvxpy.Problem.get_problem_data(cvxpy.ECOS)`` returns for
Gavel's expressions (spec/gavel.md section 2), up to the order of rows and
columns (which does not change the iterates). ``x`` is an ``(m, n)`` matrix
variable vectorized column-major, as cvxpy does. The base constraints
``x >= 0``, ``sum(multiply(s, x), axis=0) <= N``, ``sum(x, axis=1) <= 1``
become the rows ``-x <= 0``, ``sum_i s_i x_ij <= N_j``, ``sum_j x_ij <= 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from hadar.arrays import BoolArray, FloatArray, IntArray
from hadar.policies.gavel.ecos_ipm import ConicResult, solve_conic


@dataclass(frozen=True, slots=True)
class ConicForm:
    """``min c'x s.t. G x + s = h, s in R^l_+ x SOC(q...)``; ``x_slice`` locates the allocation."""

    c: FloatArray
    g: sp.csc_matrix
    h: FloatArray
    orthant: int  # rows of the nonnegative orthant (ECOS's l)
    q: tuple[int, ...]
    shape: tuple[int, int]
    x_offset: int = 0
    dims: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", {"l": self.orthant, "q": list(self.q)})

    def solve(self) -> tuple[FloatArray, ConicResult]:
        res = solve_conic(self.c, self.g, self.h, self.dims)
        m, n = self.shape
        x = res.x[self.x_offset:self.x_offset + m * n].reshape((n, m)).T
        return x, res


def gavel_order(job_ids: Sequence[int], types: IntArray, rows: BoolArray) -> tuple[IntArray, IntArray]:
    """(job indices, type indices) in the order Gavel builds its matrices: jobs by id, types as given
    (``common.tie_order``: by name, as Gavel, under its type order).

    The order does not change ECOS's iterates mathematically, but it fixes their round-off, which
    decides between identical jobs (ECOS returns them allocations that differ by ~1e-9, and the
    round mechanism serves the larger first). Only jobs with ``rows[i]`` are kept.
    """
    jobs = np.array([i for i in np.argsort(np.asarray(job_ids), kind="stable") if rows[i]], dtype=int)
    return jobs, types


def _base_rows(scale_factors: FloatArray, capacities: FloatArray, col0: int, ncols: int
               ) -> tuple[sp.coo_matrix, FloatArray]:
    """Rows of the base constraints over variables ``x`` starting at column ``col0``."""
    m, n = scale_factors.size, capacities.size
    mn = m * n
    var = col0 + np.arange(mn)  # var[j*m + i] = x_ij
    i_of = np.tile(np.arange(m), n)
    j_of = np.repeat(np.arange(n), m)
    rows = np.concatenate([np.arange(mn), mn + j_of, mn + n + i_of])
    cols = np.concatenate([var, var, var])
    vals = np.concatenate([-np.ones(mn), np.asarray(scale_factors, float)[i_of], np.ones(mn)])
    g = sp.coo_matrix((vals, (rows, cols)), shape=(mn + n + m, ncols))
    h = np.concatenate([np.zeros(mn), np.asarray(capacities, float), np.ones(m)])
    return g, h


def _throughput_rows(throughputs: FloatArray, col0: int, ncols: int, sign: float = -1.0) -> sp.coo_matrix:
    """Row ``i``: ``sign * sum_j T_ij x_ij``."""
    m, n = throughputs.shape
    i_of = np.tile(np.arange(m), n)
    j_of = np.repeat(np.arange(n), m)
    return sp.coo_matrix((sign * throughputs[i_of, j_of], (i_of, col0 + np.arange(m * n))), shape=(m, ncols))


def max_sum_throughput(throughputs: FloatArray, scale_factors: FloatArray, capacities: FloatArray) -> ConicForm:
    """``Maximize(sum(multiply(T, x)))`` s.t. base: ``c = -vec(T)``."""
    m, n = throughputs.shape
    g, h = _base_rows(scale_factors, capacities, 0, m * n)
    c = -np.asarray(throughputs, float).T.ravel()
    return ConicForm(c, g.tocsc(), h, g.shape[0], (), (m, n))


def makespan_feasibility(throughputs: FloatArray, scale_factors: FloatArray, capacities: FloatArray,
                         remaining: FloatArray, duration_s: float) -> ConicForm:
    """``Maximize(1)`` (so ``c = 0``) s.t. base and ``sum(multiply(T, x), axis=1) >= R / T``."""
    m, n = throughputs.shape
    g, h = _base_rows(scale_factors, capacities, 0, m * n)
    demand = _throughput_rows(np.asarray(throughputs, float), 0, m * n)
    gg = sp.vstack([g, demand]).tocsc()
    hh = np.concatenate([h, -(np.asarray(remaining, float) / duration_s)])
    return ConicForm(np.zeros(m * n), gg, hh, gg.shape[0], (), (m, n))


def finish_time_fairness(throughputs: FloatArray, scale_factors: FloatArray, capacities: FloatArray,
                         age_s: FloatArray, remaining: FloatArray, denominators: FloatArray) -> ConicForm:
    """``Minimize(maximum(*rho_i))``, ``rho_i = (t_i + R_i inv_pos(T_i . x_i)) / D_i``, s.t. base.

    cvxpy's variables: ``[r, vec(x), u_1..u_m]`` (``r`` the epigraph of the maximum, absent when
    m = 1, ``u_i >= 1/thr_i``). Rows: ``R_i/D_i u_i - r <= -t_i/D_i``, the base rows, then one
    3-dimensional cone per job ``(u_i + thr_i, u_i - thr_i, 2)`` i.e. ``thr_i u_i >= 1``.
    """
    m, n = throughputs.shape
    mn = m * n
    epi = m > 1
    x0 = 1 if epi else 0
    u0 = x0 + mn
    ncols = u0 + m
    coef = np.asarray(remaining, float) / np.asarray(denominators, float)
    const = np.asarray(age_s, float) / np.asarray(denominators, float)
    blocks, hs = [], []
    if epi:
        blocks.append(sp.coo_matrix((np.concatenate([-np.ones(m), coef]),
                                     (np.concatenate([np.arange(m), np.arange(m)]),
                                      np.concatenate([np.zeros(m, int), u0 + np.arange(m)]))), shape=(m, ncols)))
        hs.append(-const)
    g, h = _base_rows(scale_factors, capacities, x0, ncols)
    blocks.append(g)
    hs.append(h)
    thr = _throughput_rows(np.asarray(throughputs, float), x0, ncols).tocsr()  # -thr_i
    u = sp.coo_matrix((np.ones(m), (np.arange(m), u0 + np.arange(m))), shape=(m, ncols)).tocsr()
    zero = sp.csr_matrix((m, ncols))
    # cone i occupies 3 consecutive rows: (-thr - u, -thr + u, 0), h = (0, 0, 2)
    cone_rows = sp.vstack([thr - u, thr + u, zero]).tocsr()
    order = np.arange(3 * m).reshape(3, m).T.ravel()
    blocks.append(cone_rows[order])
    hs.append(np.tile([0.0, 0.0, 2.0], m))
    gg = sp.vstack(blocks).tocsc()
    hh = np.concatenate(hs)
    c = np.zeros(ncols)
    if epi:
        c[0] = 1.0
    else:
        c[u0] = coef[0]
    orthant = gg.shape[0] - 3 * m
    return ConicForm(c, gg, hh, orthant, (3,) * m, (m, n), x0)
