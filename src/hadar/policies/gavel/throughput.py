"""Maximum total throughput (Gavel's ``max_sum_throughput_perf``).

Maximize ``sum_ij T_ij x_ij`` in raw steps/s, summed across different models
as Gavel does (so it favours models that report many small steps). HiGHS
finds the optimum; ties (e.g. identical jobs competing for the last GPU) are
broken like ECOS by returning the analytic center of the optimal face.
With ``solver="ecos"`` (Gavel-compatible runs) the allocation is ECOS's own
point instead: the LP cvxpy builds (cvx_forms.py) solved by our
reimplementation of ECOS's iterations (ecos_ipm.py); it differs from the
center where ECOS stops before the tiny entries of the face settle.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from hadar.arrays import FloatArray
from hadar.model.state import Allocation, SchedulerState
from hadar.numeric import dot
from hadar.policies.gavel import cvx_forms
from hadar.policies.gavel.common import Inputs, ReferenceSolved, finish, tie_order
from hadar.policies.gavel.problem import ClassProblem, fattened
from hadar.policies.registry import register
from hadar.solve.lp import base_constraints, solve_lp


def solve_max_sum(throughputs: FloatArray, inp: Inputs) -> FloatArray:
    m, _ = inp.shape
    prob = ClassProblem.build(throughputs, inp.scale_factors, inp.capacities, inp.active,
                              demand=np.zeros(m, dtype=bool), centering=inp.centering)
    if prob.size == 0:
        return np.zeros(inp.shape)
    var = prob.var
    a_ub, b_ub = base_constraints(var, prob.k * prob.s, prob.capacities)
    gain = var.gather(prob.k[:, None] * prob.a)
    bounds = np.zeros((var.count, 2))
    bounds[:, 1] = np.inf
    res = solve_lp(-gain, a_ub, b_ub, bounds, "max-sum-throughput LP")
    best = dot(gain, res.x)
    x_cls = prob.centered(np.zeros(prob.size), var.to_matrix(res.x), c=prob.a, c_floor=float(fattened(best)))
    return prob.expand(x_cls, m)


def solve_max_sum_ecos(throughputs: FloatArray, inp: Inputs, state: SchedulerState) -> FloatArray | None:
    """ECOS's point of Gavel's max-sum LP over the jobs that can run (None: fall back)."""
    rows = np.asarray((np.where(inp.active, throughputs, 0.0) > 0).any(axis=1))
    if not rows.any():
        return None
    jobs, types = cvx_forms.gavel_order(state.job_ids, tie_order(state), rows)
    x_sub, res = cvx_forms.max_sum_throughput(throughputs[np.ix_(jobs, types)], inp.scale_factors[jobs],
                                              inp.capacities[types]).solve()
    if not res.status.startswith("optimal"):
        return None
    x = np.zeros(inp.shape)
    x[np.ix_(jobs, types)] = np.clip(x_sub, 0.0, 1.0)
    return x


@register("max_sum_throughput_perf", "maximize the sum of raw throughputs (steps/s) over jobs (Gavel)",
          type_aware=True)
class MaxSumThroughput(ReferenceSolved):
    NAMES: ClassVar[tuple[str, ...]] = ("max_sum_throughput_perf",)

    def solve(self, state: SchedulerState, inp: Inputs, throughputs: FloatArray) -> Allocation:
        x = solve_max_sum_ecos(throughputs, inp, state) if self.solver == "ecos" else None
        if x is None:
            x = solve_max_sum(throughputs, inp)
        return finish(state, x, inp.active)
