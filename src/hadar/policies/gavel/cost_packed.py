"""Throughput per dollar with space sharing (Gavel's ``max_sum_throughput_normalized_by_cost_packed_SLOs``).

The objective of ``cost.py`` over the units of ``packing.py`` (each job alone and each
pair of jobs with equal GPU counts that can share GPUs): maximize
``sum_i sum_{u containing i} sum_j T_{i|u,j} x_uj / p_j``, a job's rate in unit ``u``
on type ``j`` over the type's $ per GPU-hour, so a pair on one GPU is paid once
for both jobs' steps. As in Gavel, every job with an SLO gets the constraint
``sum_{u containing i} sum_j T_{i|u,j} x_uj >= R_i / (D_i - now)`` on its
effective throughput (deadlines and the ``slo_fallback`` as in ``cost.py``).

Ties between optimal points: a second LP keeps the optimum (to a relative 1e-9)
and maximizes the smallest effective throughput over the job's best rate alone,
so identical jobs are not starved by whichever vertex the solver lands on; its
ties follow HiGHS's dual simplex (deterministic for a given problem, no BLAS).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from hadar.arrays import FloatArray
from hadar.errors import SolverError
from hadar.model.state import Allocation, SchedulerState
from hadar.policies.gavel.common import Inputs, finish
from hadar.policies.gavel.cost import MaxSumThroughputPerDollar, prices
from hadar.policies.gavel.packed import pair_map
from hadar.policies.gavel.packing import PackedRows, Units
from hadar.policies.registry import register
from hadar.solve.lp import solve_lp

#: the tie-break LP keeps the per-dollar objective within this relative slack of the optimum
_KEEP = 1e-9


@register("max_sum_throughput_normalized_by_cost_packed_SLOs",
          "maximize throughput per dollar over jobs alone and pairs sharing GPUs, meeting each job's SLO (Gavel)",
          slos=True)
class MaxSumThroughputPerDollarPacked(MaxSumThroughputPerDollar):
    """Gavel's ``ThroughputNormalizedByCostSumWithPackingSLOs``: ``cost.py``'s policy over single and pair units."""

    NAMES: ClassVar[tuple[str, ...]] = ("max_sum_throughput_normalized_by_cost_packed_SLOs",)

    @property
    def name(self) -> str:
        return self.NAMES[0]

    def solve(self, state: SchedulerState, inp: Inputs, throughputs: FloatArray) -> Allocation:
        m = inp.shape[0]
        units = Units.of(state, inp.capacities)
        rows = PackedRows.of(units, np.ones(m), throughputs, inp.scale_factors, inp.capacities)
        price = prices(state)
        best = np.where(inp.active, throughputs, 0.0).max(axis=1, initial=0.0)
        x = self.with_slos(state, inp, lambda need: packed_per_dollar(rows, price, best, need))
        if x is None:
            x = packed_per_dollar(rows, price, best, np.zeros(m))
        if x is None:  # no floors: the LP is feasible (x = 0), so only a solver failure lands here
            raise SolverError("packed max-sum-throughput-per-dollar LP: HiGHS found no optimum")
        x = rows.unpack(x, units.count)
        return finish(state, x[:m], inp.active, pairs=pair_map(state, units, x[m:]))


def packed_per_dollar(rows: PackedRows, price: FloatArray, best: FloatArray, need: FloatArray) -> FloatArray | None:
    """Max ``sum_i gain_i . x / p`` with ``gain_i . x >= need_i`` (``need`` 0: no floor), over ``rows``'s
    entries (``rows.gain``: unscaled effective throughputs); the tie-break (module docstring) on
    ``best`` (each job's best rate alone). Returns the entries' values; None when the floors cannot be met."""
    m, nv = rows.time.shape
    cost = -np.asarray(rows.gain.sum(axis=0)).ravel() / price[rows.tt]
    slo = np.nonzero(need > 0)[0]
    floors = -(sp.diags(1.0 / need[slo]) @ rows.gain[slo])  # in units of each job's need
    a_ub = sp.vstack([rows.cap, rows.time, floors]).tocsr()
    b_ub = np.concatenate([rows.capacities, np.ones(m), -np.ones(slo.size)])
    bounds = np.zeros((nv + 1, 2))
    bounds[:, 1] = np.inf
    try:
        res = solve_lp(cost, a_ub, b_ub, bounds[:nv], "packed max-sum-throughput-per-dollar LP")
    except SolverError:
        if slo.size:
            return None
        raise
    fair = np.nonzero(best > 0)[0]
    if fair.size == 0:
        return np.asarray(res.x, dtype=float)
    keep = float(res.fun) + _KEEP * abs(float(res.fun))
    ratio = -(sp.diags(1.0 / best[fair]) @ rows.gain[fair])
    a2 = sp.vstack([sp.hstack([a_ub, sp.csr_matrix((a_ub.shape[0], 1))]),
                    sp.hstack([sp.csr_matrix(cost), sp.csr_matrix(np.zeros((1, 1)))]),
                    sp.hstack([ratio, sp.csr_matrix(np.ones((fair.size, 1)))])]).tocsr()
    b2 = np.concatenate([b_ub, [keep], np.zeros(fair.size)])
    c2 = np.zeros(nv + 1)
    c2[-1] = -1.0
    try:
        res2 = solve_lp(c2, a2, b2, bounds, "packed max-sum-throughput-per-dollar LP (tie-break)")
    except SolverError:  # tolerance trouble on the kept optimum: the first LP's vertex is optimal too
        return np.asarray(res.x, dtype=float)
    return np.asarray(res2.x[:nv], dtype=float)
