"""Who the TTD keeper's re-plan may not hold back, and on which GPUs (:class:`Shield`).

Where the keeper re-plans a round (keeper.py), the jobs a ``Shield`` exempts go first in it:
those with little left (``keep_short``), the last ones of a drain that one job's length sets
(``keep_own``), those whose finish-time fairness so far is poor (``keep_fair``), and those that
never ran (``first_round``).

``ftf_cap`` bounds a short job's slowdown there. The keeper's re-plan maximizes the round's
utility with all remaining work still fitting the horizon, and a job it shields is only placed
first, on the re-plan's type. So a job of a few minutes that arrives while gangs set the horizon can be put on
the slowest type although the JCT plan gave it the fastest (Philly 2869ce, docs/hadar.md). With
``ftf_cap``, a job that its best type would finish within the round, and that the re-plan would
finish later than ``ftf_cap`` x its best-type time after its arrival while the JCT plan's round
would not, keeps the plan's GPUs. Whoever it displaces loses at most that round.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hadar.arrays import BoolArray, FloatArray, IntArray
from hadar.model.state import SchedulerState
from hadar.policies.hadar import gangs
from hadar.policies.hadar.gangs import Counts
from hadar.policies.hadar.keeper import Work

#: ``keep_own``: the horizon is one job's own length when it is at most this times the longest remaining
#: time (the default of Hadar's ``keep_own_within``)
OWN_WITHIN = 1.01
#: ``keep_own`` waits for arrivals to pause: none within this share of the horizon (while jobs keep coming,
#: the job that sets the horizon needs its best GPUs, and a job held back now can run on them later; the
#: default of Hadar's ``keep_own_quiet``)
OWN_QUIET = 0.02


@dataclass(frozen=True, slots=True)
class Shield:
    """The keeper's exemptions: the policy's ``keep_short``, ``keep_own``, ``keep_fair`` and ``ftf_cap``
    (and ``keep_own_within``, ``keep_own_quiet``: when ``keep_own`` applies)."""

    short: float | None
    own: float | None
    fair: float | None
    cap: float | None
    own_within: float = OWN_WITHIN
    own_quiet: float = OWN_QUIET

    def jobs(self, state: SchedulerState, work: Work, fresh: BoolArray | None, h: float,
             top: FloatArray | None = None) -> IntArray | None:
        """Jobs the keeper may not hold back (1, else 0; None: none): with ``short`` set, those whose
        remaining best-type time is at most ``short`` rounds; with ``own`` set and the horizon ``h`` set
        by one job's own length (at most ``own_within`` x the longest remaining best-type time) and no
        arrival within ``own_quiet`` x h, those with at most ``own`` x h
        left; with ``fair`` set, those whose finish-time fairness so far, (now - arrival + remaining
        best-type time) / best-type time of the whole job, exceeds ``fair``; with any, those that never
        ran (``fresh``: the first-round rule's jobs). ``top``: ``work.best_rates()``, where known."""
        if self.fair is None and self.short is None and self.own is None:
            return None
        top = work.best_rates() if top is None else top
        best = np.where(top > 0, top, np.inf)
        left = work.remaining / best
        out = np.zeros(len(state.jobs), dtype=int)
        if self.short is not None:
            out |= left <= self.short * state.round_s
        if self.own is not None and h <= self.own_within * float(left.max()) and \
                state.now_s - max(j.arrival_s for j in state.jobs) >= self.own_quiet * h:
            out |= left <= self.own * h
        if self.fair is not None:
            total = np.array([j.total_steps for j in state.jobs], dtype=float)
            arrival = np.array([j.arrival_s for j in state.jobs], dtype=float)
            so_far = (state.now_s - arrival + left) / np.maximum(total / best, 1e-9)
            out |= so_far > self.fair
        if fresh is not None:
            out = np.maximum(out, fresh.astype(int))
        return out if out.any() else None

    def apply(self, state: SchedulerState, work: Work, share: FloatArray, counts: Counts, fresh: BoolArray | None,
              h: float) -> tuple[FloatArray, IntArray]:
        """The keeper's re-plan ``share`` and its shield for ``gangs.from_plan`` (2: placed first, on the
        JCT plan's GPUs ``counts``: ``paced``; 1: placed next, on the re-plan's types; 0: by the re-plan)."""
        top = work.best_rates()  # read by both rules
        shield = self.jobs(state, work, fresh, h, top)
        return paced(state, work, share, np.zeros(len(state.jobs), dtype=int) if shield is None else shield,
                     counts, self.cap, top)


def at_risk(state: SchedulerState, work: Work, guard: float | None) -> BoolArray | None:
    """The tail guard of Hadar's objective (``ftf_guard``, docs/hadar.md): the jobs that, run this round
    on their slowest type (whatever type the plan picks) and then on their best, would finish later
    than ``guard`` times their isolated time: the whole job at its best type's pace on a 1/m share of the
    cluster's GPUs, m the jobs active now (Gavel's ``isolated`` baseline, which finish-time fairness is
    measured against, is blind to types). None: the guard is off or no job is at risk."""
    if guard is None or not state.jobs:
        return None
    top = work.best_rates()
    m = len(state.jobs)
    iso = top * np.minimum(1.0, float(state.capacities().sum()) / (m * work.scale.astype(float)))
    total = np.array([j.total_steps for j in state.jobs], dtype=float)
    arrival = np.array([j.arrival_s for j in state.jobs], dtype=float)
    slow = np.where(work.usable(), work.rates, np.inf).min(axis=1)
    slow = np.where(np.isfinite(slow), slow, 0.0)  # a job no type runs: it waits this round
    done = np.minimum(work.remaining, slow * state.round_s)  # this round on its slowest type
    this = np.divide(done, slow, out=np.full(m, float(state.round_s)), where=slow > 0)
    then = np.divide(work.remaining - done, top, out=np.full(m, np.inf), where=top > 0)
    alone = np.divide(total, iso, out=np.full(m, np.inf), where=iso > 0)
    out: BoolArray = (work.remaining > 0) & (top > 0) & (
        state.now_s + np.where(then > 0, state.round_s, this) + then - arrival > guard * alone)
    return out if out.any() else None


def paced(state: SchedulerState, work: Work, share: FloatArray, shield: IntArray, counts: Counts,
          cap: float | None, top: FloatArray) -> tuple[FloatArray, IntArray]:
    """The keeper's re-plan ``share`` (and its ``shield``, for ``gangs.from_plan``) with ``cap``: a job its
    best type would finish within this round, that the re-plan would finish later than ``cap`` x its
    best-type time after arrival while the JCT plan's round ``counts`` would not (on one type), keeps
    the plan's GPUs, ahead of the re-plan (``shield`` 2). ``top``: each job's ``work.best_rates()``."""
    if cap is None:
        return share, shield
    left = work.remaining
    short = (top > 0) & (left > 0) & (left <= top * state.round_s)
    if not short.any():
        return share, shield
    since = state.now_s - np.array([j.arrival_s for j in state.jobs], dtype=float)
    alone = np.array([j.total_steps for j in state.jobs], dtype=float) / np.where(top > 0, top, 1.0)
    budget = cap * alone - since  # seconds from now within which a job must finish
    slow = short & (_planned_s(work, share, state.round_s) > budget)
    if not slow.any():
        return share, shield
    mine = gangs.shares(counts, work.scale, share.shape[1])
    keep = slow & (_planned_s(work, mine, state.round_s) <= budget) & ((mine > 0).sum(axis=1) == 1)
    if not keep.any():
        return share, shield
    return np.where(keep[:, None], mine, share), np.where(keep, 2, shield)


def _planned_s(work: Work, plan: FloatArray, round_s: float) -> FloatArray:
    """Seconds from now until each job finishes under ``plan`` (shares of the round per type): where the
    plan finishes it within the round, the plan's time on it (its shares run one after another, at their
    mean rate); beyond the round, at this round's pace (inf: no GPUs)."""
    left = work.remaining
    pace = (plan * work.rates).sum(axis=1)  # steps in this round per second of the round
    taken = np.where(pace * round_s >= left, np.minimum(plan.sum(axis=1), 1.0), 1.0)
    out: FloatArray = np.divide(left * taken, pace, out=np.full(left.size, np.inf), where=pace > 0)
    return out
