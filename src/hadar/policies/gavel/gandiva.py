"""Gandiva's packing (Gavel's ``gandiva``): equal shares over jobs alone and pairs, pairs kept while they pay.

While the jobs' GPU demand fits the cluster, every job gets an equal ``1/m``
slice of every type (``isolated``). Once it does not, jobs are grouped in
pairs of the same GPU count that share the same GPUs, and every *unit* (a
pair or a job left alone) gets the equal slice: ``x_uj = (N_j / U) / s_u``,
each row divided by ``max(1, its sum)``. A pair's time on a type where the
table measured no co-located rate for one of its jobs is 0.

Introspection, at every allocation: a pair stays together while both jobs
are live and its *packing gain* is at least 1 (packing is not worse than
time slicing); the other jobs are grouped afresh. Two ways to group:

* default (measured): the gain of a pair on type ``j`` is
  ``r_a / T_aj + r_b / T_bj`` (co-located rates over rates alone; 0 where a
  co-located rate is 0), averaged over the types with GPUs where both jobs
  run alone, weighted by their GPU counts. Candidate pairs with a gain above
  1 are taken greedily, best gain first, ties by the smaller job ids. No
  decision reads a type's name.
* ``gavel_compat`` (``--gavel-compat`` sets it): Gavel's grouping. The gain
  is the sum over types of ``r_a / T_aj + r_b / T_bj`` (0 if any co-located
  rate is 0); ungrouped jobs (ascending id) are paired by ``random.sample``
  of Python's ``random.Random(seed)``, one draw per job, as Gavel's
  ``GandivaPolicy`` does; the generator's state travels in the allocation's
  memo, so a run replays Gavel's draws as long as it re-solves when Gavel
  does. Under it the policy declares itself type-aware, so that the rounds
  walk types in Gavel's fixed order (Gavel shuffles types only for policies
  whose name has neither ``Perf`` nor ``Packing``).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from hadar.model.state import Allocation, SchedulerState
from hadar.policies.base import PolicyTraits
from hadar.policies.gavel.common import Inputs, empty_allocation, finish
from hadar.policies.registry import register

MEMO_PAIRS = "gandiva/pairs"  # ((job id, job id), ...) grouped last time
MEMO_RNG = "gandiva/rng"  # gavel_compat: the state of Gavel's random.Random
#: a pair stays grouped while its gain is at least this; a new measured pair needs more (Gavel's 1.0)
KEEP_GAIN = 1.0


def _ratios(state: SchedulerState, inp: Inputs, a: int, b: int) -> list[tuple[float, float]]:
    """Per type: (gain of the pair there, or -1 where a job cannot run alone; capacity)."""
    ja, jb = state.jobs[a], state.jobs[b]
    out = []
    for j, t in enumerate(state.gpu_types):
        ta, tb = inp.throughputs[a, j], inp.throughputs[b, j]
        if ta <= 0 or tb <= 0:
            out.append((-1.0, float(inp.capacities[j])))
            continue
        ra, rb = state.table.pair_rates(ja.job_type, jb.job_type, ja.scale_factor, t)
        out.append((ra / ta + rb / tb if ra > 0 and rb > 0 else 0.0, float(inp.capacities[j])))
    return out


def measured_gain(state: SchedulerState, inp: Inputs, a: int, b: int) -> float:
    """Capacity-weighted mean over the types with GPUs where both run alone of ``r_a/T_a + r_b/T_b``;
    0 if the table has no co-located rate on one of them (the pair could not use its share there)."""
    parts = [(g, c) for g, c in _ratios(state, inp, a, b) if g >= 0 and c > 0]
    total = sum(c for _, c in parts)
    if total <= 0 or any(g == 0 for g, _ in parts):
        return 0.0
    return sum(g * c for g, c in parts) / total


def gavel_gain(state: SchedulerState, inp: Inputs, a: int, b: int) -> float:
    """Gavel's ``_get_normalized_throughput``: the sum over all types; 0 if a co-located rate is 0."""
    parts = _ratios(state, inp, a, b)
    return 0.0 if any(g <= 0 for g, _ in parts) else sum(g for g, _ in parts)


def equal_unit_shares(state: SchedulerState, inp: Inputs, units: Sequence[tuple[int, ...]]) -> Allocation:
    """Gavel's equal split over units (rows of ``state.jobs``), as fractions alone and pair shares."""
    m, n = inp.shape
    x = np.zeros((m, n))
    pairs: dict[tuple[int, int], tuple[float, ...]] = {}
    for unit in units:
        row = inp.capacities / len(units) / inp.scale_factors[unit[0]]
        row = row / max(1.0, float(row.sum()))
        if len(unit) == 1:
            x[unit[0]] = row
            continue
        a, b = state.jobs[unit[0]], state.jobs[unit[1]]
        rates = [state.table.pair_rates(a.job_type, b.job_type, a.scale_factor, t) for t in state.gpu_types]
        pairs[(a.job_id, b.job_id)] = tuple(float(v) if min(r) > 0 else 0.0 for v, r in zip(row, rates, strict=True))
    return finish(state, x, inp.active, pairs=pairs)


@register("gandiva", "Gandiva's packing: equal shares over jobs alone and pairs of jobs sharing GPUs once the "
                     "cluster is oversubscribed, pairs chosen by measured co-location gain and kept while it is "
                     "at least 1 (Gavel)")
class Gandiva:
    TRAITS: ClassVar[PolicyTraits] = PolicyTraits(type_aware=False)
    ADVANCED: ClassVar[Mapping[str, str]] = {
        "seed": "seed of Gavel's random grouping (only with `gavel_compat`; a run passes its `--seed`)",
        "gavel_compat": "group jobs at random as Gavel's gandiva does, replaying its seeded draws "
                        "(`--gavel-compat` sets it); default: by measured co-location gain",
    }
    name: ClassVar[str] = "gandiva"

    def __init__(self, *, seed: int = 0, gavel_compat: bool = False) -> None:
        self.seed = int(seed)
        self.gavel_compat = bool(gavel_compat)

    @property
    def traits(self) -> PolicyTraits:
        return replace(self.TRAITS, type_aware=self.gavel_compat)

    def allocate(self, state: SchedulerState) -> Allocation:
        if not state.jobs:
            return empty_allocation(state, memo=dict(state.memo))
        inp = Inputs.of(state)
        row = {job.job_id: i for i, job in enumerate(state.jobs)}
        gain = gavel_gain if self.gavel_compat else measured_gain
        kept = [(row[a], row[b]) for a, b in state.memo.get(MEMO_PAIRS, ())
                if a in row and b in row and gain(state, inp, row[a], row[b]) >= KEEP_GAIN]
        order = sorted(range(len(state.jobs)), key=lambda i: state.jobs[i].job_id)
        memo: dict[str, Any] = dict(state.memo)
        if float(inp.scale_factors.sum()) <= float(inp.capacities.sum()):  # fits: no packing (grouping kept)
            memo[MEMO_PAIRS] = tuple((state.jobs[a].job_id, state.jobs[b].job_id) for a, b in kept)
            return replace(equal_unit_shares(state, inp, [(i,) for i in order]), memo=memo)
        grouped = {i for p in kept for i in p}
        pool = [i for i in order if i not in grouped]
        if self.gavel_compat:
            rng = random.Random(self.seed)
            if MEMO_RNG in state.memo:
                rng.setstate(state.memo[MEMO_RNG])
            new = _random_pairs(pool, inp.scale_factors, rng)
            memo[MEMO_RNG] = rng.getstate()
        else:
            new = _measured_pairs(state, inp, pool)
        pairs = kept + new
        memo[MEMO_PAIRS] = tuple((state.jobs[a].job_id, state.jobs[b].job_id) for a, b in pairs)
        paired = {i for p in pairs for i in p}
        units = [tuple(sorted(p, key=lambda i: state.jobs[i].job_id)) for p in pairs]
        units += [(i,) for i in order if i not in paired]
        return replace(equal_unit_shares(state, inp, units), memo=memo)


def _random_pairs(pool: list[int], scale: np.ndarray, rng: random.Random) -> list[tuple[int, int]]:
    """Gavel's loop: up to ``len(pool)`` draws of two jobs; a draw of different GPU counts is wasted."""
    left = list(pool)
    out: list[tuple[int, int]] = []
    tries, n = 0, len(left)
    while len(left) > 1 and tries < n:
        tries += 1
        a, b = rng.sample(left, 2)
        if scale[a] != scale[b]:
            continue
        left.remove(a)
        left.remove(b)
        out.append((a, b))
    return out


def _measured_pairs(state: SchedulerState, inp: Inputs, pool: list[int]) -> list[tuple[int, int]]:
    """Greedy matching by gain (above ``KEEP_GAIN``), best first; ties by the job ids."""
    ids = [state.jobs[i].job_id for i in pool]
    cands = []
    for x, a in enumerate(pool):
        for y in range(x + 1, len(pool)):
            b = pool[y]
            if inp.scale_factors[a] == inp.scale_factors[b]:
                g = measured_gain(state, inp, a, b)
                if g > KEEP_GAIN:
                    cands.append((-g, ids[x], ids[y], a, b))
    cands.sort()
    used: set[int] = set()
    out = []
    for _, _, _, a, b in cands:
        if a not in used and b not in used:
            used.update((a, b))
            out.append((a, b))
    return out
