"""Hadar's utility family: what one round on a placement is worth to a job.

Each utility returns ``value[i, r]``: the utility of job i for one round
when the slowest type of its placement is r (``sync``; with ``additive``
each of its W tasks on r earns ``value[i, r] / W``). Zero where the job's
throughput on r is zero. The primal-dual machinery is the same for all of
them (spec section 3, "expressing other algorithms"):

- ``jct`` (default): the fraction of the job's remaining work done in one
  round, ``w_j * rate * round / remaining``, i.e. shortest remaining time
  first that also counts how much faster the offered GPUs are for it.
- ``fifo``: utility decays with arrival order (earliest first).
- ``fair``: ``1 / attained normalized service`` (least attained service
  first, as Gavel's LAS).
- ``throughput``: the job's rate on r relative to its mean rate over the
  types (raw steps/s of different models are not comparable; normalized,
  the job that gains most from a type gets it: max total throughput).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from hadar.arrays import FloatArray
from hadar.errors import InputError


class Utility(Protocol):
    def values(self, x: FloatArray, ctx: UtilityContext) -> FloatArray: ...


class UtilityContext:
    """Per-job arrays (state order) a utility may read; times in seconds."""

    __slots__ = ("arrival", "attained_gpu_s", "now_s", "priority", "remaining", "round_s", "scale", "weight")

    def __init__(self, now_s: float, round_s: float, remaining: FloatArray, scale: FloatArray, priority: FloatArray,
                 arrival: FloatArray, attained_gpu_s: FloatArray, weight: FloatArray) -> None:
        self.now_s, self.round_s = now_s, round_s
        self.remaining, self.scale, self.priority = remaining, scale, priority
        self.arrival, self.attained_gpu_s, self.weight = arrival, attained_gpu_s, weight


def _best(x: FloatArray) -> FloatArray:
    b = x.max(axis=1)
    return np.where(b > 0, b, 1.0)


class JctUtility:
    """``weight * (rate / best rate) * (round / remaining best-type time) ** exponent``.

    With ``exponent`` = 1 this is exactly spec section 3.1's
    ``w * rate * round / remaining_steps``; smaller exponents soften the
    shortest-first preference.
    """

    def __init__(self, exponent: float = 1.0) -> None:
        self.exponent = exponent

    def values(self, x: FloatArray, ctx: UtilityContext) -> FloatArray:
        best = _best(x)
        t_rem = np.maximum(ctx.remaining / best, 1e-9)
        urgency = (ctx.round_s / t_rem) ** self.exponent
        return (ctx.weight * urgency)[:, None] * (x / best[:, None])


class FifoUtility:
    """Earliest arrival first: ``(rate / best) * (m - rank)`` (ties by id through the stable sort)."""

    def values(self, x: FloatArray, ctx: UtilityContext) -> FloatArray:
        m = len(ctx.arrival)
        rank = np.empty(m)
        rank[np.argsort(ctx.arrival, kind="stable")] = np.arange(m)
        return ((m - rank) * ctx.scale)[:, None] * (x / _best(x)[:, None])


class FairUtility:
    """Least attained service first: ``W * priority * (rate / best) / (1 + attained GPU-s / (W * round))``."""

    def values(self, x: FloatArray, ctx: UtilityContext) -> FloatArray:
        service = ctx.attained_gpu_s / (ctx.scale * ctx.round_s)
        return (ctx.scale * ctx.priority / (1.0 + service))[:, None] * (x / _best(x)[:, None])


class ThroughputUtility:
    """Rate relative to the job's mean rate over types that can run it (x priority)."""

    def values(self, x: FloatArray, ctx: UtilityContext) -> FloatArray:
        pos = x > 0
        mean = np.where(pos.any(axis=1), x.sum(axis=1) / np.maximum(pos.sum(axis=1), 1), 1.0)
        return ctx.priority[:, None] * ctx.scale[:, None] * x / mean[:, None]


UTILITIES = ("jct", "fifo", "fair", "throughput")


def make_utility(name: str, exponent: float = 1.0) -> Utility:
    if name == "jct":
        return JctUtility(exponent)
    if name == "fifo":
        return FifoUtility()
    if name == "fair":
        return FairUtility()
    if name == "throughput":
        return ThroughputUtility()
    raise InputError(f"unknown Hadar utility {name!r}; known: {', '.join(UTILITIES)}")
