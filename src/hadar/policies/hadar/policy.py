"""Hadar: task-level, per-round primal-dual scheduling (spec/hadar.md section 3).

Every round (``resolve_every_round``) the policy packs an integral
placement: each job gets nothing or exactly W GPUs, possibly of several
types. Jobs are taken in decreasing order of their best utility per GPU;
each one's dual subroutine buys the W GPUs with the best utility minus
exponential per-type prices, and the prices rise as types fill; a job
whose best payoff is not positive waits. A fill pass then gives GPUs that
are still free to waiting jobs, so no GPU idles while a runnable job waits.
By default (``plan="lp"``) the round is then taken from a fluid plan of all
remaining work instead (keeper.jct_plan), in whole gangs.
A job whose counts per type do not change keeps exactly its GPUs (no
restart); ``restart_s`` > 0 discounts every other placement by the share
of the round a checkpoint restore would cost.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from hadar.errors import InputError
from hadar.mechanism.placement import PlacementPlanner, assign_gpus
from hadar.metrics.bound import min_time_lp
from hadar.model.cluster import Cluster
from hadar.model.state import Allocation, SchedulerState
from hadar.policies.hadar.keeper import Work, horizon_s, jct_plan, round_plan
from hadar.policies.hadar.pricing import Offer, PriceBook, best_offer
from hadar.policies.hadar.utility import UtilityContext, make_utility
from hadar.policies.registry import register


@register("hadar", "Hadar (IPDPS'24): task-level primal-dual placement each round; jobs may span GPU types")
class HadarPolicy:
    """Parameters (all keyword):

    ``utility``: ``jct`` (default), ``fifo``, ``fair`` or ``throughput``.
    ``rate_model``: ``sync`` (default: a mixed placement runs at its slowest
    type's pace) or ``additive`` (valid only with local batch sizes set in
    proportion to each GPU's speed). ``steepness``: exponent on the price
    curve ``L * (U/L) ** (steepness * f)``. ``exponent``: of the jct
    utility's shortest-remaining term. ``aging_s``: a job's weight grows by
    1 for every ``aging_s`` seconds it has waited without GPUs (None: off).
    ``restart_s``: checkpoint-restore cost charged to any placement other
    than the job's previous one (0, as Gavel's simulator). ``fill``: run
    the fill pass. ``keep_slack``: the TTD keeper (keeper.py; None: off)
    lets one round push the horizon for all remaining work out by at most
    this share of the round, re-planning the round when the packed
    placement would; ``keep_busy``: the slack instead while jobs are still
    arriving (one arrived within ``keep_quiet`` x the horizon; None: always
    ``keep_slack``), when the drain that sets TTD is still ahead;
    ``keep_whole``: with at most this many active jobs the
    re-plan is a small MIP in whole gangs when, besides, every job can run
    at once (else the LP plan, rounded);
    ``keep_max_jobs``: above this many active jobs the keeper is skipped
    (its LPs cost ~70 ms each at 2048 jobs). ``first_round``: a job that
    has never run goes ahead of every job that has (it starts at the first
    round boundary after it arrives). ``plan``: ``lp`` (default) takes the
    round from a fluid plan that minimizes the mean time at which the
    remaining work gets done within ``plan_total`` x the horizon
    (keeper.jct_plan), in whole gangs: jobs the plan finishes this round and
    jobs that never ran first, then by planned share; the keeper then checks
    that round like a packed one. ``pack`` is spec section 3's packing alone.
    The plan needs the ``jct`` utility and no ``guard`` (the packing serves
    the others), and is skipped above ``plan_max_jobs`` active jobs (a round
    with it takes ~60 ms at 128 jobs and ~0.2 s at 256 on 512 GPUs).
    ``guard``: the older makespan guard (None: off, the default; the keeper
    supersedes it): jobs whose remaining best-type time reaches ``guard`` x
    the LP horizon go first, once no job has arrived for ``guard_quiet`` x
    that horizon.
    """

    name: ClassVar[str] = "hadar"
    type_agnostic: ClassVar[bool] = False
    spans_types: ClassVar[bool] = True
    resolve_every_round: ClassVar[bool] = True
    #: rounds end early at an arrival that finds GPUs idle or a completion a waiting job can use (engine.py)
    cut_rounds: ClassVar[bool] = True

    def __init__(self, *, utility: str = "jct", rate_model: str = "sync", steepness: float = 0.25,
                 exponent: float = 1.0, aging_s: float | None = None, restart_s: float = 0.0,
                 fill: bool = True, guard: float | None = None, guard_quiet: float | None = 0.1,
                 keep_slack: float | None = 0.01, keep_busy: float | None = 0.1, keep_quiet: float = 0.1,
                 keep_whole: int = 12, keep_max_jobs: int = 1024,
                 first_round: bool = True, plan: str = "lp", plan_total: float = 3.0,
                 plan_max_jobs: int = 256) -> None:
        if rate_model not in ("sync", "additive"):
            raise InputError(f"unknown rate model {rate_model!r} (sync or additive)")
        if steepness < 0 or restart_s < 0 or (aging_s is not None and aging_s <= 0):
            raise InputError("steepness and restart_s must be >= 0, aging_s > 0")
        if plan not in ("lp", "pack"):
            raise InputError(f"unknown Hadar plan {plan!r} (lp or pack)")
        if plan_total < 1:
            raise InputError(f"plan_total must be >= 1 (a multiple of the horizon), got {plan_total}")
        for name, v in (("keep_slack", keep_slack), ("keep_busy", keep_busy)):
            if v is not None and not 0 <= v < 1:
                raise InputError(f"{name} must be in [0, 1), got {v}")
        if keep_quiet < 0:
            raise InputError(f"keep_quiet must be >= 0, got {keep_quiet}")
        self.utility_name = utility
        self.utility = make_utility(utility, exponent)
        self.rate_model = rate_model
        self.steepness = steepness
        self.aging_s = aging_s
        self.restart_s = restart_s
        self.fill = fill
        self.guard = guard
        self.guard_quiet = guard_quiet
        self.keep_slack = keep_slack
        self.keep_busy = keep_busy
        self.keep_quiet = keep_quiet
        self.keep_whole = keep_whole
        self.keep_max_jobs = keep_max_jobs
        self.first_round = first_round
        self.plan = plan
        self.plan_total = plan_total
        self.plan_max_jobs = plan_max_jobs

    def make_planner(self, cluster: Cluster, seed: int) -> PlacementPlanner:
        return PlacementPlanner(cluster)

    # -- the round's decision ------------------------------------------------------
    def allocate(self, state: SchedulerState) -> Allocation:
        m, types = len(state.jobs), state.gpu_types
        if m == 0:
            return Allocation.for_state(state, np.zeros((0, len(types))), placement={})
        _, scale, _, counts, placement = self.place(state)
        fractions = np.zeros((m, len(types)))
        for i, c in counts.items():
            for r, k in c.items():
                fractions[i, r] = k / scale[i]
        return Allocation.for_state(state, fractions, placement=placement)

    def place(self, state: SchedulerState, reserved: Mapping[int, tuple[int, ...]] | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, dict[int, int]], dict[int, tuple[int, ...]]]:
        """The round's placement on a non-empty state: (throughputs x, scale factors, utility values,
        GPU counts per job index and type index, GPU ids per job id). HadarE builds on it: its
        ``reserved`` jobs (job id -> GPU ids) are placed already; they sit out and their GPUs are taken."""
        jobs = state.jobs
        x = state.throughput_matrix()
        scale = state.scale_factors()
        value = self.utility.values(x, self._context(state, scale))
        value = self.adjust_values(state, x, np.where(x > 0, value, 0.0))
        fresh = self._fresh(state)
        if fresh is not None:  # a job that never ran goes ahead of every job that has
            value[fresh] = np.where(x[fresh] > 0, value[fresh] + float(value.max()), 0.0)
        reserved = reserved or {}
        if reserved:
            value[[i for i, j in enumerate(jobs) if j.job_id in reserved]] = 0.0
        horizon = None
        if self.guard is not None:
            best = np.where(x.max(axis=1) > 0, x.max(axis=1), 1.0)
            t_rem = state.remaining_steps() / best
            # the LP horizon is at least the best-type GPU-time over all GPUs: skip the LP when no job can be hot
            if t_rem.max() >= self.guard * float((t_rem * scale).sum()) / state.cluster.num_gpus:
                horizon = min_time_lp(x / scale[:, None], state.remaining_steps(), state.cluster)[0]
        types = state.gpu_types
        taken = {types.index(t): n for t, n in Counter(state.cluster.gpu_type_of[g]
                                                        for gs in reserved.values() for g in gs).items()}
        counts = self._pack(state, x, value, scale.astype(int), horizon, taken, fresh)
        prev = {j.job_id: j.previous_gpus for j in jobs if j.previous_gpus}
        placement = assign_gpus(state.cluster, {jobs[i].job_id: {types[r]: k for r, k in c.items()}
                                                for i, c in counts.items()}, prev,
                                busy={g for gs in reserved.values() for g in gs})
        return x, scale, value, counts, placement

    def _context(self, state: SchedulerState, scale: np.ndarray) -> UtilityContext:
        jobs = state.jobs
        arrival = np.array([j.arrival_s for j in jobs], dtype=float)
        attained = np.array([j.attained_gpu_s for j in jobs], dtype=float)
        weight = state.priority_weights()
        if self.aging_s is not None:
            waited = np.maximum(0.0, state.now_s - arrival - attained / scale)
            weight = weight * (1.0 + waited / self.aging_s)
        return UtilityContext(state.now_s, state.round_s, state.remaining_steps(), scale, state.priority_weights(),
                              arrival, attained, weight)

    def _pack(self, state: SchedulerState, x: np.ndarray, value: np.ndarray, scale: np.ndarray,
              horizon: float | None, taken: dict[int, int], fresh: np.ndarray | None) -> dict[int, dict[int, int]]:
        """Primal-dual pass then fill pass (``taken``: GPUs per type already in use; ``fresh``: the
        first-round rule's jobs, ``_fresh``); returns job index -> {type index: GPU count}."""
        book = self.price_book(state, value, scale)
        if book is None:
            return {}
        book.take(taken)
        per_gpu = value.max(axis=1) / scale
        srt = np.sort(value, axis=1)
        regret = (srt[:, -1] - (srt[:, -2] if value.shape[1] > 1 else 0.0)) / scale
        order = np.lexsort((-regret, -per_gpu))  # ties: who loses most without its best type goes first
        if horizon is not None:
            order, value = self._guarded_first(state, x, value, order, horizon)
        prev_counts = self._previous_counts(state)
        discount = 1.0 - min(self.restart_s / state.round_s, 1.0)
        counts: dict[int, dict[int, int]] = {}
        waiting: list[int] = []
        for pos_i, i in enumerate(order):
            if book.free.sum() == 0:
                waiting.extend(int(k) for k in order[pos_i:])
                break
            offer = self._respond(book, x[i], value[i], int(scale[i]), prev_counts.get(int(i)), discount)
            if offer is not None and offer.payoff > 0:
                book.take(offer.counts)
                counts[int(i)] = offer.counts
            else:
                waiting.append(int(i))
        if self.fill and book.free.sum() > 0:
            self._fill(book, x, value, scale, counts, waiting)
        plan = self.plan == "lp" and self.utility_name == "jct" and self.guard is None \
            and len(state.jobs) <= self.plan_max_jobs
        keep = self.keep_slack is not None and len(state.jobs) <= self.keep_max_jobs
        if not (plan or keep):
            return counts
        # the remaining work on the GPUs not taken, and its horizon: one LP shared by the plan and the keeper
        free = state.capacities().astype(int)
        for r, k in taken.items():
            free[r] -= k
        work = Work(x, state.remaining_steps(), scale, free)
        h = horizon_s(work)
        if not np.isfinite(h):
            return counts
        if plan:
            counts = self._jct_plan(state, value, work, h, order, fresh) or counts
        if keep:
            counts = self._keep(state, value, work, h, counts, order)
        return counts

    def _fresh(self, state: SchedulerState) -> np.ndarray | None:
        """First-round rule: the jobs that never ran, when some have and some have not (else None)."""
        if not self.first_round:
            return None
        fresh = np.array([j.attained_gpu_s <= 0 for j in state.jobs])
        return fresh if fresh.any() and not fresh.all() else None

    def _keep(self, state: SchedulerState, value: np.ndarray, work: Work, h: float,
              counts: dict[int, dict[int, int]], order: np.ndarray) -> dict[int, dict[int, int]]:
        """TTD keeper (keeper.py): re-plan the round when the placement ``counts`` lets the horizon
        ``h`` of the remaining ``work`` drift out by more than ``keep_slack`` x the round."""
        x, scale, free = work.rates, work.scale, work.capacity
        slack = self.keep_slack or 0.0
        if self.keep_busy is not None and state.now_s - max(j.arrival_s for j in state.jobs) < self.keep_quiet * h:
            slack = max(slack, self.keep_busy)  # jobs still arriving: the drain is not yet what sets TTD
        allowed = h - state.round_s * (1.0 - slack)
        packed = horizon_s(Work(x, work.remaining - work.progress(counts, state.round_s), scale, free))
        if packed <= allowed * (1 + 1e-6) + 1e-6:
            return counts
        # whole gangs when every job can run at once and only the types are in question (the end of a
        # drain); where jobs compete for GPUs, a whole-gang round that must keep pace would, round after
        # round, trade every job's completion for the last one's: the fractional plan keeps pace over rounds
        endgame = len(state.jobs) <= self.keep_whole and scale.sum() <= free.sum()
        got = round_plan(work, value, state.round_s, allowed, whole=True) if endgame else None
        if got is None:
            got = round_plan(work, value, state.round_s, allowed)
        if got is None:
            return counts
        kept = self._round_plan(state, x, value, scale, free, got[0], got[1], order)
        rounded = horizon_s(Work(x, work.remaining - work.progress(kept, state.round_s), scale, free))
        return kept if rounded <= packed else counts  # whole gangs can miss the plan: keep the better round

    def _jct_plan(self, state: SchedulerState, value: np.ndarray, work: Work, h: float, order: np.ndarray,
                  fresh: np.ndarray | None) -> dict[int, dict[int, int]] | None:
        """The round from the fluid JCT plan of ``work`` (keeper.jct_plan over ``plan_total`` x its
        horizon ``h``), in whole gangs: jobs the plan finishes this round and jobs that never ran
        (``first_round``) first, then by planned share."""
        got = jct_plan(work, state.priority_weights(), state.round_s, h * self.plan_total)
        if got is None:
            return None
        plan, now = got
        first = 2 * (now >= 1.0 - 1e-6)  # the plan finishes these this round, in however little of it
        if fresh is not None:
            first = np.maximum(first, fresh)
        return self._round_plan(state, work.rates, value, work.scale, work.capacity, plan, np.zeros(len(state.jobs)),
                                order, first)

    def _round_plan(self, state: SchedulerState, x: np.ndarray, value: np.ndarray, scale: np.ndarray,
                    free: np.ndarray, plan: np.ndarray, price: np.ndarray, order: np.ndarray,
                    first: np.ndarray | None = None) -> dict[int, dict[int, int]]:
        """Whole gangs from a fractional plan: the jobs the LP prices as critical (the horizon needs
        them) first, then by planned share and packing order; each on its planned type (its previous
        one if the plan mostly agrees, else the largest share); leftover GPUs go through the fill pass."""
        book = PriceBook(free, 1.0, 1.0, 0.0)
        prev = self._previous_counts(state)
        rank = np.empty(len(order), dtype=int)
        rank[order] = np.arange(len(order))
        share = plan.sum(axis=1)
        counts: dict[int, dict[int, int]] = {}
        waiting: list[int] = []
        critical = (price > 1e-9 * max(float(price.max()), 1e-300)) & (share >= 0.5)
        first = np.zeros(len(share), dtype=int) if first is None else first
        # ``first`` 2 (the plan finishes them this round) go shortest first, in packing order
        for i in sorted(range(len(share)), key=lambda i: (-first[i], rank[i] if first[i] == 2 else 0, not critical[i],
                                                          -round(share[i], 6), -price[i], rank[i])):
            w = int(scale[i])
            got = None
            if first[i] > 0 and share[i] < 0.5:
                offer = best_offer(book, x[i], value[i], w, rate_model=self.rate_model)
                got = offer.counts if offer is not None else None
            elif share[i] >= 0.5:
                mine = prev.get(i)
                planned = [r for r in np.argsort(-plan[i]) if plan[i, r] > 1e-6]
                kept = next(iter(mine)) if mine is not None and len(mine) == 1 else None
                if kept in planned and plan[i, kept] >= 0.5:  # stay put when the plan mostly agrees
                    planned.remove(kept)
                    planned.insert(0, kept)
                for r in planned:
                    if book.free[r] >= w:
                        got = {int(r): w}
                        break
                if got is None:
                    mask = np.where(plan[i] > 1e-6, value[i], 0.0)
                    offer = best_offer(book, np.where(plan[i] > 1e-6, x[i], 0.0), mask, w, rate_model=self.rate_model)
                    got = offer.counts if offer is not None else None
            if got is None:
                waiting.append(i)
            else:
                book.take(got)
                counts[i] = got
        if book.free.sum() > 0:
            waiting.sort(key=lambda i: rank[i])
            self._fill(book, x, value, scale, counts, waiting)
        return counts

    def adjust_values(self, state: SchedulerState, x: np.ndarray, value: np.ndarray) -> np.ndarray:
        """Hook for variants (HadarE) to reweigh the utilities before packing; Hadar keeps them."""
        return value

    def price_book(self, state: SchedulerState, value: np.ndarray, scale: np.ndarray) -> PriceBook | None:
        """Fresh per-type prices between the lowest and highest best utility per GPU (None: no job has any)."""
        per_gpu = value.max(axis=1) / scale
        live = per_gpu[per_gpu > 0]
        if live.size == 0:
            return None
        return PriceBook(state.capacities().astype(int), float(live.min()), float(live.max()), self.steepness)

    def _guarded_first(self, state: SchedulerState, x: np.ndarray, value: np.ndarray, order: np.ndarray,
                       horizon: float) -> tuple[np.ndarray, np.ndarray]:
        """Makespan guard: jobs whose remaining best-type time is at least ``guard`` x the
        LP limit on finishing all remaining work go first, valued above everyone."""
        if self.guard_quiet is not None:
            last_arrival = max(j.arrival_s for j in state.jobs)
            if state.now_s - last_arrival < self.guard_quiet * horizon:
                return order, value  # jobs still arriving: the cluster is not draining
        best = np.where(x.max(axis=1) > 0, x.max(axis=1), 1.0)
        t_rem = state.remaining_steps() / best
        hot = t_rem >= self.guard * horizon
        if not hot.any():
            return order, value
        top = float(value.max())
        value = value.copy()
        value[hot] = 2 * top * (1.0 + t_rem[hot] / t_rem.max())[:, None] * (x[hot] / best[hot, None])
        first = np.flatnonzero(hot)[np.argsort(-t_rem[hot], kind="stable")]
        return np.concatenate([first, order[~hot[order]]]), value

    def _fill(self, book: PriceBook, x: np.ndarray, value: np.ndarray, scale: np.ndarray,
              counts: dict[int, dict[int, int]], waiting: list[int]) -> None:
        """Fill pass: free GPUs go to waiting jobs (priority order), then let placed jobs
        move up to faster free GPUs, so no GPU idles while a job it could speed up runs."""
        flat = PriceBook(book.capacity, 1.0, 1.0, 0.0)  # free GPUs cost nothing now
        flat.free = book.free.copy()
        for i in waiting:
            if flat.free.sum() == 0:
                return
            offer = best_offer(flat, x[i], value[i], int(scale[i]), rate_model=self.rate_model)
            if offer is not None and offer.utility > 0:
                flat.take(offer.counts)
                counts[i] = offer.counts
        for i in list(counts):  # upgrade pass, in priority order
            if flat.free.sum() == 0:
                return
            mine = counts[i]
            cur = self._value_of(mine, x[i], value[i], int(scale[i]))
            for r, k in mine.items():
                flat.free[r] += k
            offer = best_offer(flat, x[i], value[i], int(scale[i]), rate_model=self.rate_model)
            if offer is not None and offer.utility > cur * (1 + 1e-9):
                mine = offer.counts
            flat.take(mine)
            counts[i] = mine

    def _value_of(self, c: dict[int, int], rates: np.ndarray, value: np.ndarray, w: int) -> float:
        if self.rate_model == "sync":
            return float(value[min(c, key=lambda r: rates[r])])
        return sum(k * float(value[r]) / w for r, k in c.items())

    def _respond(self, book: PriceBook, rates: np.ndarray, value: np.ndarray, w: int,
                 prev: dict[int, int] | None, discount: float) -> Offer | None:
        """Dual subroutine, with the previous placement (no restart) as an extra candidate."""
        offer = best_offer(book, rates, value * discount, w, rate_model=self.rate_model)
        if prev is None or discount >= 1.0 or any(book.free[r] < k for r, k in prev.items()):
            return offer
        cost = sum(book.price(r, n) for r, k in prev.items() for n in range(k))
        keep = Offer(dict(prev), self._value_of(prev, rates, value, w), cost)
        return keep if offer is None or keep.payoff >= offer.payoff else offer

    @staticmethod
    def _previous_counts(state: SchedulerState) -> dict[int, dict[int, int]]:
        index = {t: r for r, t in enumerate(state.gpu_types)}
        out: dict[int, dict[int, int]] = {}
        for i, j in enumerate(state.jobs):
            if len(j.previous_gpus) == j.scale_factor:
                c: dict[int, int] = {}
                for g in j.previous_gpus:
                    r = index[state.cluster.gpu_type_of[g]]
                    c[r] = c.get(r, 0) + 1
                out[i] = c
        return out
