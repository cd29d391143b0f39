"""The JCT plan's LP (``keeper.jct_plan``), built on a layout kept from one round to the next.

Columns ``f[pair, period]`` (the share of a job's remaining work done on
a type in a period) at ``pair * p + period``, then the overrun (hours the
last period stretches); rows as linprog stacks them: capacity ``r * p +
k``, job time ``n * p + i * p + k``, then done (one per job with work
left, in job order). Which cell holds a coefficient, and the names warm
starts map bases by, follow from the pairs, the jobs with work left, the
period count and the row names alone. Between arrivals and completions
those stay the same round after round while the values (remaining work,
period lengths) move, so the layout is kept for the last LP's and only
the values are built anew: the same arrays, and the same LP, as building
all of it each time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from hadar.arrays import BoolArray, FloatArray, IntArray
from hadar.solve import highs

if TYPE_CHECKING:
    from hadar.policies.hadar.keeper import Work

#: A JCT plan's tie rule: a unit of work done on a type t times slower than the job's fastest costs as much
#: more as finishing it TIE x (t - 1) of the first period later (docs/hadar.md, "Warm starts"); the
#: default of Hadar's ``plan_tie``.
TIE = 1e-3


class Periods(NamedTuple):
    """A plan's periods: their lengths (hours), how many of the first make up this round, and the tie
    rule's weight (:data:`TIE` by default)."""

    lens: FloatArray
    split: int
    tie: float = TIE


class _Layout(NamedTuple):
    """What an LP's shape fixes: per column its pair (``pair``), the matrix's ``indptr`` and the row of
    each nonzero (``cells``), the rows' lower bounds, and the columns' and rows' names (None: no warm
    start by name)."""

    pair: IntArray
    indptr: IntArray
    cells: IntArray
    lower: FloatArray
    names: tuple[IntArray, IntArray] | None


#: the last LP's shape (its key: sizes and the pairs', live jobs' and row names' bytes) and layout
_LAST: list[tuple[tuple[object, ...], _Layout]] = []


def solve(work: Work, weight: FloatArray, pairs: tuple[IntArray, IntArray], dur: FloatArray, periods: Periods,
          warm: highs.Warm | None, names: IntArray | None) -> FloatArray | None:
    """Per pair, the share of its job done in this round's ``periods.split`` periods (None: no optimum);
    the arguments as ``keeper.jct_plan`` has them (``pairs``: (job, type) index pairs, ``dur``: hours
    on W GPUs per pair)."""
    (ii, rr), lens, split = pairs, periods.lens, periods.split
    m, n = work.rates.shape
    capacity, scale, gangs, live = work.capacity, work.scale, work.gangs(), work.remaining > 0
    k, p = ii.size, lens.size
    lay = _layout(m, n, p, ii, rr, live, names)
    n_ub, n_eq = n * p + m * p, int(live.sum())
    vals = np.column_stack([(dur * scale[ii])[lay.pair], (dur / gangs[ii])[lay.pair], np.ones(k * p)])
    a = highs.Csc(lay.indptr, lay.cells, np.concatenate([vals.ravel(), -capacity.astype(float), -np.ones(m)]),
                  (n_ub + n_eq, k * p + 1))
    b_ub = np.concatenate([np.repeat(capacity.astype(float), p) * np.tile(lens, n), np.tile(lens, m)])
    res = highs.minimize(_costs(weight * gangs, ii, dur, lens, periods.tie), a, np.concatenate([b_ub, np.ones(n_eq)]),
                         lower=lay.lower, start=None if warm is None else highs.Start(warm, names=lay.names),
                         options=highs.PLAN)
    if res is None:
        return None
    now: FloatArray = res.x[:k * p].reshape(k, p)[:, :split].sum(axis=1)
    return now


def _layout(m: int, n: int, p: int, ii: IntArray, rr: IntArray, live: BoolArray, names: IntArray | None) -> _Layout:
    """The layout of the LP of this shape: the last one's when its shape is this one."""
    key = (m, n, p, ii.tobytes(), rr.tobytes(), live.tobytes(), None if names is None else names.tobytes())
    last = _LAST[-1:]  # one read (threads may replace it meanwhile)
    if last and last[0][0] == key:
        return last[0][1]
    k = ii.size
    pair, per = np.repeat(np.arange(k), p), np.tile(np.arange(p), k)
    n_ub, n_eq = n * p + m * p, int(live.sum())
    # column by column (the matrix Csc.of would build from these triplets, without its sort): each
    # f column's rows capacity < job time < done, then the overrun's (every type's and job's last period)
    rows = np.column_stack([rr[pair] * p + per, n * p + ii[pair] * p + per, n_ub + (np.cumsum(live) - 1)[ii[pair]]])
    indptr: IntArray = np.concatenate([np.arange(0, 3 * k * p + 1, 3), [3 * k * p + n + m]]).astype(np.int32)
    index: IntArray = np.concatenate([rows.ravel(), np.arange(n) * p + p - 1, n * p + np.arange(m) * p + p - 1]
                                     ).astype(np.int32)
    lower = np.concatenate([np.full(n_ub, -np.inf), np.ones(n_eq)])
    lay = _Layout(pair, indptr, index, lower, None if names is None else _names(names, ii, rr, n, p, live))
    _LAST[:] = [(key, lay)]
    return lay


def _names(rows: IntArray, ii: IntArray, rr: IntArray, n: int, p: int, live: BoolArray
           ) -> tuple[IntArray, IntArray] | None:
    """Names of the LP's columns and rows (warm starts map bases by them) from its rows' names:
    column (row i, type r, period k), the overrun, then rows capacity (r, k), job time (i, k), done
    (i); None where a name would not fit the code (over 64 types or 1,024 periods)."""
    if n > 64 or p > 1024:
        return None
    name = np.asarray(rows, dtype=np.int64)
    per = np.arange(p)
    cols = (((name[ii] * 64 + rr)[:, None] * 1024 + per) * 4).ravel()
    cap = ((np.arange(n)[:, None] * 1024 + per) * 4 + 1).ravel()
    job = ((name[:, None] * 1024 + per) * 4 + 2).ravel()
    return np.concatenate([cols, [-4]]), np.concatenate([cap, job, name[live] * 4 + 3])


def _costs(weight: FloatArray, ii: IntArray, dur: FloatArray, lens: FloatArray, tie: float = TIE) -> FloatArray:
    """The costs: per (pair, period) column the job's weight x the period's midpoint, plus the tie
    rule (among plans that get the work done at the same times, each job's faster types: ``tie`` x the
    first period's length per unit, in proportion to how much slower than its fastest the type is),
    then the overrun's price. In late periods, between types of close speed, the rule's charge falls
    to HiGHS's own tolerances (1e-7), where which type the LP picked was left to the simplex's path;
    ``highs.PLAN`` solves it to 1e-9."""
    fastest = np.full(weight.size, np.inf)
    np.minimum.at(fastest, ii, dur)
    mid = np.cumsum(lens) - lens / 2
    slower = (dur / fastest[ii] - 1.0)[:, None]
    per_unit = weight[ii][:, None] * (mid[None, :] + tie * lens[0] * slower)
    return np.concatenate([per_unit.ravel(), [1e3 * (float(weight.sum()) + 1.0) * (mid[-1] + 1.0)]])
