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

from hadar.arrays import FloatArray, IntArray
from hadar.model.state import SchedulerState
from hadar.policies.hadar import gangs
from hadar.policies.hadar.gangs import Counts
from hadar.policies.hadar.keeper import Work


def paced(state: SchedulerState, work: Work, share: FloatArray, shield: IntArray, counts: Counts,
          cap: float | None) -> tuple[FloatArray, IntArray]:
    """The keeper's re-plan ``share`` (and its ``shield``, for ``gangs.from_plan``) with ``cap``: a job its
    best type would finish within this round, that the re-plan would finish later than ``cap`` x its
    best-type time after arrival while the JCT plan's round ``counts`` would not (on one type), keeps
    the plan's GPUs, ahead of the re-plan (``shield`` 2)."""
    if cap is None:
        return share, shield
    left, top = work.remaining, work.best_rates()
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
