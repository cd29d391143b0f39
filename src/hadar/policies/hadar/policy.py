"""Hadar: task-level, per-round primal-dual scheduling (spec/hadar.md section 3).

Every round (trait ``resolve="every_round"``) the policy packs an integral
placement: each job gets nothing or exactly W GPUs, possibly of several
types. Jobs are taken in decreasing order of their best utility per GPU;
each one's dual subroutine buys the W GPUs with the best utility minus
exponential per-type prices, and the prices rise as types fill; a job
whose best payoff is not positive waits. A fill pass then gives GPUs that
are still free to waiting jobs, so no GPU idles while a runnable job waits.
By default (``plan="lp"``) the round is then taken from a fluid plan of all
remaining work instead (keeper.jct_plan), in whole gangs, and the TTD
keeper checks it. The result is whole GPU counts per job and type; the
placement planner picks the GPU ids (a job whose counts per type do not
change keeps exactly its GPUs: no restart); a job's restart cost (its own
``restart_s``, the figure the simulator charges, or the policy's
``restart_s`` where set) discounts every other placement by the share of
the round a checkpoint restore would cost. With ``share=True`` a job still
waiting may then buy a shared slot on a placed job's GPUs (share.py); the
allocation gives such pairs in ``pairs`` and the placement planner puts
both on the same GPUs. Elastic jobs (a ``gpu_range``) are first sized by goodput (elastic.py) and then
placed as gangs of the count chosen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from hadar.arrays import BoolArray, FloatArray, IntArray
from hadar.errors import InputError
from hadar.model.state import Allocation, SchedulerState
from hadar.policies.base import PolicyTraits, RateModel
from hadar.policies.hadar import elastic, gangs, groups
from hadar.policies.hadar.gangs import Counts
from hadar.policies.hadar.keeper import Horizon, Work, horizon, horizon_s, jct_plan, round_plan
from hadar.policies.hadar.pace import Shield, at_risk
from hadar.policies.hadar.params import ADVANCED, PARAMS, HadarAdvanced, advanced_of
from hadar.policies.hadar.pricing import PriceBook
from hadar.policies.hadar.share import shared_slots
from hadar.policies.hadar.utility import UTILITIES, UtilityContext, make_utility
from hadar.policies.registry import register
from hadar.solve import highs

Warms = tuple[highs.Warm, highs.Warm]  # warm starts of the JCT plan's LP and of the horizon LPs

_BASIS = "hadar.plan_basis"  # memo: the JCT plan's last simplex basis (its warm start next round)
_HBASIS = "hadar.horizon_basis"  # memo: the keeper's last horizon LP's basis (the same for the horizon LPs)


@register("hadar", "Hadar (IPDPS'24): task-level primal-dual placement each round; jobs may span GPU types")
class HadarPolicy:
    """Hadar's round decision. Every parameter is a keyword: the core ones are the constructor's own
    (``PARAMS`` says what each does), the advanced ones, taken by name too, are ``advanced``'s
    (a :class:`HadarAdvanced`; ``ADVANCED`` says what each does). docs/policies.md renders both
    tables, with their defaults.
    """

    PARAMS: ClassVar[Mapping[str, str]] = PARAMS
    ADVANCED: ClassVar[Mapping[str, str]] = ADVANCED
    KNOBS: ClassVar[type] = HadarAdvanced
    TRAITS: ClassVar[PolicyTraits] = PolicyTraits(spans_types=True, resolve="every_round", cut_rounds=True,
                                                  planner="placement")
    name: ClassVar[str] = "hadar"

    def __init__(self, *, utility: str = "jct", rate_model: str = "sync", restart_s: float | None = None,
                 plan: str = "lp", keep_slack: float | None = 0.01, share: bool = False, **advanced: Any) -> None:
        self.advanced = adv = advanced_of("hadar", advanced)
        _check(utility in UTILITIES, f"unknown Hadar utility {utility!r}; known: {', '.join(UTILITIES)}")
        _check(rate_model in ("sync", "additive"), f"unknown rate model {rate_model!r} (sync or additive)")
        _check(adv.steepness >= 0 and (restart_s is None or restart_s >= 0)
               and (adv.aging_s is None or adv.aging_s > 0), "steepness and restart_s must be >= 0, aging_s > 0")
        _check(plan in ("lp", "pack"), f"unknown Hadar plan {plan!r} (lp or pack)")
        _check(keep_slack is None or 0 <= keep_slack < 1, f"keep_slack must be in [0, 1), got {keep_slack}")
        _check(isinstance(share, bool), f"share must be true or false, got {share!r}")
        self.utility_name = utility
        self.utility = make_utility(utility, adv.exponent)
        self.rate_model: RateModel = "additive" if rate_model == "additive" else "sync"
        self.restart_s = restart_s
        self.plan = plan
        self.keep_slack = keep_slack
        self.share = share
        self.plan_shape = adv.plan_shape

    traits: ClassVar[PolicyTraits] = TRAITS  # its rate model is its own estimate, not the world's

    # -- the round's decision ------------------------------------------------------
    def allocate(self, state: SchedulerState) -> Allocation:
        state, held = elastic.sized(state)  # elastic and adaptive jobs sized by goodput (elastic.py)
        m, types = len(state.jobs), state.gpu_types
        if m == 0:
            return Allocation.for_state(state, np.zeros((0, len(types))), counts={})
        warm = self.warm_starts(state)
        x, scale, value, counts = self.place(state, warm=warm)
        batches = elastic.batches_for(state, counts)  # each adaptive job's batch where it was placed
        fractions, ids = gangs.shares(counts, scale, len(types)), state.job_ids
        pairs: dict[tuple[int, int], tuple[float, ...]] = {}
        if self.share:  # a pair's time together is in ``pairs``; its host's time alone is then 0
            for s in shared_slots(state, x, value, scale.astype(int), counts, _order(value, scale),
                                  self._discount(state), self.advanced.share_gain):
                pairs[(state.jobs[s.host].job_id, state.jobs[s.guest].job_id)] = tuple(fractions[s.host])
                fractions[s.host] = 0.0
        return Allocation.for_state(state, fractions, counts={
            ids[i]: {types[r]: k for r, k in c.items()} for i, c in counts.items()},
            pairs=pairs or None, memo={**warm_memo(warm), **held, **({elastic.BATCHES: batches} if batches else {})},
            batches=batches or None)

    def warm_starts(self, state: SchedulerState) -> Warms | None:
        """With ``warm_start``, the warm starts the last round left in ``state.memo`` (for :meth:`place`;
        what it leaves in them goes to the next round's memo: :func:`warm_memo`)."""
        if not self.advanced.warm_start:
            return None
        return highs.Warm(state.memo.get(_BASIS)), highs.Warm(state.memo.get(_HBASIS))

    def place(self, state: SchedulerState, *, busy: IntArray | None = None, sit_out: BoolArray | None = None,
              weight: FloatArray | None = None, warm: Warms | None = None
              ) -> tuple[FloatArray, FloatArray, FloatArray, Counts]:
        """The round's placement on a non-empty state: (throughputs x, scale factors, utility values,
        GPU counts per job index and type index). HadarE builds on it: ``busy[r]`` GPUs of type r
        are taken already, the jobs in ``sit_out`` (a boolean mask) are placed already, and
        utilities are multiplied by ``weight`` (jobs x types). ``warm``: warm starts of the JCT
        plan's LP and of the horizon LPs (hadar.solve.highs; they receive this round's bases)."""
        x = state.throughput_matrix()
        scale = state.scale_factors()
        value = self.utility.values(x, self._context(state, scale))
        value = np.where(x > 0, value, 0.0)
        if weight is not None:
            value = value * weight
        fresh = self._fresh(state)
        if fresh is not None:  # a job that never ran goes ahead of every job that has
            value[fresh] = np.where(x[fresh] > 0, value[fresh] + float(value.max()), 0.0)
        if sit_out is not None and sit_out.any():
            value[sit_out] = 0.0
        taken = {r: int(k) for r, k in enumerate(busy if busy is not None else ()) if k > 0}
        return x, scale, value, self._pack(state, x, value, scale.astype(int), taken, fresh, warm)

    def _context(self, state: SchedulerState, scale: FloatArray) -> UtilityContext:
        jobs = state.jobs
        arrival = np.array([j.arrival_s for j in jobs], dtype=float)
        attained = np.array([j.attained_gpu_s for j in jobs], dtype=float)
        weight = state.priority_weights()
        aging_s = self.advanced.aging_s
        if aging_s is not None:
            waited = np.maximum(0.0, state.now_s - arrival - attained / scale)
            weight = weight * (1.0 + waited / aging_s)
        return UtilityContext(state.now_s, state.round_s, state.remaining_steps(), scale, state.priority_weights(),
                              arrival, attained, weight)

    def _pack(self, state: SchedulerState, x: FloatArray, value: FloatArray, scale: IntArray,
              taken: dict[int, int], fresh: BoolArray | None, warm: Warms | None) -> Counts:
        """The JCT plan (or, where it is off or yields nothing, the primal-dual pass then the fill
        pass), then the keeper (``taken``: GPUs per type already in use; ``fresh``: the first-round
        rule's jobs); job index -> {type index: GPUs}."""
        book = self.price_book(state, value, scale)
        if book is None:
            return {}
        book.take(taken)
        order = _order(value, scale)
        m = len(state.jobs)
        adv = self.advanced
        plan = self.plan == "lp" and self.utility_name == "jct" and m <= _limit(adv.plan_max_jobs)
        keep = self.keep_slack is not None and m <= _limit(adv.keep_max_jobs)
        if not (plan or keep):
            return self._priced(state, book, x, value, scale, order)
        # the remaining work on the GPUs not taken, and its horizon: one LP shared by the plan and the keeper
        free = state.capacities().astype(int)
        for r, k in taken.items():
            free[r] -= k
        work = Work(x, state.remaining_steps(), scale, free)
        grp = groups.group(x, work.remaining, scale, state.priority_weights(), adv.lp_jobs, adv.lp_bands)
        pw, hw = (None, None) if warm is None else warm
        names = None if warm is None else _row_names(state, grp)  # what warm starts map bases by
        hz = horizon(groups.lp_work(work, grp), hw, names)
        h = hz.s
        if not np.isfinite(h):
            return self._priced(state, book, x, value, scale, order)
        risk = at_risk(state, work, adv.ftf_guard)  # the objective's tail guard: first, on the best type
        first = fresh if risk is None else risk if fresh is None else fresh | risk
        rnd, left = _Round(state, value, order, first, risk), _Left(work, grp, names)
        counts = (self._jct_plan(rnd, left, h, pw) if plan else None) or \
            self._priced(state, book, x, value, scale, order)
        if keep:
            counts = self._keep(rnd, left, hz, counts, hw)
        return counts

    def _priced(self, state: SchedulerState, book: PriceBook, x: FloatArray, value: FloatArray, scale: IntArray,
                order: IntArray) -> Counts:
        """Spec section 3's round: the primal-dual pass in packing ``order`` on ``book``, then the fill pass."""
        prev_counts = gangs.previous_counts(state)
        discount = self._discount(state)
        counts: Counts = {}
        waiting: list[int] = []
        for pos_i, i in enumerate(order):
            if book.free.sum() == 0:
                waiting.extend(int(k) for k in order[pos_i:])
                break
            offer = gangs.respond(book, x[i], value[i], int(scale[i]), prev_counts.get(int(i)), float(discount[i]),
                                  self.rate_model)
            if offer is not None and offer.payoff > 0:
                book.take(offer.counts)
                counts[int(i)] = offer.counts
            else:
                waiting.append(int(i))
        if self.advanced.fill and book.free.sum() > 0:
            gangs.fill(book, x, value, scale, counts, waiting, self.rate_model)
        return counts

    def _discount(self, state: SchedulerState) -> FloatArray:
        """Per job, the share of a round left after a checkpoint restore (1: restarts are free)."""
        restart = np.array([j.restart_s if self.restart_s is None else self.restart_s for j in state.jobs])
        out: FloatArray = 1.0 - np.minimum(restart / state.round_s, 1.0)
        return out

    def _fresh(self, state: SchedulerState) -> BoolArray | None:
        """First-round rule: the jobs that never ran, when some have and some have not (else None)."""
        if not self.advanced.first_round:
            return None
        fresh = np.array([j.attained_gpu_s <= 0 for j in state.jobs])
        return fresh if fresh.any() and not fresh.all() else None

    def _keep(self, rnd: _Round, left: _Left, hz: Horizon, counts: Counts, hw: highs.Warm | None = None) -> Counts:
        """TTD keeper (keeper.py): re-plan the round when the placement ``counts`` lets the horizon
        ``hz`` of the remaining work (``left``) drift out by more than ``keep_slack`` x the round; the
        jobs the ``shield`` exempts go first in the re-planned round (``hw``, ``left.names``: as
        ``horizon_s``'s). Where ``hz``'s own plan, scaled to what the placement leaves, shows the
        horizon keeps pace, the placement stands without that LP (its optimum is at most the scaled
        plan's time)."""
        state, value, work, grp, names = rnd.state, rnd.value, left.work, left.grp, left.names
        x, scale, free, h = work.rates, work.scale, work.capacity, hz.s
        slack, adv = self.keep_slack or 0.0, self.advanced
        if adv.keep_busy is not None and state.now_s - max(j.arrival_s for j in state.jobs) < adv.keep_quiet * h:
            slack = max(slack, adv.keep_busy)  # jobs still arriving: the drain is not yet what sets TTD
        allowed = h - state.round_s * (1.0 - slack)
        limit = allowed * (1 + 1e-6) + 1e-6
        after = groups.lp_work(work, grp, work.remaining - work.progress(counts, state.round_s))
        if hz.bound_s(after) * (1 + 1e-7) + 1e-3 <= limit:  # margins: the LP's tolerances, its rounding
            return counts
        packed = horizon_s(after, hw, names)
        if packed <= limit:
            return counts
        # whole gangs when every job can run at once and only the types are in question (the end of a
        # drain); where jobs compete for GPUs, a whole-gang round that must keep pace would, round after
        # round, trade every job's completion for the last one's: the fractional plan keeps pace over rounds
        endgame = len(state.jobs) <= adv.keep_whole and scale.sum() <= free.sum()
        lpw, lpv = groups.lp_work(work, grp), value if grp is None else grp.mean_rows(value)
        got = round_plan(lpw, lpv, state.round_s, allowed, whole=True, mip_nodes=adv.keep_mip_nodes) \
            if endgame else None
        if got is None:
            got = round_plan(lpw, lpv, state.round_s, allowed)
        if got is None:
            return counts
        share, price = got if grp is None else (groups.spread(grp, got[0], x, work.remaining, state.round_s)[0],
                                                got[1][grp.index])
        share, shield = self.shield().apply(state, work, share, counts, rnd.fresh, h)
        if rnd.risk is not None:  # the tail guard's jobs keep the JCT plan's GPUs (their best type), first
            mine = gangs.shares(counts, work.scale, share.shape[1])
            share, shield = np.where(rnd.risk[:, None], mine, share), np.where(rnd.risk, 3, shield)
        kept = gangs.from_plan(state, work, value, share, price, rnd.order, self.rate_model, shield)
        rounded = horizon_s(groups.lp_work(work, grp, work.remaining - work.progress(kept, state.round_s)), hw, names)
        return kept if rounded <= packed else counts  # whole gangs can miss the plan: keep the better round

    def shield(self) -> Shield:
        """The keeper's exemptions under this policy's ``keep_short``, ``keep_own`` (with ``keep_own_within``,
        ``keep_own_quiet``), ``keep_fair`` and ``ftf_cap``."""
        a = self.advanced
        return Shield(a.keep_short, a.keep_own, a.keep_fair, a.ftf_cap, a.keep_own_within, a.keep_own_quiet)

    def _jct_plan(self, rnd: _Round, left: _Left, h: float, warm: highs.Warm | None) -> Counts | None:
        """The round from the fluid JCT plan of the remaining work (``left``; keeper.jct_plan over
        ``plan_total`` x its horizon ``h``), in whole gangs: jobs the plan finishes this round and jobs
        that never ran (``first_round``) first, then by planned share (``warm``, ``left.names``: as
        ``jct_plan``'s)."""
        state, work, grp, names, fresh = rnd.state, left.work, left.grp, left.names, rnd.fresh
        weight = state.priority_weights()
        got = jct_plan(groups.lp_work(work, grp), weight if grp is None else grp.first_rows(weight), state.round_s,
                       h * self.advanced.plan_total, lean=grp is not None, warm=warm, names=names,
                       shape=self.plan_shape)
        if got is None:
            return None
        plan, now = got if grp is None else groups.spread(grp, got[0], work.rates, work.remaining, state.round_s)
        if rnd.risk is not None:  # the tail guard binds: the whole round on the job's best type
            best = np.where(work.usable(), work.rates, 0.0).argmax(axis=1)
            plan = np.where(rnd.risk[:, None], np.eye(plan.shape[1])[best], plan)
        first = 2 * (now >= 1.0 - 1e-6)  # the plan finishes these this round, in however little of it
        if fresh is not None:
            first = np.maximum(first, fresh)
        if rnd.risk is not None:  # the tail guard's jobs ahead of all
            first = np.where(rnd.risk, 3, first)
        return gangs.from_plan(state, work, rnd.value, plan, np.zeros(len(state.jobs)), rnd.order, self.rate_model,
                               first)

    def price_book(self, state: SchedulerState, value: FloatArray, scale: FloatArray | IntArray) -> PriceBook | None:
        """Fresh per-type prices between the lowest and highest best utility per GPU (None: no job has any)."""
        per_gpu = value.max(axis=1) / scale
        live = per_gpu[per_gpu > 0]
        if live.size == 0:
            return None
        return PriceBook(state.capacities().astype(int), float(live.min()), float(live.max()), self.advanced.steepness)


@dataclass(frozen=True, slots=True)
class _Round:
    """What a round's plan and keeper share: the state, the jobs' utility values (jobs x types), the
    packing order, the jobs placed first (the first-round rule's and the tail guard's; None: none) and
    the tail guard's (``ftf_guard``: on their best type; None: none)."""

    state: SchedulerState
    value: FloatArray
    order: IntArray
    fresh: BoolArray | None
    risk: BoolArray | None = None


@dataclass(frozen=True, slots=True)
class _Left:
    """The remaining work as the plan's and the keeper's LPs see it: ``work``, its groups of alike jobs
    (None: a row per job) and the rows' names warm starts map bases by (None: no warm starts)."""

    work: Work
    grp: groups.Groups | None
    names: IntArray | None


def _order(value: FloatArray, scale: FloatArray | IntArray) -> IntArray:
    """Packing order: best utility per GPU first; ties: who loses most without its best type goes
    first, then state order (lexsort is stable)."""
    per_gpu = value.max(axis=1) / scale
    srt = np.sort(value, axis=1)
    regret = (srt[:, -1] - (srt[:, -2] if value.shape[1] > 1 else 0.0)) / scale
    out: IntArray = np.lexsort((-regret, -per_gpu))
    return out


def _row_names(state: SchedulerState, grp: groups.Groups | None) -> IntArray:
    """Names of the LPs' rows, by which a warm start maps a basis: job ids (a group: its first member's)."""
    ids: IntArray = np.array(state.job_ids, dtype=np.int64)
    return ids if grp is None else ids[grp.heads]


def warm_memo(warm: Warms | None) -> dict[str, highs.Basis]:
    """What a round's warm starts leave for the next round's memo."""
    return {} if warm is None else {k: w.basis for k, w in zip((_BASIS, _HBASIS), warm, strict=True)
                                    if w.basis is not None}


def _limit(v: int | None) -> int | float:
    return float("inf") if v is None else v


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise InputError(message)
