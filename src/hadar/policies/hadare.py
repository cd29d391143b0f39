"""HadarE: Hadar's allocation plus job forking (spec/hadar.md section 4).

HadarE is composed, not derived: it holds a ``HadarPolicy`` (with the
packing plan and no keeper by default: the plan's and the keeper's horizons
do not model forking; with Hadar's first-round rule, so a job arriving at a
cluster full of unforked jobs starts at the next round boundary) and adds
the forking decisions; the forking planner turns its copies into leases on
GPU ids and the runtime's job tracker merges the copies' models.
A round, in order:

1. **Pace guard** (``fork_guard``, in rounds): the forking LP on the
   remaining work (``hadar.solve.bounds``: a GPU-second of type r earns a
   copy's best per-GPU rate, one copy per node) gives the horizon H. A job
   whose time at its fastest pace (its largest copy on every node) is
   within ``fork_guard`` rounds of H would otherwise become the makespan
   bottleneck; it first gets copies until it runs at the share t/H of that
   pace. Without this, shortest-first utilities leave long jobs that can
   use only a few GPUs per node (W = 1 on 4-GPU nodes) for last.
2. **Hadar's placement** for the other jobs on the GPUs left, with Hadar's
   per-type exponential prices, dual subroutine and fill pass. Utilities
   are weighted by ``rel ** match``: ``rel[i, r]`` (from the same LP's
   duals) is 1 where type r is in the TTD-optimal plan for job i and lower
   by how much of a GPU-second i would waste on r. The GPUs a job gets run
   as one copy per node (copies never synchronize across nodes or types).
   No job runs slower for another's copy: where steps 1-2 leave a job
   slower than Hadar's placement of every job would run it (a waiting job
   included), the round places every job first and the pace guard's copies
   take the GPUs left.
3. **Forking** (``mechanism/forking.py``): every node with GPUs still free
   is offered to job copies by the same primal-dual rule with the same
   prices: at most one copy of a job per node, 1..W GPUs each, worth the
   share of the job's remaining work it does this round; then a zero-price
   fill pass, then a speed-up pass for jobs that finish this round anyway.
   With few jobs left, one job spreads over every node.

**What a copy is worth.** ``fork_estimate`` (an explicit input: ``build.wire`` hands HadarE its forking
planner's estimate, a calibration file's credit or the noise-scale ``ForkModel`` with family-default noise
scales; never the world's) says F(m), the share of a job's m copies' summed rate credited. With one (not
ideal), every step values copies by it: the forking LP is tiered by each job's m F(m) (``solve/fork_lp.py``;
a job copies cannot speed up has one tier of W GPUs, weight 1 on every type, and the pace guard holds its
best W GPUs when it sets the makespan), the guard paces by credited rates, and forking prices each copy by
its gain net of the other copies' loss (``CopyCandidate.gain``). Without one, every copy is worth its steps.

**Deferring** (``defer``; by default, wherever the estimate is not ideal). A copy the estimate credits below
its steps is worth less than the whole job Hadar would run on the same GPUs, so reallocating Hadar's GPUs
to copies (steps 1-2's pace guard and type weights) no longer pays: HadarE then runs Hadar's own round
(Hadar's defaults: the fluid plan and the TTD keeper, unless ``plan`` or ``keep_slack`` is given) and
offers copies only the GPUs that round leaves free (step 3). Every job holds at least what Hadar gives it;
with the ideal estimate (copies worth their steps) HadarE reallocates as in steps 1-2.

Copies yield: the traits' ``yield_after_s`` (a copy's minimum lease, 30 s)
lets an arrival end a round whose GPUs are all leased while a job runs as
copies, and a completion ends the round while other jobs remain (they fork
onto the freed GPUs); the engine cuts the round there (``engine.py``).

Every step decides on GPUs per node (a job's ``Layout``), never on GPU ids: Hadar's counts per
type become nodes by ``placement.node_layout``, and the forking planner alone picks the ids.
The allocation's ``copies`` hold every copy of every job as (node, GPUs);
its ``fractions`` are GPUs of each type / max(GPUs held, W), so the usual
contract (per-job sum <= 1, per-type W x fraction <= GPUs of the type)
holds even for a job holding more than W GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from hadar.arrays import BoolArray, FloatArray
from hadar.errors import InputError
from hadar.mechanism.fork_credit import copy_factor
from hadar.mechanism.forking import (
    CopyCandidate,
    Layout,
    NodeFree,
    add_layout,
    copies_rate,
    copy_rates,
    free_gpus,
    offer_nodes,
)
from hadar.mechanism.placement import node_layout
from hadar.model.fork_model import ForkModel, ForkSetting
from hadar.model.state import Allocation, JobView, SchedulerState
from hadar.policies.base import PolicyTraits
from hadar.policies.hadar.policy import HadarPolicy, Warms, warm_memo
from hadar.policies.hadar.pricing import PriceBook
from hadar.policies.pace_guard import Guard, spread_critical
from hadar.policies.registry import register
from hadar.solve.bounds import copy_limits, lp_efficiency
from hadar.solve.fork_lp import Tiers, tiered_lp, worth_tiers


@dataclass(frozen=True, slots=True)
class HadarEAdvanced:
    """HadarE's own advanced parameters (``HadarEPolicy.ADVANCED`` says what each does)."""

    match: float = 2.0
    match_floor: float = 0.01
    fork_guard: float | None = 1.0
    yield_after_s: float = 30.0
    defer: bool | None = None

    def __post_init__(self) -> None:
        if not (self.yield_after_s >= 0 and np.isfinite(self.yield_after_s)):
            raise InputError(f"hadare: yield_after_s must be >= 0 seconds, got {self.yield_after_s}")
        if not 0 < self.match_floor <= 1:
            raise InputError(f"hadare: match_floor must be in (0, 1], got {self.match_floor}")
        object.__setattr__(self, "yield_after_s", float(self.yield_after_s))


_OWN_KNOBS = frozenset(f.name for f in fields(HadarEAdvanced))


class _Hadars:
    """``keep_slack``'s default: none where HadarE reallocates for copies, Hadar's own where it defers."""

    def __repr__(self) -> str:
        return "null, or as for hadar where it defers"


HADARS = _Hadars()


@register("hadare", "HadarE: Hadar, then job copies (one per node, up to W GPUs each) on every node with free GPUs",
          forwards=HadarPolicy)
class HadarEPolicy:
    """HadarE's round decision: its own parameters are in ``PARAMS`` (core) and ``ADVANCED`` (its
    :class:`HadarEAdvanced`); every other keyword is a ``HadarPolicy`` parameter (defaults here:
    ``plan="pack"``, ``keep_slack=None``).
    """

    PARAMS: ClassVar[Mapping[str, str]] = {
        "fork": "offer nodes with free GPUs to job copies (false: Hadar's placements run as one copy per node)",
        "plan": "as for hadar (`lp` or `pack`); null: `pack`, or Hadar's `lp` where HadarE defers (`defer`)",
        "keep_slack": "as for hadar (the TTD keeper); by default off, or Hadar's 0.01 where HadarE defers (`defer`)",
    }
    ADVANCED: ClassVar[Mapping[str, str]] = {
        "match": "exponent of the LP-fit weight on utilities: how strongly jobs go to the GPU types the "
                 "TTD-optimal plan gives them (0: off)",
        "match_floor": "the LP-fit weight's floor, before `match`: a type the plan gives a job no time on still "
                       "weighs this much (in (0, 1])",
        "fork_guard": "pace guard, in rounds: a job within this many rounds of setting the makespan gets copies "
                      "first, enough to keep pace, unless they would leave a job without GPUs (null: off)",
        "yield_after_s": "a copy's minimum lease (s): an arrival that finds every GPU leased while jobs run as "
                         "copies ends the round this long after it began at the earliest, and the copies yield",
        "defer": "Hadar's own round first (its plan and keeper), copies only on the GPUs it leaves free (no pace "
                 "guard, no type weights); null: so where the estimate credits copies below their steps",
    }
    KNOBS: ClassVar[type] = HadarEAdvanced

    TRAITS: ClassVar[PolicyTraits] = PolicyTraits(spans_types=True, forks=True, resolve="every_round",
                                                  cut_rounds=True, yield_after_s=30.0, planner="forking")
    name: ClassVar[str] = "hadare"

    def __init__(self, *, fork: bool = True, plan: str | None = None, keep_slack: float | _Hadars | None = HADARS,
                 **knobs: Any) -> None:
        if knobs.get("share"):
            raise InputError("hadare: share (space sharing) is a hadar parameter; HadarE forks jobs instead")
        self.advanced = HadarEAdvanced(**{k: knobs.pop(k) for k in list(knobs) if k in _OWN_KNOBS})
        self._given = {"plan": plan, "keep_slack": keep_slack, **knobs}
        self.fork = fork
        self._estimate: ForkSetting | None = None
        self.deferring = False
        self.hadar = self._inner()

    @property
    def fork_estimate(self) -> ForkSetting | None:
        """The policy's estimate of what copies are worth (``build.wire`` hands it the forking planner's; None or
        ideal: every copy worth its steps): every decision then values a copy by it (the module docstring)."""
        return self._estimate

    @fork_estimate.setter
    def fork_estimate(self, estimate: ForkSetting | None) -> None:
        self._estimate = estimate
        defer = self.advanced.defer
        deferring = (estimate is not None and not estimate.ideal) if defer is None else defer
        if deferring != self.deferring:
            self.deferring = deferring
            self.hadar = self._inner()

    def _inner(self) -> HadarPolicy:
        """The Hadar it holds: where it defers, Hadar's own defaults (the fluid plan, the keeper); else the
        packing alone with no keeper (their horizons do not model forking); given values win either way."""
        given = dict(self._given)
        if given["plan"] is None:
            given["plan"] = "lp" if self.deferring else "pack"
        if given["keep_slack"] is HADARS:
            if self.deferring:
                del given["keep_slack"]
            else:
                given["keep_slack"] = None
        return HadarPolicy(**given)

    @property
    def traits(self) -> PolicyTraits:
        from dataclasses import replace

        after = self.advanced.yield_after_s
        if isinstance(self.fork_estimate, ForkModel):  # a copy has earned its merge once it ran merge_s
            after = min(after, self.fork_estimate.merge_s)
        return replace(self.TRAITS, yield_after_s=after if self.fork else None)

    def allocate(self, state: SchedulerState) -> Allocation:
        jobs, types, cluster = state.jobs, state.gpu_types, state.cluster
        if not jobs:
            return Allocation.for_state(state, np.zeros((0, len(types))), copies={})
        index = {t: r for r, t in enumerate(types)}
        lp = None if self.deferring else self._lp(state)  # (it serves the pace guard and the type weights only)
        adv = self.advanced
        weight = None
        if lp is not None and adv.match > 0:
            _, rel, single = lp
            weight = np.maximum(rel, adv.match_floor) ** adv.match
            weight[single] = 1.0  # copies cannot speed these jobs up: their GPU types are Hadar's choice
        warm = self.hadar.warm_starts(state)  # Hadar's LPs, where its plan or keeper is on (not by default here)
        x, scale, value, held = self._own_gpus(state, lp, weight, warm)
        book = self.hadar.price_book(state, value, scale) if self.fork else None
        if book is not None:
            taken: dict[int, int] = {}
            for layout in held.values():
                for n, k in layout.items():
                    r = index[cluster.nodes[n].gpu_type]
                    taken[r] = taken.get(r, 0) + k
            book.take(taken)
            self._fork(state, x, value, book, held)
        fractions = np.zeros((len(jobs), len(types)))
        for i, j in enumerate(jobs):
            layout = held[j.job_id]
            for n, k in layout.items():
                fractions[i, index[cluster.nodes[n].gpu_type]] += k
            fractions[i] /= max(sum(layout.values()), j.scale_factor)
        copies = {jid: tuple((n, layout[n]) for n in sorted(layout)) for jid, layout in held.items() if layout}
        return Allocation.for_state(state, fractions, copies=copies, memo=warm_memo(warm))

    def _own_gpus(self, state: SchedulerState, lp: tuple[float, FloatArray, BoolArray] | None,
                  weight: FloatArray | None, warm: Warms | None = None,
                  ) -> tuple[FloatArray, FloatArray, FloatArray, dict[int, Layout]]:
        """Each job's GPUs per node before forking (with Hadar's x, scale factors and utility values): the
        pace guard's GPUs for critical jobs copies cannot speed up (``keep``: one copy of W GPUs, as Hadar's
        TTD keeper would hold them) and its copies for the other critical jobs first, then Hadar's placement
        on the GPUs left; where the copies leave a job slower than Hadar's placement without them would run
        it (``_slowed``; a waiting job too), Hadar's placement first and the guard's copies on the GPUs it
        leaves (no job runs slower for another's copy)."""
        held: dict[int, Layout] = {j.job_id: {} for j in state.jobs}
        if lp is None or not self.fork or self.advanced.fork_guard is None:  # no guard (lp None: deferring)
            return self._placement(state, weight, warm=warm)
        keep = spread_critical(state, lp, held, self._guard, unforked=True)
        held.update(keep)
        reserved = spread_critical(state, lp, held, self._guard)
        if reserved:
            first = self._placement(state, weight, {**keep, **reserved}, warm)
        alone = self._placement(state, weight, keep, warm=warm)
        if reserved:
            if not self._slowed(state, first[3], alone[3]):
                return first
            for jid, extra in spread_critical(state, lp, alone[3], self._guard).items():
                add_layout(alone[3][jid], extra)
        return alone

    def _slowed(self, state: SchedulerState, first: Mapping[int, Layout], alone: Mapping[int, Layout]) -> bool:
        """Whether some job runs slower on its GPUs with the guard's copies placed first (its copies, if
        it has any, or its own placement on the GPUs they leave) than Hadar's placement alone gives it
        (rates as the estimate credits them)."""
        for j in state.jobs:
            mine, own = first[j.job_id], alone[j.job_id]
            if mine == own or not own:
                continue
            if self._credited(state, j, mine) < self._credited(state, j, own) * (1 - 1e-9):
                return True
        return False

    def _credited(self, state: SchedulerState, job: JobView, layout: Mapping[int, int]) -> float:
        """Steps/s the estimate credits ``job``'s copies laid out as ``layout`` (one copy per node)."""
        index = {t: r for r, t in enumerate(state.gpu_types)}
        rates = copy_rates(state.table, job.job_type, job.scale_factor, state.gpu_types)
        raw = copies_rate(state.cluster, rates, index, layout)
        factor = self._factor(state, job)
        return raw if factor is None else factor(len(layout)) * raw

    @property
    def _guard(self) -> Guard:
        fork_guard = self.advanced.fork_guard
        assert fork_guard is not None
        return Guard(fork_guard, self._factor)

    def _factor(self, state: SchedulerState, job: JobView) -> Callable[[int], float] | None:
        """eff(m) of ``job``'s m copies this round as the policy's estimate says (None: no estimate, or ideal)."""
        est = self.fork_estimate
        if est is None or est.ideal:
            return None
        fraction = job.done_steps / job.total_steps if job.total_steps > 0 else 0.0
        if job.merge_rho is None or not isinstance(est, ForkModel) or est.rho_at(fraction) <= 0:
            return lambda m: copy_factor(est, job.job_type, m, fraction, state.round_s)
        # the job's own merges were measured (the runtime's MergeGain.rho): their drift factor replaces the model's
        scale = job.merge_rho / est.rho_at(fraction)
        return lambda m: copy_factor(est, job.job_type, m, fraction, state.round_s) * (scale if m > 1 else 1.0)

    def _placement(self, state: SchedulerState, weight: FloatArray | None,
                   reserved: Mapping[int, Layout] | None = None, warm: Warms | None = None,
                   ) -> tuple[FloatArray, FloatArray, FloatArray, dict[int, Layout]]:
        """Hadar's placement of the jobs not in ``reserved`` (job id -> GPUs per node held already) on the
        GPUs it leaves: (x, scale factors, utility values, job id -> GPUs per node, the reserved ones
        included). Counts per type become nodes by ``node_layout``; GPU ids are the planner's."""
        jobs, types, cluster = state.jobs, state.gpu_types, state.cluster
        reserved = reserved or {}
        index = {t: r for r, t in enumerate(types)}
        on_node: Layout = {}
        for layout in reserved.values():
            add_layout(on_node, layout)
        busy = np.zeros(len(types), dtype=int)
        for n, k in on_node.items():
            busy[index[cluster.nodes[n].gpu_type]] += k
        sit_out = np.array([j.job_id in reserved for j in jobs])
        x, scale, value, counts = self.hadar.place(state, busy=busy, sit_out=sit_out, weight=weight, warm=warm)
        prev = {j.job_id: j.previous_gpus for j in jobs if j.previous_gpus}
        placed = node_layout(cluster, {jobs[i].job_id: {types[r]: k for r, k in c.items()} for i, c in counts.items()},
                             prev, busy=on_node)
        return x, scale, value, {j.job_id: dict(reserved.get(j.job_id, placed.get(j.job_id, {}))) for j in jobs}

    def _lp(self, state: SchedulerState) -> tuple[float, FloatArray, BoolArray]:
        """(horizon, rel, single) of the forking LP on the remaining work, each copy worth what the estimate
        says (``solve/fork_lp.py``; no estimate: every copy worth its steps, ``bounds.lp_efficiency``);
        ``single[i]``: job i's copies cannot speed it up (one tier of W GPUs), so it is never forked."""
        per_gpu, caps = copy_limits(state.jobs, state.cluster, state.table)
        single = np.zeros(len(state.jobs), dtype=bool)
        if self._factor(state, state.jobs[0]) is None:
            return (*lp_efficiency(per_gpu, state.remaining_steps(), state.cluster, caps), single)
        tiers = [self._tiers(state, j) for j in state.jobs]
        for i, (j, t) in enumerate(zip(state.jobs, tiers, strict=True)):
            single[i] = sum(g for _, g in t) <= j.scale_factor
        return (*tiered_lp(per_gpu, state.remaining_steps(), state.cluster, caps, tiers), single)

    def _tiers(self, state: SchedulerState, job: JobView) -> Tiers:
        """``job``'s copies' worth as LP tiers: m copies at one copy's rate are credited m x eff(m) of it, m up
        to one copy on every up node; the first tier is one copy of W GPUs, the others copies as large as
        a node allows."""
        factor = self._factor(state, job)
        assert factor is not None
        nodes = state.cluster.up_nodes
        worth = [m * factor(m) for m in range(len(nodes) + 1)]
        size = min(job.scale_factor, max((state.cluster.nodes[n].gpus for n in nodes), default=1))
        return worth_tiers(worth, job.scale_factor, size)

    def _fork(self, state: SchedulerState, x: FloatArray, value: FloatArray, book: PriceBook,
              held: dict[int, Layout]) -> None:
        """Offer every node's free GPUs to job copies; adds the new copies to ``held`` (GPUs per node)."""
        cluster = state.cluster
        nodes = NodeFree(cluster, free_gpus(cluster, held))
        if nodes.total() == 0:
            return
        index = {t: r for r, t in enumerate(state.gpu_types)}
        unit = np.divide(value, x, out=np.zeros_like(value), where=x > 0)
        candidates = []
        for i, j in enumerate(state.jobs):
            rates = copy_rates(state.table, j.job_type, j.scale_factor, state.gpu_types)
            mine = held[j.job_id]
            total = copies_rate(cluster, rates, index, mine)
            prefer = frozenset(cluster.node_of[g] for g in j.previous_gpus)
            factor = self._factor(state, j)
            if factor is None:
                room = j.remaining_steps - total * state.round_s
                candidates.append(CopyCandidate(i, rates, unit[i], room, set(mine), prefer))
                continue
            room = j.remaining_steps - factor(len(mine)) * total * state.round_s
            candidates.append(CopyCandidate(i, rates, unit[i], room, set(mine), prefer, factor, len(mine), total))
        for i, new in offer_nodes(nodes, book, candidates, state.round_s).items():
            add_layout(held[state.jobs[i].job_id], dict(new))
