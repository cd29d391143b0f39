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

from hadar.arrays import FloatArray
from hadar.errors import InputError
from hadar.mechanism.forking import CopyCandidate, NodeFree, copies_rate, offer_nodes
from hadar.mechanism.placement import node_layout
from hadar.model.cluster import Cluster
from hadar.model.fork_model import ForkModel
from hadar.model.state import Allocation, SchedulerState
from hadar.model.throughput import ThroughputTable
from hadar.policies.base import PolicyTraits
from hadar.policies.hadar.policy import HadarPolicy, Warms, warm_memo
from hadar.policies.hadar.pricing import PriceBook
from hadar.policies.registry import register
from hadar.solve.bounds import copy_limits, lp_efficiency


@dataclass(frozen=True, slots=True)
class HadarEAdvanced:
    """HadarE's own advanced parameters (``HadarEPolicy.ADVANCED`` says what each does)."""

    match: float = 2.0
    match_floor: float = 0.01
    fork_guard: float | None = 1.0
    yield_after_s: float = 30.0

    def __post_init__(self) -> None:
        if not (self.yield_after_s >= 0 and np.isfinite(self.yield_after_s)):
            raise InputError(f"hadare: yield_after_s must be >= 0 seconds, got {self.yield_after_s}")
        if not 0 < self.match_floor <= 1:
            raise InputError(f"hadare: match_floor must be in (0, 1], got {self.match_floor}")
        object.__setattr__(self, "yield_after_s", float(self.yield_after_s))


_OWN_KNOBS = frozenset(f.name for f in fields(HadarEAdvanced))

#: a job's GPUs as node index -> how many (one copy per node); the GPU ids are the forking planner's
Layout = dict[int, int]


@register("hadare", "HadarE: Hadar, then job copies (one per node, up to W GPUs each) on every node with free GPUs",
          forwards=HadarPolicy)
class HadarEPolicy:
    """HadarE's round decision: its own parameters are in ``PARAMS`` (core) and ``ADVANCED`` (its
    :class:`HadarEAdvanced`); every other keyword is a ``HadarPolicy`` parameter (defaults here:
    ``plan="pack"``, ``keep_slack=None``).
    """

    PARAMS: ClassVar[Mapping[str, str]] = {
        "fork": "offer nodes with free GPUs to job copies (false: Hadar's placements run as one copy per node)",
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
    }
    KNOBS: ClassVar[type] = HadarEAdvanced

    TRAITS: ClassVar[PolicyTraits] = PolicyTraits(spans_types=True, forks=True, resolve="every_round",
                                                  cut_rounds=True, yield_after_s=30.0, planner="forking")
    name: ClassVar[str] = "hadare"

    def __init__(self, *, fork: bool = True, plan: str = "pack", keep_slack: float | None = None,
                 **knobs: Any) -> None:
        if knobs.get("share"):
            raise InputError("hadare: share (space sharing) is a hadar parameter; HadarE forks jobs instead")
        self.advanced = HadarEAdvanced(**{k: knobs.pop(k) for k in list(knobs) if k in _OWN_KNOBS})
        self.hadar = HadarPolicy(plan=plan, keep_slack=keep_slack, **knobs)
        self.fork = fork
        #: the run's estimate of what copies are worth (``build.wire`` hands it the forking planner's, where that
        #: is a ``ForkModel``): a copy is then offered by its worth net of its job's other copies' loss
        self.fork_model: ForkModel | None = None

    @property
    def traits(self) -> PolicyTraits:
        from dataclasses import replace

        return replace(self.TRAITS, yield_after_s=self.advanced.yield_after_s if self.fork else None)

    def allocate(self, state: SchedulerState) -> Allocation:
        jobs, types, cluster = state.jobs, state.gpu_types, state.cluster
        if not jobs:
            return Allocation.for_state(state, np.zeros((0, len(types))), copies={})
        index = {t: r for r, t in enumerate(types)}
        horizon, rel = self._lp(state)
        adv = self.advanced
        weight = np.maximum(rel, adv.match_floor) ** adv.match if adv.match > 0 else None
        warm = self.hadar.warm_starts(state)  # Hadar's LPs, where its plan or keeper is on (not by default here)
        x, scale, value, held = self._own_gpus(state, horizon, rel, weight, warm)
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

    def _own_gpus(self, state: SchedulerState, horizon: float, rel: FloatArray, weight: FloatArray | None,
                  warm: Warms | None = None) -> tuple[FloatArray, FloatArray, FloatArray, dict[int, Layout]]:
        """Each job's GPUs per node before forking (with Hadar's x, scale factors and utility values): the
        pace guard's copies first, then Hadar's placement on the GPUs left; where that leaves a job slower
        than Hadar's placement alone would run it (``_slowed``; a waiting job too), Hadar's placement
        first and the guard's copies on the GPUs it leaves (no job runs slower for another's copy)."""
        guard = self.fork and self.advanced.fork_guard is not None
        reserved = self._spread_critical(state, horizon, rel, {j.job_id: {} for j in state.jobs}) if guard else {}
        if reserved:
            first = self._placement(state, weight, reserved, warm)
        alone = self._placement(state, weight, warm=warm)
        if reserved:
            if not self._slowed(state, first[3], alone[3]):
                return first
            for jid, extra in self._spread_critical(state, horizon, rel, alone[3]).items():
                _add(alone[3][jid], extra)
        return alone

    @staticmethod
    def _slowed(state: SchedulerState, first: Mapping[int, Layout], alone: Mapping[int, Layout]) -> bool:
        """Whether some job runs slower on its GPUs with the guard's copies placed first (its copies, if
        it has any, or its own placement on the GPUs they leave) than Hadar's placement alone gives it."""
        cluster = state.cluster
        index = {t: r for r, t in enumerate(state.gpu_types)}
        for j in state.jobs:
            mine, own = first[j.job_id], alone[j.job_id]
            if mine == own or not own:
                continue
            rates = copy_rates(state.table, j.job_type, j.scale_factor, state.gpu_types)
            if copies_rate(cluster, rates, index, mine) < copies_rate(cluster, rates, index, own) * (1 - 1e-9):
                return True
        return False

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
            _add(on_node, layout)
        busy = np.zeros(len(types), dtype=int)
        for n, k in on_node.items():
            busy[index[cluster.nodes[n].gpu_type]] += k
        sit_out = np.array([j.job_id in reserved for j in jobs])
        x, scale, value, counts = self.hadar.place(state, busy=busy, sit_out=sit_out, weight=weight, warm=warm)
        prev = {j.job_id: j.previous_gpus for j in jobs if j.previous_gpus}
        placed = node_layout(cluster, {jobs[i].job_id: {types[r]: k for r, k in c.items()} for i, c in counts.items()},
                             prev, busy=on_node)
        return x, scale, value, {j.job_id: dict(reserved.get(j.job_id, placed.get(j.job_id, {}))) for j in jobs}

    def _lp(self, state: SchedulerState) -> tuple[float, FloatArray]:
        """(horizon, rel) of the forking LP on the remaining work."""
        per_gpu, caps = copy_limits(state.jobs, state.cluster, state.table)
        return lp_efficiency(per_gpu, state.remaining_steps(), state.cluster, caps)

    def _spread_critical(self, state: SchedulerState, horizon: float, rel: FloatArray,
                         held: Mapping[int, Layout]) -> dict[int, Layout]:
        """Makespan guard for forking (a pace controller), on the GPUs no job's own placement holds
        (``held``: job id -> GPUs per node). ``t_min``: a job's remaining time at its fastest pace (its
        largest copy on every node); ``H``: the forking LP's horizon for all the remaining work. A job
        with ``t_min >= H - fork_guard x round_s`` (within ``fork_guard`` rounds of being the
        bottleneck; decisions are per round, so it must be paced now) must keep at least the share
        ``t_min / H`` of its fastest pace or the workload cannot finish by H: it gets copies first
        (most critical job first; on each node where it has none yet, as many GPUs as free, up to W;
        nodes where it fits the LP plan best, then fastest, first) until its copies, its own GPUs
        included, reach that pace. Returns job id -> its new copies' GPUs per node."""
        fork_guard = self.advanced.fork_guard
        if fork_guard is None:
            return {}
        fastest = self._spread_rate(state)
        t_min = state.remaining_steps() / fastest
        hot = np.flatnonzero(t_min >= horizon - fork_guard * state.round_s)
        cluster = state.cluster
        index = {t: r for r, t in enumerate(state.gpu_types)}
        free = _free(cluster, held)
        out: dict[int, Layout] = {}
        for i in hot[np.argsort(-t_min[hot], kind="stable")]:
            j = state.jobs[i]
            rates = copy_rates(state.table, j.job_type, j.scale_factor, state.gpu_types)
            target = min(1.0, t_min[i] / max(horizon, 1e-9)) * fastest[i]
            own = held[j.job_id]
            order = sorted(cluster.up_nodes, key=lambda n: (
                -rel[i, index[cluster.nodes[n].gpu_type]], -rates[index[cluster.nodes[n].gpu_type], 1], n))
            mine: Layout = {}
            pace = copies_rate(cluster, rates, index, own)
            factor = None if self.fork_model is None else _factor(
                self.fork_model, j.job_type, j.done_steps / j.total_steps, state.round_s)
            for n in order:
                r = index[cluster.nodes[n].gpu_type]
                if pace >= target * (1 - 1e-9):
                    break
                if j.throughputs[r] > 0 and free[n] and n not in own:
                    k = min(j.scale_factor, free[n])
                    m = len(own) + len(mine)
                    if factor is not None and factor(m + 1) * (pace + rates[r, k]) <= factor(m) * pace:
                        continue  # under the estimate this copy adds nothing to the job
                    mine[n] = k
                    free[n] -= k
                    pace += rates[r, k]
            if mine:
                out[j.job_id] = mine
        return out

    def _spread_rate(self, state: SchedulerState) -> FloatArray:
        """Per job: steps/s with its largest copy on every node at once (its fastest possible pace)."""
        index = {t: r for r, t in enumerate(state.gpu_types)}
        out = np.zeros(len(state.jobs))
        for i, j in enumerate(state.jobs):
            rates = copy_rates(state.table, j.job_type, j.scale_factor, state.gpu_types)
            out[i] = sum(rates[index[state.cluster.nodes[n].gpu_type], min(state.cluster.nodes[n].gpus, j.scale_factor)]
                         for n in state.cluster.up_nodes)
        return np.maximum(out, 1e-300)

    def _fork(self, state: SchedulerState, x: FloatArray, value: FloatArray, book: PriceBook,
              held: dict[int, Layout]) -> None:
        """Offer every node's free GPUs to job copies; adds the new copies to ``held`` (GPUs per node)."""
        cluster = state.cluster
        nodes = NodeFree(cluster, _free(cluster, held))
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
            if self.fork_model is None:
                room = j.remaining_steps - total * state.round_s
                candidates.append(CopyCandidate(i, rates, unit[i], room, set(mine), prefer))
                continue
            factor = _factor(self.fork_model, j.job_type, j.done_steps / j.total_steps, state.round_s)
            room = j.remaining_steps - factor(len(mine)) * total * state.round_s
            candidates.append(CopyCandidate(i, rates, unit[i], room, set(mine), prefer, factor, len(mine), total))
        for i, new in offer_nodes(nodes, book, candidates, state.round_s).items():
            _add(held[state.jobs[i].job_id], dict(new))


def _factor(model: ForkModel, job_type: str, fraction: float, round_s: float) -> Callable[[int], float]:
    """eff(m) of the job's m copies as ``model`` estimates it this round (``ForkModel.rate_factor``)."""
    return lambda m: model.rate_factor(job_type, m, fraction, round_s)


def _add(layout: Layout, more: Mapping[int, int]) -> None:
    """Add ``more`` GPUs per node to ``layout``."""
    for n, k in more.items():
        layout[n] = layout.get(n, 0) + k


def _free(cluster: Cluster, held: Mapping[int, Layout]) -> Layout:
    """Free GPUs per up node: its GPUs less those ``held`` there."""
    free = {n: len(cluster.gpus_of_node(n)) for n in cluster.up_nodes}
    for layout in held.values():
        for n, k in layout.items():
            free[n] -= k
    return free


def copy_rates(table: ThroughputTable, job_type: str, w: int, types: tuple[str, ...]) -> FloatArray:
    """rates[r, k]: steps/s of a copy on k = 0..W GPUs of type r (``ThroughputTable.rate_on``)."""
    rates = np.zeros((len(types), w + 1))
    for r, t in enumerate(types):
        for k in range(1, w + 1):
            rates[r, k] = table.rate_on(job_type, k, t)
    return rates
