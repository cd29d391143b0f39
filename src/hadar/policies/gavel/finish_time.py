"""Finish-time fairness (Themis-style; Gavel's ``finish_time_fairness[_perf]``).

``rho_i(x) = (t_i + R_i / thr_i(x)) / (C_i + R_i / T^iso_i)``, minimize
``max_i rho_i``. ``t_i`` = time since arrival, ``R_i`` = remaining steps,
``thr_i(x) = sum_j T_ij x_ij``, ``T^iso_i`` = throughput under Gavel's
isolated allocation, ``C_i`` = accumulated isolated time: at every call
``C_i += (R_i(previous call) - R_i(now)) / T^iso_i(previous call)``, kept in
``Allocation.memo`` and read back from ``state.memo``. Priority weights are
ignored, as in Gavel. Agnostic variant: ``T_ij := T_i,v100``.

``rho_i(x) <= rho`` is linear in x (``thr_i(x) >= R_i / (rho D_i - t_i)``,
``D_i`` the denominator), so the optimum is found with HiGHS LPs: at ``rho_k``
maximize the uniform slack factor ``lam`` of those throughput demands, then
``rho_{k+1} = max_i rho_i(x_k)`` (a Dinkelbach-style step; exact in one step
when the bottleneck jobs share ``t_i / D_i``, a handful otherwise). The
returned point is the analytic center of ``{x: rho_i(x) <= rho*}`` under
ECOS's barrier for Gavel's ``inv_pos`` cone (``2 log(thr - g) - log(thr)``).
When few jobs are bottlenecks that set is large and ECOS stops at an
arbitrary interior point of it (entries differ by up to ~0.17 from the center
on the bundled traces, against ~0.5-0.8 for a vertex).

With ``solver="ecos"`` (Gavel-compatible runs) the allocation is ECOS's own
point: the SOCP cvxpy builds from Gavel's ``inv_pos`` expressions
(cvx_forms.py) solved by our reimplementation of ECOS's iterations
(ecos_ipm.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from hadar.arrays import FloatArray
from hadar.model.state import Allocation, SchedulerState
from hadar.policies.gavel import cvx_forms
from hadar.policies.gavel.center import FACE_TOL, interior_point
from hadar.policies.gavel.common import Inputs, ReferenceSolved, finish, isolated_throughputs, tie_order
from hadar.policies.gavel.problem import ClassProblem
from hadar.policies.registry import register
from hadar.solve.lp import maxmin_lp, scale_to_unit

MEMO_CUMULATIVE = "finish_time_fairness/cumulative_isolated_s"
MEMO_REMAINING = "finish_time_fairness/previous_remaining_steps"
MEMO_ISOLATED = "finish_time_fairness/previous_isolated_throughput"
_MAX_ROUNDS = 60
_RHO_RTOL = 1e-10


def cumulative_isolated_time(state: SchedulerState, memo: Mapping[str, Any]) -> FloatArray:
    """``C_i`` per job in state order, updated with the progress since the previous call."""
    cum = memo.get(MEMO_CUMULATIVE, {})
    prev_r = memo.get(MEMO_REMAINING, {})
    prev_iso = memo.get(MEMO_ISOLATED, {})
    out = np.zeros(len(state.jobs))
    for i, job in enumerate(state.jobs):
        c = float(cum.get(job.job_id, 0.0))
        iso = float(prev_iso.get(job.job_id, 0.0))
        if job.job_id in prev_r and iso > 0:
            c += (float(prev_r[job.job_id]) - job.remaining_steps) / iso
        out[i] = c
    return out


def _rho(thr: FloatArray, r: FloatArray, d: FloatArray, age: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore"):
        return (age + np.where(thr > 0, r / np.where(thr > 0, thr, 1.0), np.inf)) / d


def _minimize_max_rho(prob: ClassProblem, r: FloatArray, d: FloatArray, age: FloatArray) -> tuple[float, FloatArray]:
    """``(rho*, x)`` on the class problem; ``x`` attains ``rho*`` (up to ``_RHO_RTOL``)."""
    dem = prob.demand
    real = prob.a / prob.factor  # unscaled throughputs
    x = interior_point(prob.face(np.zeros(prob.size)))
    rho = float(_rho((real * x).sum(axis=1), r, d, age)[dem].max())
    for _ in range(_MAX_ROUNDS):
        need = np.where(dem, r / np.where(dem, rho * d - age, 1.0), 1.0)
        coef, _ = scale_to_unit(real / need[:, None])
        _, x_new = maxmin_lp(prob.var, coef, prob.k * prob.s, prob.capacities, dem, what="finish-time fairness LP")
        new_rho = float(_rho((real * x_new).sum(axis=1), r, d, age)[dem].max())
        if new_rho >= rho:
            break
        x, done = x_new, new_rho >= rho * (1.0 - _RHO_RTOL)
        rho = new_rho
        if done:
            break
    return rho, x


def solve_finish_time_ecos(throughputs: FloatArray, inp: Inputs, cumulative: FloatArray,
                           state: SchedulerState) -> FloatArray | None:
    """ECOS's point of Gavel's min-max-rho SOCP over the jobs that can run (None: fall back)."""
    iso = isolated_throughputs(throughputs, inp.scale_factors, inp.capacities)
    m = inp.shape[0]
    denom = cumulative + np.divide(inp.remaining, iso, out=np.zeros(m), where=iso > 0)
    rows = (np.where(inp.active, throughputs, 0.0) > 0).any(axis=1) & (iso > 0) & (denom > 0)
    if not rows.any():
        return None
    jobs, types = cvx_forms.gavel_order(state.job_ids, tie_order(state), rows)
    form = cvx_forms.finish_time_fairness(throughputs[np.ix_(jobs, types)], inp.scale_factors[jobs],
                                          inp.capacities[types], inp.age_s[jobs], inp.remaining[jobs], denom[jobs])
    x_sub, res = form.solve()
    if not res.status.startswith("optimal"):
        return None
    x = np.zeros(inp.shape)
    x[np.ix_(jobs, types)] = np.clip(x_sub, 0.0, 1.0)
    return x


def solve_finish_time(throughputs: FloatArray, inp: Inputs, cumulative: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Centered min-max-rho allocation and the isolated throughputs used (for the memo)."""
    m, _ = inp.shape
    iso = isolated_throughputs(throughputs, inp.scale_factors, inp.capacities)
    demand = (inp.remaining > 0) & (iso > 0)
    denom = cumulative + np.divide(inp.remaining, iso, out=np.zeros(m), where=iso > 0)
    prob = ClassProblem.build(throughputs, inp.scale_factors, inp.capacities, inp.active, demand=demand,
                              extra_features=(inp.remaining, denom, inp.age_s), centering=inp.centering)
    if prob.size == 0:
        return np.zeros(inp.shape), iso
    take = prob.classes.take
    r, d, age = take(inp.remaining), take(denom), take(inp.age_s)
    if not prob.demand.any():
        return prob.expand(prob.centered(np.zeros(prob.size), np.zeros(prob.a.shape)), m), iso
    rho, x_opt = _minimize_max_rho(prob, r, d, age)
    rho_face = rho * (1.0 + FACE_TOL)
    g = np.where(prob.demand, r / np.where(prob.demand, rho_face * d - age, 1.0), 0.0) * prob.factor
    x_cls = prob.centered(g, x_opt, socp=True)
    return prob.expand(x_cls, m), iso


@register("finish_time_fairness_perf", "finish-time fairness (Themis rho), heterogeneity-aware (Gavel)",
          type_aware=True)
@register("finish_time_fairness", "finish-time fairness, type-agnostic: every GPU treated as a V100 (Gavel)",
          type_aware=False)
class FinishTimeFairness(ReferenceSolved):
    NAMES: ClassVar[tuple[str, ...]] = ("finish_time_fairness_perf", "finish_time_fairness")

    def solve(self, state: SchedulerState, inp: Inputs, throughputs: FloatArray) -> Allocation:
        cumulative = cumulative_isolated_time(state, state.memo)
        x_ecos = solve_finish_time_ecos(throughputs, inp, cumulative, state) if self.solver == "ecos" else None
        if x_ecos is None:
            x, iso = solve_finish_time(throughputs, inp, cumulative)
        else:
            x, iso = x_ecos, isolated_throughputs(throughputs, inp.scale_factors, inp.capacities)
        ids = state.job_ids
        memo = {
            MEMO_CUMULATIVE: dict(zip(ids, cumulative.tolist(), strict=True)),
            MEMO_REMAINING: dict(zip(ids, inp.remaining.tolist(), strict=True)),
            MEMO_ISOLATED: dict(zip(ids, iso.tolist(), strict=True)),
        }
        return finish(state, x, inp.active, memo=memo)
