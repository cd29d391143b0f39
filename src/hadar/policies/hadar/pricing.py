"""Hadar's dual side: exponential per-type prices and the dual subroutine.

Prices are per GPU type. While a round is being packed, the price of the
next free GPU of type r, when ``taken`` of its ``C_r`` GPUs are already
promised, is ``p_r = L * (U / L) ** (steepness * taken / C_r)`` (spec
section 3.2; ``steepness`` = 1 is the textbook online primal-dual curve).

The dual subroutine (spec section 3.3) is a job's best response: the
``W`` GPUs (as counts per type) that maximize utility minus the prices
paid. With the ``sync`` rate model a mixed placement runs at its slowest
type's pace, so for every candidate slowest type ``s`` it takes the ``W``
cheapest free GPUs among types at least as fast as ``s`` for this job;
with ``additive`` every GPU adds its own share, so it takes the ``W`` GPUs
with the largest (utility share - price). Types where the job's
throughput is zero are never used. Cost O(types^2 x W) per job.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hadar.arrays import FloatArray, IntArray


class PriceBook:
    """Per-type GPU prices that rise as a round fills up.

    ``capacity[r]`` GPUs of type r exist, ``free[r]`` are still unpromised
    (capacity - free are taken by earlier placements, and a GPU that is
    busy for another reason simply starts out not free).
    """

    __slots__ = ("_curve", "_low", "_ratio", "_steepness", "capacity", "free")

    def __init__(self, capacity: IntArray | FloatArray, low: float, high: float, steepness: float = 1.0) -> None:
        self.capacity: IntArray = np.asarray(capacity, dtype=int)
        self.free = self.capacity.copy()
        self._low = max(float(low), 1e-300)
        self._ratio = max(float(high) / self._low, 1.0)
        self._steepness = steepness
        # _curve[r][i] = price of the (i+1)-th GPU taken of type r (each type's built when first read)
        self._curve: list[FloatArray | None] = [None] * len(self.capacity)

    def price(self, r: int, nth: int = 0) -> float:
        """Price of the ``nth`` next GPU of type r (0 = the next one); inf if none is left."""
        taken = self.capacity[r] - self.free[r] + nth
        return float(self.curve(r)[taken]) if nth < self.free[r] else float("inf")

    def curve(self, r: int) -> FloatArray:
        """Prices of type r's GPUs in the order they are taken (the i-th entry: the (i+1)-th GPU)."""
        out = self._curve[r]
        if out is None:
            c = self.capacity[r]
            out = self._curve[r] = self._low * self._ratio ** (self._steepness * np.arange(c) / max(c, 1))
        return out

    def take(self, counts: dict[int, int]) -> None:
        for r, k in counts.items():
            if k > self.free[r]:
                raise ValueError(f"type {r}: taking {k} GPUs but only {self.free[r]} free")
            self.free[r] -= k


def price_curve(low: float, high: float, fraction: float, steepness: float = 1.0) -> float:
    """The exponential price ``L * (U/L) ** (steepness * f)`` for a type that is ``fraction`` full."""
    return float(low * max(high / low, 1.0) ** (steepness * fraction))


@dataclass(frozen=True, slots=True)
class Offer:
    """A job's best response: GPUs per type (type index -> count), its utility and total price."""

    counts: dict[int, int]
    utility: float
    cost: float

    @property
    def payoff(self) -> float:
        return self.utility - self.cost


def _cheapest(book: PriceBook, allowed: list[int], w: int, free: IntArray | None = None,
              prefer: FloatArray | None = None) -> tuple[dict[int, int], float] | None:
    """The ``w`` cheapest free GPUs among ``allowed`` types (counts, total price); ties go to ``prefer`` order.

    Each type's prices rise with every GPU taken, so this merges the types' next ``w`` prices,
    cheapest first, an equal price going to the type first in order."""
    avail = book.free if free is None else free
    if sum(int(avail[r]) for r in allowed) < w:
        return None
    order = allowed if prefer is None else sorted(allowed, key=lambda r: -prefer[r])
    if free is None and book._ratio == 1.0 and book._low < float("inf"):
        return _flat(book._low, [int(avail[r]) for r in order], order, w)
    heads: list[list[float]] = []
    for r in order:
        a = min(int(avail[r]), w)
        own = max(min(a, int(book.free[r])), 0)
        taken = int(book.capacity[r] - book.free[r])
        heads.append(book.curve(r)[taken:taken + own].tolist() + [float("inf")] * (a - own))
    pos = [0] * len(order)
    counts: dict[int, int] = {}
    cost = 0.0
    for _ in range(w):
        best_j, best_p = -1, float("inf")
        for j, prices in enumerate(heads):
            if pos[j] < len(prices) and prices[pos[j]] < best_p:
                best_j, best_p = j, prices[pos[j]]
        best_r = order[best_j] if best_j >= 0 else -1
        if best_j >= 0:
            pos[best_j] += 1
        counts[best_r] = counts.get(best_r, 0) + 1
        cost += best_p
    return counts, cost


def _flat(price: float, avail: list[int], order: list[int], w: int) -> tuple[dict[int, int], float]:
    """``_cheapest`` on a flat book (every GPU at ``price``; ``avail`` per type of ``order``, which has
    ``w`` in all): the merge hands each GPU to the first type in order with one left, its cost added
    GPU by GPU as the merge adds it."""
    counts: dict[int, int] = {}
    need = w
    for r, a in zip(order, avail, strict=True):
        k = min(a, need)
        if k > 0:
            counts[r] = k
            need -= k
            if need == 0:
                break
    cost = 0.0
    for _ in range(w):
        cost += price
    return counts, cost


def best_offer(book: PriceBook, rates: FloatArray, value: FloatArray, w: int, *, rate_model: str = "sync",
               free: IntArray | None = None) -> Offer | None:
    """Best response of one job to the current prices.

    ``rates[r]``: the job's whole-job steps/s on W GPUs of type r (0 = cannot
    run there); ``value[r]``: its utility when its slowest type is r (sync)
    or when all W tasks sit on type r (additive: each task earns value/W).
    ``free`` overrides the book's free counts (e.g. GPUs left for a fill
    pass). None when no feasible placement exists.
    """
    types = [r for r in range(len(rates)) if rates[r] > 0]
    if not types:
        return None
    if rate_model == "additive":
        return _best_additive(book, types, value, w, free)
    best: Offer | None = None
    for s in types:  # candidate slowest type
        allowed = [r for r in types if rates[r] >= rates[s]]
        got = _cheapest(book, allowed, w, free, prefer=rates)
        if got is None:
            continue
        counts, cost = got
        slowest = min(counts, key=lambda r: rates[r])
        offer = Offer(counts, float(value[slowest]), cost)
        if best is None or offer.payoff > best.payoff + 1e-15:
            best = offer
    return best


def _best_additive(book: PriceBook, types: list[int], value: FloatArray, w: int,
                   free: IntArray | None) -> Offer | None:
    avail = book.free if free is None else free
    if sum(int(avail[r]) for r in types) < w:
        return None
    counts: dict[int, int] = {}
    utility = cost = 0.0
    for _ in range(w):
        best_r, best_gain, best_p = -1, -float("inf"), 0.0
        for r in types:
            k = counts.get(r, 0)
            if k >= avail[r]:
                continue
            p = book.price(r, k)
            gain = value[r] / w - p
            if gain > best_gain:
                best_r, best_gain, best_p = r, gain, p
        counts[best_r] = counts.get(best_r, 0) + 1
        utility += value[best_r] / w
        cost += best_p
    return Offer(counts, utility, cost)
