"""Hadar's ``ftf_cap``: a bound on a short job's slowdown where the TTD keeper re-plans a round.

The keeper's re-plan maximizes the round's utility with all remaining work still fitting the
horizon, and a job it shields (``first_round``, ``keep_short``) is only placed first, on the
re-plan's type. So a job of a few minutes that arrives while gangs set the horizon can be put on
the slowest type although the JCT plan gave it the fastest (Philly 2869ce, docs/hadar.md). With
``ftf_cap``, a job that its best type would finish within the round, and that the re-plan would
finish later than ``ftf_cap`` x its best-type time after its arrival while the JCT plan's round
would not, keeps the plan's GPUs. Whoever it displaces loses at most that round.
"""

from __future__ import annotations

import numpy as np

from hadar.arrays import BoolArray, FloatArray, IntArray
from hadar.model.state import SchedulerState
from hadar.policies.hadar.gangs import Counts
from hadar.policies.hadar.keeper import Work


def late(state: SchedulerState, work: Work, plan: FloatArray, cap: float | None) -> BoolArray:
    """The jobs their best type would finish within this round that ``plan`` (shares of the round per
    type) would finish later than ``cap`` x their best-type time after arrival (none where ``cap`` is
    None). A job's planned time: where the plan finishes it within the round, the plan's time on it
    (its shares run one after another, at their mean rate); beyond the round, at this round's pace."""
    rates, left = work.rates, work.remaining
    top = work.best_rates()
    short = (top > 0) & (left > 0) & (left <= top * state.round_s)
    if cap is None or not short.any():
        return np.zeros(left.size, dtype=bool)
    pace = (plan * rates).sum(axis=1)  # steps in this round per second of the round
    taken = np.where(pace * state.round_s >= left, np.minimum(plan.sum(axis=1), 1.0), 1.0)
    planned = np.divide(left * taken, pace, out=np.full(left.size, np.inf), where=pace > 0)
    since = state.now_s - np.array([j.arrival_s for j in state.jobs], dtype=float)
    alone = np.array([j.total_steps for j in state.jobs], dtype=float) / np.where(top > 0, top, 1.0)
    out: BoolArray = short & (planned > cap * alone - since)
    return out


def paced(state: SchedulerState, work: Work, share: FloatArray, shield: IntArray, counts: Counts,
          cap: float | None) -> tuple[FloatArray, IntArray]:
    """The keeper's re-plan ``share`` (and its ``shield``, for ``gangs.from_plan``) with ``cap``: a job
    the re-plan would make ``late`` that the JCT plan's round ``counts`` would not (on one type) keeps
    the plan's GPUs, ahead of the re-plan (``shield`` 2)."""
    slow = late(state, work, share, cap)
    if not slow.any():
        return share, shield
    mine = np.zeros_like(share)
    for i, c in counts.items():
        for r, k in c.items():
            mine[i, r] = k / work.scale[i]
    keep = slow & ~late(state, work, mine, cap) & ((mine > 0).sum(axis=1) == 1)
    if not keep.any():
        return share, shield
    return np.where(keep[:, None], mine, share), np.where(keep, 2, shield)
