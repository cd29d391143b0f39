"""Whole gangs for Hadar: the dual subroutine with a keep-your-GPUs candidate, the fill pass, and
the rounding of a fractional plan to whole gangs.

Counts are ``job index -> {type index: GPUs}``; every function here is pure
except for the ``PriceBook`` and ``counts`` it is handed to fill.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hadar.arrays import FloatArray, IntArray
from hadar.model.cluster import Cluster
from hadar.model.state import SchedulerState
from hadar.policies.hadar.pricing import Offer, PriceBook, best_offer

if TYPE_CHECKING:
    from hadar.policies.hadar.keeper import Work

Counts = dict[int, dict[int, int]]


def shares(counts: Counts, scale: FloatArray | IntArray, n_types: int) -> FloatArray:
    """``counts`` as shares of each job's gang per type (jobs x types; 0 where a job has no GPUs)."""
    out: FloatArray = np.zeros((len(scale), n_types))
    size = scale.tolist()
    for i, c in counts.items():
        for r, k in c.items():
            out[i, r] = k / size[i]
    return out


def value_of(c: dict[int, int], rates: FloatArray | list[float], value: FloatArray | list[float], w: int,
             rate_model: str) -> float:
    """Utility of the placement ``c`` (sync: its slowest type's value; additive: each GPU's share)."""
    if rate_model == "sync":
        return float(value[next(iter(c)) if len(c) == 1 else min(c, key=lambda r: rates[r])])
    return sum(k * float(value[r]) / w for r, k in c.items())


def respond(book: PriceBook, rates: FloatArray, value: FloatArray, w: int, prev: dict[int, int] | None,
            discount: float, rate_model: str) -> Offer | None:
    """Dual subroutine, with the previous placement (no restart) as an extra candidate."""
    offer = best_offer(book, rates, value * discount, w, rate_model=rate_model)
    if prev is None or discount >= 1.0 or any(book.free[r] < k for r, k in prev.items()):
        return offer
    cost = sum(book.price(r, n) for r, k in prev.items() for n in range(k))
    keep = Offer(dict(prev), value_of(prev, rates, value, w, rate_model), cost)
    return keep if offer is None or keep.payoff >= offer.payoff else offer


def fill(book: PriceBook, x: FloatArray, value: FloatArray, scale: IntArray, counts: Counts,
         waiting: list[int], rate_model: str) -> None:
    """Fill pass: free GPUs go to waiting jobs (priority order), then let placed jobs move up to
    faster free GPUs, so no GPU idles while a job it could speed up runs. Adds to ``counts``."""
    flat = PriceBook(book.capacity, 1.0, 1.0, 0.0)  # free GPUs cost nothing now
    flat.free = book.free.copy()
    left = int(flat.free.sum())  # GPUs still free
    for i in waiting:
        if left == 0:
            return
        offer = best_offer(flat, x[i], value[i], int(scale[i]), rate_model=rate_model)
        if offer is not None and offer.utility > 0:
            flat.take(offer.counts)
            left -= sum(offer.counts.values())
            counts[i] = offer.counts
    # upgrade pass, in priority order, on plain lists (the book's free counts only where an offer reads them);
    # a sync job with no type worth more than its placement cannot gain (_may_gain) and keeps it
    n, sync = x.shape[1], rate_model == "sync"
    free, rates, values, sizes = flat.free.tolist(), x.ravel().tolist(), value.ravel().tolist(), scale.tolist()
    top = np.where(x > 0, value, -np.inf).max(axis=1, initial=-np.inf).tolist()
    for i in list(counts):
        if left == 0:
            return
        mine = counts[i]
        if sync and len(mine) == 1 and top[i] <= values[i * n + next(iter(mine))] * (1 + 1e-9):
            continue  # the common case below, value_of's answer read directly: no type is worth more
        rate, val = rates[i * n:(i + 1) * n], values[i * n:(i + 1) * n]
        w = int(sizes[i])
        cur = value_of(mine, rate, val, w, rate_model)
        if rate_model == "sync" and top[i] <= cur * (1 + 1e-9):
            continue
        for r, k in mine.items():
            free[r] += k
        left += sum(mine.values())
        if rate_model != "sync" or _may_gain(free, rate, val, w, cur * (1 + 1e-9)):
            flat.free[:] = free
            offer = best_offer(flat, x[i], value[i], w, rate_model=rate_model)
            if offer is not None and offer.utility > cur * (1 + 1e-9):
                mine = offer.counts
        for r, k in mine.items():
            free[r] -= k
        left -= sum(mine.values())
        counts[i] = mine


def _may_gain(free: list[int], rates: list[float], value: list[float], w: int, above: float) -> bool:
    """Whether some sync placement of ``w`` GPUs out of ``free`` is worth more than ``above``: its
    slowest type s has ``value[s] > above`` and the types at least as fast as s have ``w`` free."""
    for s, rate in enumerate(rates):
        if rate > 0 and value[s] > above and sum(f for f, q in zip(free, rates, strict=True) if q >= rate) >= w:
            return True
    return False


def previous_counts(state: SchedulerState) -> Counts:
    """GPUs per type each job held last round (jobs that held a whole gang). Read only: the last
    state's answer is kept and handed out again for the same state (a round asks several times)."""
    prev = _PREVIOUS[-1:]  # one read: a decision in another thread may replace it meanwhile
    if prev and prev[0][0] is state:
        return prev[0][1]
    jobs = state.jobs
    held, sizes = [j.previous_gpus for j in jobs], [j.scale_factor for j in jobs]
    last = prev[0] if prev and prev[0][0].cluster is state.cluster else None
    if last is not None and last[3] == held and last[4] == sizes:  # no job moved, came or went: the same answer
        _PREVIOUS[:] = [(state, last[1], last[2], held, sizes)]
        return last[1]
    type_of = _type_indices(state.cluster)
    seen = last[2] if last is not None else {}
    out: Counts = {}
    kept: dict[tuple[int, ...], dict[int, int]] = {}  # this round's GPU tuples' counts (for the next round)
    for i, (gpus, size) in enumerate(zip(held, sizes, strict=True)):
        if len(gpus) == size:
            c = seen.get(gpus)
            if c is None:
                c = {}
                for g in gpus:
                    r = type_of[g]
                    c[r] = c.get(r, 0) + 1
            out[i] = kept[gpus] = c
    _PREVIOUS[:] = [(state, out, kept, held, sizes)]
    return out


#: the last state's previous_counts (by identity), its counts per GPU tuple (a job keeps its tuple), and its
#: jobs' previous GPUs and gang sizes (a state that has the same ones has the same answer)
_PREVIOUS: list[tuple[SchedulerState, Counts, dict[tuple[int, ...], dict[int, int]], list[tuple[int, ...]],
                      list[int]]] = []
_TYPE_INDICES: list[tuple[Cluster, tuple[int, ...]]] = []  # the last cluster's GPU id -> type index


def _type_indices(cluster: Cluster) -> tuple[int, ...]:
    """GPU id -> index of its type in ``cluster.gpu_types`` (kept for the last cluster, by identity)."""
    last = _TYPE_INDICES[-1:]  # one read (threads may replace it meanwhile)
    if last and last[0][0] is cluster:
        return last[0][1]
    index = {t: r for r, t in enumerate(cluster.gpu_types)}
    out = tuple(index[t] for t in cluster.gpu_type_of)
    _TYPE_INDICES[:] = [(cluster, out)]
    return out


def from_plan(state: SchedulerState, work: Work, value: FloatArray, plan: FloatArray, price: FloatArray,
              order: IntArray, rate_model: str, first: IntArray | None = None) -> Counts:
    """Whole gangs from a fractional plan ``plan[i, r]`` (share of the round on W GPUs of type r) for the
    jobs of ``work`` (their rates, gang sizes and the GPUs free of each type; ``value``: their utilities):
    the jobs the LP prices as critical (the horizon needs them) first, then by planned share and
    packing ``order``; each on its planned type (its previous one if the plan mostly agrees, else
    the largest share); leftover GPUs go through the fill pass. ``first``: 2 = the plan finishes
    the job this round (they go first), 1 = it never ran or the keeper may not hold it back (next);
    each of the two in packing ``order`` (shortest first for the ``jct`` utility)."""
    x, scale = work.rates, work.scale
    book = PriceBook(work.capacity, 1.0, 1.0, 0.0)
    prev = previous_counts(state)
    rank = np.empty(len(order), dtype=int)
    rank[order] = np.arange(len(order))
    share = plan.sum(axis=1)
    counts: Counts = {}
    waiting: list[int] = []
    critical = (price > 1e-9 * max(float(price.max()), 1e-300)) & (share >= 0.5)
    first = np.zeros(len(share), dtype=int) if first is None else first
    shares, firsts, sizes = share.tolist(), first.tolist(), scale.tolist()
    # each share to 6 digits (0 and 1, the most common, are their own rounding)
    rounded = np.array([v if v == 0.0 or v == 1.0 else round(v, 6) for v in shares], dtype=float)
    rows = plan.tolist()
    by_share = np.argsort(-plan, axis=1).tolist()  # each row as np.argsort(-plan[i]) sorts it
    avail = book.free.tolist()  # the book's free counts, kept here (the book's own only where an offer reads them)
    # first the jobs the plan finishes, then those that never ran or are shielded (each in packing order),
    # then critical ones, then by planned share, price and packing order (rank is unique: a total order)
    for i in np.lexsort((rank, -price, -rounded, ~critical, np.where(first > 0, rank, 0), -first)).tolist():
        s, f = shares[i], firsts[i]
        if f == 0 and s < 0.5:
            waiting.append(i)
            continue
        w = int(sizes[i])
        got = _on_plan(avail, w, rows[i], by_share[i], prev.get(i)) if s >= 0.5 else None
        if got is None:
            book.free[:] = avail
            got = _offered(book, x[i], value[i], w, plan[i], s, rate_model)
        if got is None:
            waiting.append(i)
        else:
            for r, k in got.items():
                avail[r] -= k
            counts[i] = got
    book.free[:] = avail
    if sum(avail) > 0:
        waiting.sort(key=rank.tolist().__getitem__)
        fill(book, x, value, scale, counts, waiting, rate_model)
    return counts


def _on_plan(avail: list[int], w: int, plan: list[float], by_share: list[int], mine: dict[int, int] | None
             ) -> dict[int, int] | None:
    """A job's gang on a planned type (its previous one first where the plan mostly agrees, then by
    planned share) that has ``w`` GPUs free, if any."""
    kept = next(iter(mine)) if mine is not None and len(mine) == 1 else -1
    if kept >= 0 and plan[kept] >= 0.5:  # stay put when the plan mostly agrees
        if avail[kept] >= w:
            return {kept: w}
    else:
        kept = -1
    for r in by_share:
        if r != kept and plan[r] > 1e-6 and avail[r] >= w:
            return {r: w}
    return None


def _offered(book: PriceBook, x: FloatArray, value: FloatArray, w: int, plan: FloatArray, share: float,
             rate_model: str) -> dict[int, int] | None:
    """A job's gang from the dual subroutine on ``book``: where it is placed ahead of the plan (a share
    under 0.5), on any type; else on its planned types only (none of which has a whole gang free)."""
    if share < 0.5:
        offer = best_offer(book, x, value, w, rate_model=rate_model)
    else:
        offer = best_offer(book, np.where(plan > 1e-6, x, 0.0), np.where(plan > 1e-6, value, 0.0), w,
                           rate_model=rate_model)
    return offer.counts if offer is not None else None
