"""Hadar's TTD keeper: short jobs first, but never at the price of the drain.

Shortest-remaining-first placements (the ``jct`` utility) finish small jobs
early but spend the fast GPUs on whoever is shortest, not on whoever gains
most from them, and they leave the long gangs for last. Both push the
moment the cluster can finish everything further out every round.

The keeper measures that moment. ``horizon_s`` is the least time in which
the remaining work could still be done: an LP over GPU-seconds per job and
type with each type's capacity and each job's gang (a job occupies its W
GPUs, so it cannot be served faster than one whole-job time slot per
second). A round of length L should bring it L closer. The keeper lets a
round drift by at most ``slack`` x L: when the packed placement would push
the horizon out by more, the round is re-planned by a two-period LP that
maximizes the round's utility subject to all remaining work still fitting
into the allowed horizon, and that fractional plan is rounded to whole
gangs (the usual fill pass then uses any GPU left over).

``jct_plan`` is the round's plan itself (Hadar's default ``plan="lp"``):
the fluid schedule of all remaining work over periods of growing length
that minimizes the mean time at which the work gets done: the mean-time
part of the relaxation behind ``metrics.bound.jct_floor_s``, applied to
the jobs at hand (the floor's tail constraints did not help as a plan:
3.500 h against 3.507 h on the 96-job trace, in 2.5x the simulation
time). Packing by utility per GPU ranks jobs one at a time; the plan
weighs every job's type against every other's at once and sees what each
choice defers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from hadar.arrays import BoolArray, FloatArray, IntArray
from hadar.policies.hadar import closed, plan_lp
from hadar.solve import highs

_HOUR = 3600.0
#: Branch-and-bound budget of the whole-gang re-plan, in nodes (a work limit, not a time limit: the
#: answer must not depend on how fast the machine is; the MIPs seen so far solve at the root node).
#: Hadar's ``keep_mip_nodes``.
MIP_NODES = 1000
#: What the plan and horizon LPs return is rounded, the horizon to the millisecond and the plan's shares to
#: 1e-9 of a round: two solves of one LP from different starting bases (a warm start, a cold one) agree to
#: about 1e-12, and a decision must not hang on which of them ran (``warm_start``), nor on round-off.
_H_DIGITS = 3
_X_DIGITS = 9


@dataclass(frozen=True, slots=True)
class PlanShape:
    """How a JCT plan cuts time and breaks ties (Hadar's ``plan_split``, ``plan_growth``,
    ``plan_lean_growth`` and ``plan_tie``): this round in ``split`` periods, then periods ``growth``
    times longer each; a lean plan (jobs grouped, groups.py) takes this round as one period and
    grows its periods ``lean_growth`` times (fewer periods, fewer columns); ``tie``: the tie rule's
    weight (plan_lp.TIE)."""

    split: int = 3
    growth: float = 3.0
    lean_growth: float = 5.0
    tie: float = plan_lp.TIE


#: the plan Hadar's defaults shape
PLAN = PlanShape()


@dataclass(frozen=True, slots=True)
class Work:
    """What is left: whole-job rates ``rates[i, r]`` (steps/s on W GPUs of type r), ``remaining[i]`` steps,
    gang sizes ``scale[i]`` and ``capacity[r]`` GPUs of each type (free for this decision). With
    ``count``, row i is a group of ``count[i]`` alike jobs (groups.py) that share its work and may
    run that many gangs at once."""

    rates: FloatArray
    remaining: FloatArray
    scale: IntArray
    capacity: IntArray
    count: FloatArray | None = None

    def gangs(self) -> FloatArray:
        """Gangs each row may run at once (1 per job; a group's member count)."""
        return np.ones(self.remaining.size) if self.count is None else self.count

    def usable(self) -> BoolArray:
        """Where each job can run a whole gang of one type: rate > 0 and at least W GPUs of the type (a
        job that no type fits may span types: then every type where its rate is > 0)."""
        runs: BoolArray = self.rates > 0
        if self.scale.size == 0 or self.scale.max() <= self.capacity.min():
            return runs  # every type has room for every gang (the common case)
        fits = runs & (self.scale[:, None] <= self.capacity[None, :])
        out: BoolArray = np.where(fits.any(axis=1, keepdims=True), fits, runs)
        return out

    def best_rates(self) -> FloatArray:
        """Each job's whole-gang rate on its fastest usable type (0: none)."""
        out: FloatArray = np.where(self.usable(), self.rates, 0.0).max(axis=1)
        return out

    def pairs(self) -> tuple[IntArray, IntArray]:
        """(job, type) index pairs where the job can run (``usable``) and has work left."""
        jobs, types = np.nonzero(self.usable() & (self.remaining[:, None] > 0))
        return jobs, types

    def progress(self, counts: dict[int, dict[int, int]], round_s: float) -> FloatArray:
        """Steps each job makes in one round of a placement (sync: a mixed gang runs at its slowest type)."""
        done = [0.0] * self.remaining.size
        n = self.rates.shape[1]
        rates = self.rates.ravel().tolist()
        for i, c in counts.items():
            if len(c) == 1:
                done[i] = round_s * rates[i * n + next(iter(c))]
            elif c:
                done[i] = round_s * min(rates[i * n + r] for r in c)
        out: FloatArray = np.minimum(np.array(done, dtype=float), self.remaining)
        return out


def horizon_s(work: Work, warm: highs.Warm | None = None, names: IntArray | None = None) -> float:
    """Least time in which ``work`` can be finished (fractional GPU-time, gangs and capacities respected).
    ``warm``, ``names``: a warm start mapped by the rows' names, as in :func:`jct_plan` (the horizon
    is the LP's optimal value, the same from any start up to rounding)."""
    return horizon(work, warm, names).s


@dataclass(frozen=True, slots=True)
class Horizon:
    """A horizon LP's answer: ``s``, what :func:`horizon_s` returns, and the fluid plan behind it:
    ``hours[j]`` of job ``ii[j]``'s gang on type ``rr[j]`` (``work.pairs()``; none where the LP failed)."""

    s: float
    work: Work
    ii: IntArray
    rr: IntArray
    hours: FloatArray

    def bound_s(self, after: Work) -> float:
        """An upper bound on ``horizon_s(after)``, where ``after`` is this work with less left (the same
        rates, gang sizes and capacities; groups' gangs as ``after`` counts them): the time of this
        plan scaled, job by job, to exactly what is left. That scaled plan is a feasible point of
        ``after``'s LP, so the LP's optimum is at most its time (inf where it cannot be built)."""
        ii, rr = self.ii, self.rr
        if not np.isfinite(self.s):
            return float("inf")
        m, n = self.work.rates.shape
        rem0 = self.work.remaining[ii]
        served = np.bincount(ii, weights=self.work.rates[ii, rr] * _HOUR / rem0 * self.hours, minlength=m)
        left = np.maximum(after.remaining, 0.0)
        if np.any((left > 0) & (served <= 0)):
            return float("inf")
        y = self.hours * left[ii] / rem0 / np.where(served > 0, served, 1.0)[ii]
        load = np.bincount(rr, weights=after.scale[ii] * y, minlength=n)
        cap = after.capacity.astype(float)
        if np.any((load > 0) & (cap <= 0)):
            return float("inf")
        per_type = np.divide(load, cap, out=np.zeros(n), where=cap > 0)
        per_job = np.bincount(ii, weights=y, minlength=m) / after.gangs()
        return float(max(per_type.max(initial=0.0), per_job.max(initial=0.0))) * _HOUR


def horizon(work: Work, warm: highs.Warm | None = None, names: IntArray | None = None) -> Horizon:
    """:func:`horizon_s` with the LP's plan (:class:`Horizon`)."""
    ii, rr = work.pairs()
    if ii.size == 0:
        return Horizon(0.0, work, ii, rr, np.zeros(0))
    got = closed.horizon(work.remaining, work.rates, work.scale, work.capacity, work.gangs(), ii, rr)
    if got is not None:  # the longest job's own time sets it: no LP (its warm start waits for the next one)
        return Horizon(round(got[0], _H_DIGITS), work, ii, rr, got[1])
    m, n = work.rates.shape
    k = ii.size
    frac = work.rates[ii, rr] * _HOUR / work.remaining[ii]  # share of the job's remaining work per hour
    h = k  # column of the horizon (hours)
    # capacity rows m + r: sum s_i y_ir - C_r H <= 0; job rows m + n + i: sum_r y_ir - H <= 0
    a = _matrix([_columns(ii, rr, frac, work.scale, m, n, 0)],
                (m + np.arange(n + m), np.concatenate([-work.capacity.astype(float), -work.gangs()])), m + n + m)
    b = np.concatenate([-(work.remaining > 0).astype(float), np.zeros(n + m)])
    c = np.zeros(k + 1)
    c[h] = 1.0
    named = None if names is None or n > 64 else _horizon_names(names, ii, rr, n)
    res = highs.minimize(c, a, b, start=None if warm is None else highs.Start(warm, names=named))
    if res is None:
        return Horizon(float("inf"), work, ii, rr, np.zeros(k))
    return Horizon(round(float(res.x[h]) * _HOUR, _H_DIGITS), work, ii, rr, np.maximum(res.x[:k], 0.0))


def _horizon_names(rows: IntArray, ii: IntArray, rr: IntArray, n: int) -> tuple[IntArray, IntArray]:
    """Names of a horizon LP's columns (row i, type r; the horizon) and rows (demand i, capacity r, job i)."""
    name = np.asarray(rows, dtype=np.int64)
    return (np.concatenate([(name[ii] * 64 + rr) * 4, [-4]]),
            np.concatenate([name * 4 + 1, np.arange(n) * 4 + 2, name * 4 + 3]))


def _columns(ii: IntArray, rr: IntArray, frac: FloatArray, scale: IntArray, m: int, n: int,
             shift: int) -> tuple[IntArray, FloatArray]:
    """One column per (job, type) pair, each with its demand row i (-share), capacity row m + shift + r
    (s_i) and job row m + n + shift + i (1): the columns' row indices and values, column by column
    (rows ascending in each)."""
    rows = np.column_stack([ii, m + shift + rr, m + n + shift + ii]).ravel()
    return rows, np.column_stack([-frac, scale[ii].astype(float), np.ones(ii.size)]).ravel()


def _matrix(pairs: list[tuple[IntArray, FloatArray]], last: tuple[IntArray, FloatArray], n_rows: int) -> highs.Csc:
    """The constraint matrix from blocks of three-row columns (``_columns``) and one last column (its
    rows ascending): what ``highs.Csc.of`` builds from the same (row, column, value) triplets."""
    k = sum(rows.size for rows, _ in pairs) // 3
    indptr = np.concatenate([np.arange(0, 3 * k + 1, 3), [3 * k + last[0].size]]).astype(np.int32)
    index = np.concatenate([rows for rows, _ in pairs] + [last[0]]).astype(np.int32)
    return highs.Csc(indptr, index, np.concatenate([vals for _, vals in pairs] + [last[1]]).astype(float),
                     (n_rows, k + 1))


def round_plan(work: Work, value: FloatArray, round_s: float, later_s: float, *, whole: bool = False,
               mip_nodes: int = MIP_NODES) -> tuple[FloatArray, FloatArray] | None:
    """Plan for this round: ``x[i, r]`` = share of the round job i runs on W GPUs of type r, and per
    job the LP's price of its demand (> 0: the job runs because the horizon needs it; zeros when
    ``whole``).

    Maximizes ``sum value[i, r] x[i, r]`` subject to the remaining work, less
    this round's progress, fitting into ``later_s`` after the round; when it
    cannot, the overrun is minimized first. ``whole``: each job runs the whole
    round on one type or not at all (a small MIP, HiGHS branch and bound, at most ``mip_nodes``
    nodes).
    None if the solver fails (the caller keeps its own placement).
    """
    ii, rr = work.pairs()
    m, n = work.rates.shape
    k = ii.size
    if k == 0:
        return np.zeros((m, n)), np.zeros(m)
    per_h = work.rates[ii, rr] * _HOUR / work.remaining[ii]
    round_h, later_h = round_s / _HOUR, max(later_s, 0.0) / _HOUR
    # this round: columns 0..k-1 (share of the round), rows: demand i, capacity m + r, job m + n + i
    # afterwards: columns k..2k-1 (hours), rows: demand i (shared), capacity 2m + n + r, job 2m + 2n + i;
    # column 2k: hours beyond ``later_s`` (the overrun), priced far above any utility
    g = work.gangs()
    a = _matrix([_columns(ii, rr, per_h * round_h, work.scale, m, n, 0),
                 _columns(ii, rr, per_h, work.scale, m, n, m + n)],
                (2 * m + n + np.arange(n + m), np.concatenate([-work.capacity.astype(float), -g])), 2 * (m + n) + m)
    b = np.concatenate([-(work.remaining > 0).astype(float), work.capacity.astype(float), g,
                        work.capacity * later_h, g * later_h])
    gain = value[ii, rr]
    c = np.concatenate([-gain, np.zeros(k), [1e3 * (float(np.abs(gain).sum()) + 1.0) / round_h]])
    upper = np.concatenate([g[ii], np.full(k + 1, np.inf)])
    if whole:
        # HiGHS logs nothing here (``disp`` is off: SciPy sets its ``log_to_console`` false); the HiGHS of
        # SciPy 1.17 still prints one line from C (its MIP solver's repair of a postsolved point) that
        # no option turns off, so a command that promises clean stdout guards it (``hadar.cli``)
        res = milp(c, constraints=LinearConstraint(a.sparse(), -np.inf, b),
                   bounds=Bounds(np.zeros(2 * k + 1), upper),
                   integrality=np.concatenate([np.ones(k), np.zeros(k + 1)]),
                   options={"disp": False, "node_limit": mip_nodes})
        if res.x is None:
            return None
        sol = np.asarray(res.x)
        price = np.zeros(m)
    else:
        got = highs.minimize(c, a, b, col_upper=upper)
        if got is None:
            return None
        sol = got.x
        price = np.maximum(-got.dual[:m], 0.0)
    x = np.zeros((m, n))
    x[ii, rr] = np.clip(sol[:k], 0.0, g[ii])
    return x, price


def periods_s(round_s: float, total_s: float, growth: float = PLAN.growth, split: int = PLAN.split) -> FloatArray:
    """Period lengths for a JCT plan: this round in ``split`` equal parts (so that finishing early in
    the round counts), one more round, then each ``growth`` times the one before, the last one cut
    to end at ``total_s`` (at least two rounds in all)."""
    out = [round_s / split] * split + [round_s]
    while sum(out) < total_s:
        out.append(out[-1] * growth)
    out[-1] -= sum(out) - max(total_s, 2 * round_s)
    if out[-1] <= 0:
        out.pop()
    return np.array(out, dtype=float)


def jct_plan(work: Work, weight: FloatArray, round_s: float, total_s: float, *, lean: bool = False,
             warm: highs.Warm | None = None, names: IntArray | None = None, shape: PlanShape = PLAN
             ) -> tuple[FloatArray, FloatArray] | None:
    """This round's share ``x[i, r]`` (of the round, on W GPUs of type r) in a fluid plan that
    minimizes the weighted mean time at which the remaining work gets done, all of it within
    ``total_s`` from now, and per job the share of its remaining work the plan does this round
    (1: it finishes). None if the solver fails. ``warm``: a warm start (hadar.solve.highs) from the
    basis of an earlier plan, mapped by ``names`` (one int per row of ``work``, e.g. job ids: the
    LP's columns and rows are named by row, type and period). ``lean`` (for rows that are groups of jobs, where
    the round's gangs are spread over the members afterwards): this round is one period, not three,
    and the periods grow 5x rather than 3x (about a third of the columns and simplex iterations).
    ``shape``: those counts and factors, and the tie rule's weight (:class:`PlanShape`).

    Time is split into periods (``periods_s``: this round in thirds, one more
    round, then longer and longer). Variable ``f[i, r, k]``: the share of job i's remaining work done
    on type r in period k, which takes ``d_ir = remaining_i / rate_ir``
    seconds of the job's W GPUs per unit. In period k type r serves at most
    ``C_r x length_k`` GPU-seconds and a job runs at most ``length_k``; every
    job is done; a unit done in period k costs ``weight_i x`` the period's
    midpoint. So the first period goes to the work that finishes the most job
    per GPU-second where it runs (shortest remaining first, on the type with
    the comparative advantage), and what that defers is priced by how long
    it then waits. An overrun column lets the last period stretch (at a price
    far above any gain) so the LP is always feasible.
    """
    ii, rr = work.pairs()
    m, n = work.rates.shape
    k = ii.size
    if k == 0:
        return np.zeros((m, n)), np.zeros(m)
    split = 1 if lean else shape.split
    lens = periods_s(round_s, total_s, shape.lean_growth if lean else shape.growth, split) / _HOUR
    dur = work.remaining[ii] / work.rates[ii, rr] / _HOUR  # hours on W GPUs of r to finish
    live = work.remaining > 0
    g = work.gangs()
    periods = plan_lp.Periods(lens, split, shape.tie)
    now = closed.plan(dur, (ii, rr), periods, weight * g, work.scale, g, work.capacity, live)
    if now is None:  # the GPUs a job prefers are short (or a tie): the LP
        now = plan_lp.solve(work, weight, (ii, rr), dur, periods, warm, names)
        if now is None:
            return None
    x = np.zeros((m, n))
    x[ii, rr] = np.clip(now * dur / (round_s / _HOUR), 0.0, g[ii])
    done = np.bincount(ii, weights=now, minlength=m)
    return np.round(x, _X_DIGITS), np.round(done, _X_DIGITS)
