"""Space sharing (Gavel's packed formulation): allocations over single jobs and pairs.

A *unit* is one job alone or one pair of jobs with the same scale factor that
share the same GPUs. ``x[u, j]`` is the share of time unit ``u`` runs on type
``j``; the job's effective throughput is the sum over the units holding it of
its own rate in that unit (alone: ``T_ij``; in a pair: its co-located rate
from the table's pair entries). Constraints (spec/gavel.md section 2):
``x >= 0``; per type, ``sum_u s_u x_uj <= N_j``; per job, the time of every
unit holding it sums to at most 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from hadar.arrays import BoolArray, FloatArray, IntArray
from hadar.model.state import SchedulerState
from hadar.solve.lp import solve_lp


@dataclass(frozen=True, slots=True)
class Units:
    """The units of one snapshot: ``m`` singles (rows of ``state.jobs``) then the pairs.

    ``pairs[p] = (a, b)`` (row indices, ``a < b``); ``pair_rates[p, j] = (rate of a, rate of b)``
    together on type ``j``. A pair is a candidate when some type has GPUs and runs both.
    """

    m: int
    pairs: IntArray  # (P, 2)
    pair_rates: FloatArray  # (P, n, 2)

    @property
    def count(self) -> int:
        return self.m + int(self.pairs.shape[0])

    @classmethod
    def of(cls, state: SchedulerState, capacities: FloatArray) -> Units:
        jobs, types = state.jobs, state.gpu_types
        table = state.table
        pairs: list[tuple[int, int]] = []
        rates: list[list[tuple[float, float]]] = []
        for a in range(len(jobs)):
            for b in range(a + 1, len(jobs)):
                ja, jb = jobs[a], jobs[b]
                if ja.scale_factor != jb.scale_factor:
                    continue
                row = [table.pair_rates(ja.job_type, jb.job_type, ja.scale_factor, t) for t in types]
                if any(ra > 0 and rb > 0 and c > 0 for (ra, rb), c in zip(row, capacities, strict=True)):
                    pairs.append((a, b))
                    rates.append(row)
        n = len(types)
        return cls(len(jobs), np.array(pairs, dtype=int).reshape(-1, 2),
                   np.array(rates, dtype=float).reshape(-1, n, 2))

    def member_rates(self, throughputs: FloatArray) -> tuple[IntArray, IntArray, FloatArray]:
        """``(job, unit, rates over types)`` for every membership: singles, then both jobs of each pair."""
        m, p = self.m, self.pairs.shape[0]
        jobs = np.concatenate([np.arange(m), self.pairs[:, 0], self.pairs[:, 1]])
        units = np.concatenate([np.arange(m), m + np.arange(p), m + np.arange(p)])
        rates = np.concatenate([throughputs, self.pair_rates[:, :, 0], self.pair_rates[:, :, 1]], axis=0)
        return jobs.astype(int), units.astype(int), rates

    def scale_factors(self, job_scale: FloatArray) -> FloatArray:
        return np.concatenate([job_scale, job_scale[self.pairs[:, 0]]]) if self.pairs.size else job_scale.copy()


def packed_max_min(units: Units, coef_scale: FloatArray, throughputs: FloatArray, job_scale: FloatArray,
                   capacities: FloatArray, demand: BoolArray | None = None,
                   spread: bool = False) -> tuple[float, FloatArray]:
    """Maximize ``min_i coef_scale_i * sum_u sum_j R_iuj x_uj`` over single and pair units.

    Returns ``(tau, x)`` with ``x`` of shape ``(units.count, n)``. Variables are the entries with a
    positive rate for every member on a type with GPUs; only ``demand`` jobs (default all) bound
    ``tau``; ``spread``: among the optimal points, the one with the largest sum of the demand jobs'
    normalized throughputs (leftover capacity goes to non-bottleneck jobs); ties among optimal vertices follow HiGHS's
    dual simplex (deterministic for a given problem; no BLAS involved).
    """
    m, n = throughputs.shape
    u_count = units.count
    jobs, mem_units, rates = units.member_rates(throughputs)
    # a unit's entry (u, j) is usable when every member has a positive rate there and the type has GPUs
    usable = np.ones((u_count, n), dtype=bool)
    np.logical_and.at(usable, mem_units, rates > 0)
    usable &= (capacities > 0)[None, :]
    uu, tt = np.nonzero(usable)
    nv = uu.size
    col = np.full((u_count, n), -1)
    col[uu, tt] = np.arange(nv)
    s_u = units.scale_factors(job_scale)
    # capacity rows (n), per-job time rows (m), demand rows (m): -sum coef R x + tau <= 0
    cap = sp.csr_matrix((s_u[uu], (tt, np.arange(nv))), shape=(n, nv + 1))
    mj, mt = np.nonzero(usable[mem_units])  # membership index, type
    vars_ = col[mem_units[mj], mt]
    time = sp.csr_matrix((np.ones(mj.size), (jobs[mj], vars_)), shape=(m, nv + 1))
    vals = -(coef_scale[jobs[mj]] * rates[mj, mt])
    demand_rows = sp.csr_matrix((vals, (jobs[mj], vars_)), shape=(m, nv + 1)) + sp.csr_matrix(
        (np.ones(m), (np.arange(m), np.full(m, nv))), shape=(m, nv + 1)).tocsr()
    keep = np.ones(m, dtype=bool) if demand is None else np.asarray(demand, dtype=bool)
    a_ub = sp.vstack([cap, time, demand_rows[keep]]).tocsr()
    b_ub = np.concatenate([capacities, np.ones(m), np.zeros(int(keep.sum()))])
    bounds = np.zeros((nv + 1, 2))
    bounds[:, 1] = np.inf
    c = np.zeros(nv + 1)
    c[-1] = -1.0
    res = solve_lp(c, a_ub, b_ub, bounds, "packed max-min fairness LP")
    if spread:  # second LP: keep the optimum, then maximize the sum of the jobs' normalized throughputs
        bounds[-1, 0] = float(res.x[-1]) * (1.0 - 1e-9)
        c2 = np.asarray(demand_rows[keep].sum(axis=0)).ravel()
        c2[-1] = 0.0
        res = solve_lp(c2, a_ub, b_ub, bounds, "packed max-min fairness LP (spread)")
    x = np.zeros((u_count, n))
    x[uu, tt] = np.clip(res.x[:nv], 0.0, 1.0)
    return float(res.x[-1]), x


def effective_throughputs(units: Units, throughputs: FloatArray, x: FloatArray) -> FloatArray:
    """Each job's steps/s under ``x`` (units x types): its rate in every unit holding it, weighted by time."""
    jobs, mem_units, rates = units.member_rates(throughputs)
    per_member = (rates * x[mem_units]).sum(axis=1)
    out: FloatArray = np.bincount(jobs, weights=per_member, minlength=units.m).astype(float)
    return out
