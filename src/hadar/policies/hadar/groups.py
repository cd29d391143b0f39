"""Jobs grouped for Hadar's LPs, so that a decision's cost stops growing with the job count.

The JCT plan and the TTD keeper solve LPs with a few columns per job and
type (the plan: per period too): at 2,048 active jobs each took 0.2 s to
20 s. Most of those jobs are alike: the same model at the same gang size
(so the same rates on every type) with similar work left. Above
``limit`` active jobs, the LPs therefore see groups instead of jobs:
jobs with the same rates, gang size and weight whose remaining best-type
times lie in the same band of a geometric grid, the grid as fine as
keeps the groups within ``limit`` (Hadar's ``lp_bands``: by default
bands of 1.05x, 1.1x, 1.2x, 1.5x, 2x, 3x, 5x, 10x, then one group per
class; Gavel's job types give about 80 classes). A group of g jobs is g gangs that share the group's work: its
columns may run g gangs at once, it counts g times in the plan's mean,
and its utility is its members' mean; the plan is then lean (this round
one period, periods growing 5x: keeper.jct_plan). A group's share of a
round goes to its members shortest first (the order that finishes the
most of them, for jobs that run at the same rates), each at most one
whole round and no more than it needs.

At or below ``limit`` jobs every job is its own row and nothing changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hadar.arrays import FloatArray, IntArray
from hadar.policies.hadar.keeper import Work

#: the bands' ratios, finest first (the default of Hadar's ``lp_bands``)
RATIOS = (1.05, 1.1, 1.2, 1.5, 2.0, 3.0, 5.0, 10.0)
_BANDS = 1 << 32  # bands a class may span in a (class, band) key (about 1,000 at most: times from 1e-9 s up)


@dataclass(frozen=True, slots=True)
class Groups:
    """``index[i]``: job i's group; ``count[g]``: its members; ``members``: job indices, each group's
    shortest first (remaining best-type time, then job index)."""

    index: IntArray
    count: FloatArray
    members: list[IntArray]
    first: IntArray | None = None  # each group's first member (None: read from ``members``)

    @property
    def size(self) -> int:
        return int(self.count.size)

    def total(self, per_job: FloatArray) -> FloatArray:
        """Sum over each group's members (``per_job``: one value per job)."""
        out: FloatArray = np.asarray(np.bincount(self.index, weights=per_job, minlength=self.size), dtype=float)
        return out

    def mean_rows(self, per_job: FloatArray) -> FloatArray:
        """Per group and column, the members' mean of ``per_job`` (jobs x columns)."""
        out = np.zeros((self.size, per_job.shape[1]))
        np.add.at(out, self.index, per_job)
        mean: FloatArray = out / self.count[:, None]
        return mean

    @property
    def heads(self) -> IntArray:
        """Each group's first member (for values every member shares: rates, gang size, weight)."""
        if self.first is not None:
            return self.first
        out: IntArray = np.array([m[0] for m in self.members], dtype=np.int64)
        return out

    def first_rows(self, per_job: FloatArray) -> FloatArray:
        """Per group, the row of its first member."""
        out: FloatArray = per_job[self.heads]
        return out


def group(rates: FloatArray, remaining: FloatArray, scale: IntArray, weight: FloatArray, limit: int,
          ratios: tuple[float, ...] = RATIOS) -> Groups | None:
    """Groups for more than ``limit`` jobs (None: at most ``limit`` jobs, each its own group): bands of
    the first of ``ratios`` that keeps them within ``limit``, else one group per class."""
    m = remaining.size
    if m <= limit:
        return None
    cls = _ids(np.column_stack([rates, scale.astype(float), weight]))
    best = rates.max(axis=1)
    t = np.where((best > 0) & (remaining > 0), remaining / np.where(best > 0, best, 1.0), 0.0)
    logt = np.log(np.maximum(t, 1e-9))
    index = cls
    for ratio in ratios:
        # (class, band) pairs as one int64 key in the same order: np.unique numbers them as _ids would
        band = np.floor(logt / np.log(ratio)).astype(np.int64)
        keys, inverse = np.unique(cls * _BANDS + (band - band.min()), return_inverse=True)
        if keys.size <= limit:
            index = inverse.astype(np.int64)
            break
    order = np.lexsort((np.arange(m), t, index))  # by group, then shortest first, then job index
    size = int(index.max()) + 1
    count = np.bincount(index, minlength=size).astype(float)
    starts = np.cumsum(count[:-1]).astype(int)
    return Groups(index, count, np.split(order, starts), np.asarray(order[np.concatenate([[0], starts])],
                                                                    dtype=np.int64))


def _ids(keys: FloatArray) -> IntArray:
    """0, 1, ... per distinct row of ``keys``, numbered in the rows' lexicographic order."""
    order = np.lexsort(keys.T[::-1])
    srt = keys[order]
    new = np.concatenate([[True], (srt[1:] != srt[:-1]).any(axis=1)])
    out = np.empty(keys.shape[0], dtype=np.int64)
    out[order] = np.cumsum(new) - 1
    return out


def spread(groups: Groups, share: FloatArray, rates: FloatArray, remaining: FloatArray, round_s: float
           ) -> tuple[FloatArray, FloatArray]:
    """Per job, its share of the round on W GPUs of each type and the share of its remaining work
    that makes, from each group's ``share[g, r]`` (gang-rounds on type r, up to its count): members
    shortest first, each up to one round and no more than it needs, types in the order of the
    group's share (then type index)."""
    m, n = rates.shape
    x = [0.0] * (m * n)  # x[i * n + r]
    now = [0.0] * m
    by_share = np.lexsort((np.broadcast_to(np.arange(n), share.shape), -share)).tolist()  # each group's row
    rate, rem, order = rates.ravel().tolist(), remaining.tolist(), np.concatenate(groups.members).tolist()
    end = 0
    for g, size in enumerate(groups.count.astype(int).tolist()):
        start, end = end, end + size
        left = share[g].tolist()
        types = [r for r in by_share[g] if left[r] > 1e-12]
        if not types:
            continue
        for i in order[start:end]:
            room, need = 1.0, 1.0  # round left to this job; share of its remaining work still to do
            for r in types:
                if left[r] <= 1e-12 or rate[i * n + r] <= 0:
                    continue
                per = rate[i * n + r] * round_s / rem[i] if rem[i] > 0 else math.inf
                take = min(left[r], room, need / per if per else float(np.divide(need, per)))
                x[i * n + r] += take
                left[r] -= take
                room -= take
                need -= take * per
                if room <= 1e-12 or need <= 1e-12:
                    break
            now[i] = 1.0 - max(need, 0.0)
            if all(left[r] <= 1e-12 for r in types):
                break
    return np.array(x, dtype=float).reshape(m, n), np.array(now, dtype=float)


def lp_work(work: Work, grp: Groups | None, remaining: FloatArray | None = None) -> Work:
    """The LPs' view of ``work`` (with ``remaining`` steps per job instead, if given): the jobs
    themselves, or one row per group (its members' total work, its members with work left)."""
    rem = work.remaining if remaining is None else remaining
    if grp is None:
        return Work(work.rates, rem, work.scale, work.capacity)
    live = grp.total((rem > 0).astype(float))
    return Work(grp.first_rows(work.rates), grp.total(rem), work.scale[grp.heads], work.capacity,
                np.maximum(live, 1.0))
