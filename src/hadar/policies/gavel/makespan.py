"""Makespan minimization (Gavel's ``min_total_duration[_perf]``).

Gavel bisects T in [100 s, 1e6 s] (window x10 while nothing is feasible)
until ``max_T <= 1.05 min_T`` and returns ECOS's point of the feasibility
problem ``{base, sum_j T_ij x_ij >= R_i / T}`` at the smallest feasible T it
tried. We get the exact optimum ``T*`` from one LP (the problem is
linear-fractional: maximize ``lam = 1/T`` s.t. ``T_i . x_i >= lam R_i``),
replay Gavel's bisection against ``T*`` to land on the very T Gavel returns,
and return the analytic center of that feasible set: the point an exact
interior-point method returns for a feasibility problem. (ECOS stops early on
such problems, so its point is only near that center: entries differ by
0.01-0.2 on the bundled traces, against up to 1.0 for a vertex.)

With ``solver="ecos"`` (Gavel-compatible runs) the point returned is instead
the one ECOS itself returns at that T: the feasibility problem cvxpy builds
(cvx_forms.py) solved by our reimplementation of ECOS's iterations
(ecos_ipm.py). Close to the optimum (T within 1 % of ``T*``) the bisection
asks that solver whether T is feasible, as Gavel asks ECOS (whose status can
read "optimal_inaccurate", i.e. infeasible to Gavel, on a very thin set).

Agnostic variant: every ``T_ij`` replaced by the job's V100 rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from hadar.arrays import FloatArray
from hadar.errors import SolverError
from hadar.model.state import Allocation, SchedulerState
from hadar.policies.gavel import cvx_forms
from hadar.policies.gavel.common import Inputs, ReferenceSolved, finish, tie_order
from hadar.policies.gavel.problem import ClassProblem, fattened
from hadar.policies.registry import register

BISECTION_LOW_S = 100.0
BISECTION_HIGH_S = 1e6
BISECTION_RATIO = 1.05
#: Within this relative distance of T* the ECOS path asks the solver whether T is feasible.
ASK_SOLVER_BAND = 0.01


def gavel_bisection(t_star: float, low: float = BISECTION_LOW_S, high: float = BISECTION_HIGH_S,
                    ratio: float = BISECTION_RATIO, feasible: Callable[[float], bool] | None = None) -> float:
    """The T Gavel's bisection returns when exactly the T >= ``t_star`` are feasible
    (or, with ``feasible``, when that predicate says which T are)."""
    if not math.isfinite(t_star) or t_star <= 0:
        raise SolverError(f"makespan: optimal duration must be finite and positive, got {t_star}")
    feasible = feasible or (lambda t: t >= t_star)
    last_high, found = high, None
    while found is None:
        while ratio * low < high:
            mid = (low + high) / 2.0
            if feasible(mid):
                found, high = mid, mid
            else:
                low = mid
        high, low, last_high = last_high * 10.0, last_high, last_high * 10.0
    return found


def solve_makespan_ecos(throughputs: FloatArray, inp: Inputs, state: SchedulerState) -> FloatArray | None:
    """ECOS's point of Gavel's feasibility problem at Gavel's bisection T (None: fall back)."""
    rows = np.asarray((np.where(inp.active, throughputs, 0.0) > 0).any(axis=1))  # jobs that can run somewhere
    if not rows.any():
        return None
    jobs, types = cvx_forms.gavel_order(state.job_ids, tie_order(state), rows)
    t = throughputs[np.ix_(jobs, types)]
    s, caps, remaining = inp.scale_factors[jobs], inp.capacities[types], inp.remaining[jobs]
    demand = remaining > 0
    per_step = np.divide(t, remaining[:, None], out=np.zeros_like(t), where=demand[:, None])
    prob = ClassProblem.build(per_step, s, caps, inp.active[np.ix_(jobs, types)], demand=demand)
    if prob.size == 0 or not prob.demand.any():
        return None
    lam, _ = prob.max_min(what="makespan LP")
    if lam <= 0:
        return None
    t_star = prob.factor / lam
    solved: dict[float, FloatArray | None] = {}

    def ecos_point(duration: float) -> FloatArray | None:
        if duration not in solved:
            form = cvx_forms.makespan_feasibility(t, s, caps, remaining, duration)
            x, res = form.solve()
            solved[duration] = x if res.status == "optimal" else None
        return solved[duration]

    def feasible(duration: float) -> bool:
        if abs(duration / t_star - 1.0) > ASK_SOLVER_BAND:
            return duration >= t_star
        return ecos_point(duration) is not None

    t_gavel = gavel_bisection(t_star, feasible=feasible)
    x_rows = ecos_point(t_gavel)
    if x_rows is None:
        return None
    x = np.zeros(inp.shape)
    x[np.ix_(jobs, types)] = np.clip(x_rows, 0.0, 1.0)
    return x


def solve_makespan(throughputs: FloatArray, inp: Inputs) -> FloatArray:
    """Centered point of Gavel's feasibility set at its bisection T (rows that cannot run get 0)."""
    m, _ = inp.shape
    demand = inp.remaining > 0
    per_step = np.divide(throughputs, inp.remaining[:, None], out=throughputs.copy(), where=demand[:, None])
    prob = ClassProblem.build(per_step, inp.scale_factors, inp.capacities, inp.active, demand=demand,
                              centering=inp.centering)
    if prob.size == 0:
        return np.zeros(inp.shape)
    if not prob.demand.any():  # nothing left to run: any point is optimal; take the center
        return prob.expand(prob.centered(np.zeros(prob.size), np.zeros(prob.a.shape)), m)
    lam, x_opt = prob.max_min(what="makespan LP")  # scaled units: lam = factor / T*
    if lam <= 0:
        raise SolverError("makespan LP: optimum is zero (a job cannot make progress)")
    t_gavel = gavel_bisection(prob.factor / lam)
    level = min(prob.factor / t_gavel, fattened(lam))
    x_cls = prob.centered(np.full(prob.size, level), x_opt)
    return prob.expand(x_cls, m)


@register("min_total_duration_perf", "makespan minimization, heterogeneity-aware (Gavel)", type_aware=True)
@register("min_total_duration", "makespan minimization, type-agnostic: every GPU treated as a V100 (Gavel)",
          type_aware=False)
class MinTotalDuration(ReferenceSolved):
    NAMES: ClassVar[tuple[str, ...]] = ("min_total_duration_perf", "min_total_duration")

    def solve(self, state: SchedulerState, inp: Inputs, throughputs: FloatArray) -> Allocation:
        x = solve_makespan_ecos(throughputs, inp, state) if self.solver == "ecos" else None
        if x is None:
            x = solve_makespan(throughputs, inp)
        return finish(state, x, inp.active)
