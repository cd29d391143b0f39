"""The optima of Hadar's horizon and JCT-plan LPs where capacity does not bind, without a solver.

Both LPs (keeper.py) ask, per job, for its remaining work on W GPUs of
some type. No job can finish sooner than on its fastest type alone, so
where the GPUs of each type can hold every job that prefers it at once,
that is the answer, and it can be written down:

* **the horizon** is the longest job's own time on its fastest type, when
  the gang-hours of the jobs that prefer each type fit in that type's
  GPUs over that time (the LP's value is at least that time, and running
  every job on its fastest type reaches it);
* **the JCT plan** runs every job on its fastest type from now until it is
  done, when the gangs that prefer each type fit in its GPUs all at once:
  each job's cost then depends on its own columns alone, and its least is
  to do its work as early as it can (period midpoints rise), on its
  fastest type (the tie rule charges any slower one). That optimum is
  unique where each job's fastest type is (a strict minimum) and weights
  are positive; elsewhere the LP is solved.

In Gavel's steady state (36:36:36, 2 jobs/h) the first holds in 98 % of
the horizon LPs and the second in 18 % of the rounds. Everything else
(where the GPUs a job prefers are short) goes to HiGHS. Each function
returns None where its condition does not hold: the caller then solves.
The answers agree with HiGHS's up to its round-off, which the callers'
rounding (to the millisecond, to 1e-9 of a round) absorbs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hadar.arrays import BoolArray, FloatArray, IntArray

if TYPE_CHECKING:
    from hadar.policies.hadar.plan_lp import Periods

#: how far below a type's capacity its load must stay for the closed forms (clear of round-off)
_ROOM = 1.0 - 1e-9
#: how much slower than a job's fastest type its next one must be for the plan's closed form
_CLEAR = 1.0 + 1e-6


def fastest(seconds: FloatArray, ii: IntArray, rr: IntArray, shape: tuple[int, int]
            ) -> tuple[IntArray, FloatArray]:
    """Per job that has pairs (``ii``, ``rr``: each pair's job and type; ``shape``: jobs x types), in
    job order: the pair with the least ``seconds`` among its pairs (the first type of equals), and
    those jobs' rows of ``seconds`` by type (inf where a job has no pair) for :func:`clear`."""
    dense = np.full(shape, np.inf)
    dense[ii, rr] = seconds
    pos = np.zeros(shape, dtype=np.int64)
    pos[ii, rr] = np.arange(ii.size)
    jobs = np.flatnonzero(np.isfinite(dense).any(axis=1))
    rows = dense[jobs]
    return pos[jobs, rows.argmin(axis=1)], rows


def clear(rows: FloatArray) -> bool:
    """Whether every job's fastest type is clear of its next (``rows``: as :func:`fastest` gives them):
    that one at least ``_CLEAR`` x slower (a near tie is the LP's to break, by its tie rule)."""
    if rows.shape[1] < 2:
        return True
    two = np.partition(rows, 1, axis=1)
    return bool(np.all(two[:, 1] > two[:, 0] * _CLEAR))


def horizon(remaining: FloatArray, rates: FloatArray, scale: IntArray, capacity: IntArray, gangs: FloatArray,
            ii: IntArray, rr: IntArray) -> tuple[float, FloatArray] | None:
    """The horizon LP's optimum in seconds, unrounded, and hours per pair (``ii``, ``rr``: every job
    with work left and every type it can use), where the longest job's own time on its fastest type
    sets it; None elsewhere (and where a job with work left has no pair: the LP then fails)."""
    if ii.size == 0:
        return None
    seconds = remaining[ii] / rates[ii, rr]
    best, _ = fastest(seconds, ii, rr, rates.shape)
    if best.size != int(np.count_nonzero(remaining > 0)):
        return None
    jobs = ii[best]
    longest = float((seconds[best] / gangs[jobs]).max())
    load = np.bincount(rr[best], weights=scale[jobs] * seconds[best], minlength=rates.shape[1])
    if np.any(load > capacity * longest * _ROOM):
        return None
    hours = np.zeros(ii.size)
    hours[best] = seconds[best] / 3600.0
    return longest, hours


def plan(dur: FloatArray, pairs: tuple[IntArray, IntArray], periods: Periods, weight: FloatArray,
         scale: IntArray, gangs: FloatArray, capacity: IntArray, live: BoolArray) -> FloatArray | None:
    """The JCT plan's share of each pair's job (``pairs``: (job, type) index arrays) done in this
    round's ``periods.split`` periods (``dur``: hours on W GPUs of the pair's type to finish the job;
    ``periods.lens``: the periods, in hours; ``weight``: per job, as the LP's costs weigh it), where
    every job runs on its fastest type from now until it is done; None where the gangs that prefer a
    type do not all fit in it at once, a job's fastest type is not strict, a weight is not positive,
    or a job would not finish within the periods."""
    (ii, rr), lens, split = pairs, periods.lens, periods.split
    best, rows = fastest(dur, ii, rr, (live.size, capacity.size))
    jobs = ii[best]
    if best.size != int(np.count_nonzero(live)) or np.any(weight[jobs] <= 0) or not clear(rows):
        return None
    load = np.bincount(rr[best], weights=scale[jobs] * gangs[jobs], minlength=capacity.size)
    if np.any(load > capacity):
        return None
    per_period = lens[None, :] * (gangs[jobs] / dur[best])[:, None]  # share of the job each period can do
    reach = np.minimum(np.cumsum(per_period, axis=1), 1.0)
    if np.any(reach[:, -1] < 1.0):
        return None  # it would overrun the plan's span: the LP prices that
    done = np.diff(reach, axis=1, prepend=0.0)  # each period's share, earliest first
    now = np.zeros(ii.size)
    now[best] = done[:, :split].sum(axis=1)
    return now
