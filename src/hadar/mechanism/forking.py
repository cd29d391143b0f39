"""HadarE's forking: job copies on nodes with free GPUs, and the planner that leases them.

A job may run as at most one **copy per node**; a copy uses 1..W GPUs of
that one node (so it never synchronizes across nodes or GPU types) and
progresses at ``X[type, k, r]`` (``ThroughputTable.rate_on``). Progress
adds over copies (the ledger sums them).

``offer_nodes`` is the primal-dual rule of spec section 4: after Hadar's
placement, every node with free GPUs is offered to job copies. A job's
best response is the copy (GPU type r, size k, on a node of type r that
holds no copy of it yet) maximizing ``utility - prices of its k GPUs``,
where the utility is the job's value per unit of rate on r times the
copy's **useful** rate (a copy beyond what finishes the job this round is
worth nothing). Copies are placed in decreasing payoff per GPU (a lazy
greedy: payoffs only fall as prices rise and nodes fill); then a fill
pass gives GPUs still free to copies with positive utility at zero price,
so no node idles while a job it can run is unfinished; a last pass gives
what is left to jobs that finish this round anyway, so they finish sooner.

``ForkingPlanner`` turns an allocation's copies (job id -> (node, GPU
count) per copy) into leases on GPU ids: one per copy, copy ids 0..k-1 in
node order, except where the run's fork efficiency says otherwise
(``fork_credit``): copies that gain by it run as one synchronous gang of W
GPUs across their nodes (a gang wider than a node is not a fork), and a
copy that would slow its job down does not run.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from hadar.arrays import FloatArray, IntArray
from hadar.mechanism.events import Event, Kind
from hadar.mechanism.fork_credit import credited_copies
from hadar.mechanism.planning import Stateless
from hadar.model.cluster import Cluster
from hadar.model.fork_efficiency import IDEAL
from hadar.model.fork_model import ForkSetting
from hadar.model.plan import Lease, RoundPlan
from hadar.model.state import Allocation, SchedulerState
from hadar.model.throughput import ThroughputTable

EPS = 1e-12


class Prices(Protocol):
    """The part of Hadar's ``PriceBook`` the forking rule needs."""

    free: IntArray

    def price(self, r: int, nth: int = 0) -> float: ...

    def take(self, counts: dict[int, int]) -> None: ...


@dataclass(slots=True)
class CopyCandidate:
    """One job as the forking rule sees it.

    ``rates[r, k]``: steps/s of a copy on k GPUs of type r (column 0 is 0;
    k up to W); ``unit_value[r]``: utility per step/s on type r (0: never
    there); ``room_steps``: steps not yet covered this round by its copies;
    ``held``: nodes that already hold a copy of it; ``prefer``: nodes it
    held last round (kept when free: no restart).

    ``factor``: the policy's estimate of eff(m), the share of m copies' summed rate credited (``ForkModel``'s
    ``rate_factor`` at the job's progress); then a copy is worth what it adds to the job's credited rate,
    ``factor(m + 1) x (total + its rate) - factor(m) x total`` with ``copies`` = m copies held at ``total``
    steps/s: its own steps less what it lowers every other copy's worth (None: every copy is worth its
    steps, the ideal and per-doubling credits' rule).
    """

    index: int
    rates: FloatArray
    unit_value: FloatArray
    room_steps: float
    held: set[int] = field(default_factory=set)
    prefer: frozenset[int] = frozenset()
    factor: Callable[[int], float] | None = None
    copies: int = 0
    total: float = 0.0

    def gain(self, rate: float) -> float:
        """Steps/s one more copy at ``rate`` adds to the job's credited rate (``rate`` where ``factor`` is None)."""
        f = self.factor
        if f is None:
            return rate
        return f(self.copies + 1) * (self.total + rate) - f(self.copies) * self.total


@dataclass(frozen=True, slots=True)
class _Choice:
    r: int
    k: int
    utility: float
    payoff: float

    @property
    def score(self) -> float:
        return self.payoff / self.k


class NodeFree:
    """Free GPUs per node (counts, not ids), nodes grouped by their GPU type index."""

    def __init__(self, cluster: Cluster, free: Mapping[int, int]) -> None:
        type_index = {t: r for r, t in enumerate(cluster.gpu_types)}
        self.free: dict[int, int] = {n: int(free[n]) for n in sorted(free) if free[n] > 0}
        self.by_type: list[list[int]] = [[] for _ in cluster.gpu_types]
        for n in self.free:
            self.by_type[type_index[cluster.nodes[n].gpu_type]].append(n)

    def total(self) -> int:
        return sum(self.free.values())

    def largest(self, r: int, exclude: set[int]) -> int:
        """Most free GPUs on one node of type r outside ``exclude`` (0 if none)."""
        return max((self.free[n] for n in self.by_type[r] if n not in exclude), default=0)

    def pick(self, r: int, k: int, exclude: set[int], prefer: frozenset[int]) -> int:
        """A node of type r with >= k free GPUs outside ``exclude``: a preferred one, else the best fit."""
        fits = [n for n in self.by_type[r] if n not in exclude and self.free[n] >= k]
        return min(fits, key=lambda n: (n not in prefer, self.free[n], n))

    def take(self, node: int, k: int) -> None:
        self.free[node] -= k


def offer_nodes(nodes: NodeFree, book: Prices, jobs: Sequence[CopyCandidate],
                round_s: float) -> dict[int, list[tuple[int, int]]]:
    """Place new copies on free GPUs; returns job index -> (node, GPU count) of each new copy.

    Mutates ``nodes``, ``book`` (GPUs taken in the priced pass) and each
    candidate's ``held`` and ``room_steps``.
    """
    out: dict[int, list[tuple[int, int]]] = {}
    if nodes.total() == 0:
        return out
    for mode in (PRICED, FILL, SPEEDUP):
        if nodes.total() == 0:
            break
        _greedy(nodes, book, jobs, round_s, out, mode)
    return out


PRICED, FILL, SPEEDUP = "priced", "fill", "speedup"


def _greedy(nodes: NodeFree, book: Prices, jobs: Sequence[CopyCandidate], round_s: float,
            out: dict[int, list[tuple[int, int]]], mode: str) -> None:
    heap: list[tuple[float, int]] = []
    for pos, job in enumerate(jobs):
        c = _best(nodes, book, job, round_s, mode)
        if c is not None:
            heap.append((-c.score, pos))
    heapq.heapify(heap)
    while heap and nodes.total() > 0:
        _, pos = heapq.heappop(heap)
        job = jobs[pos]
        c = _best(nodes, book, job, round_s, mode)
        if c is None:
            continue
        if heap and c.score < -heap[0][0] - EPS:  # stale: someone else may now be better
            heapq.heappush(heap, (-c.score, pos))
            continue
        node = nodes.pick(c.r, c.k, job.held, job.prefer)
        nodes.take(node, c.k)
        out.setdefault(job.index, []).append((node, c.k))
        if mode == PRICED:
            book.take({c.r: c.k})
        job.held.add(node)
        if job.factor is None:
            job.room_steps = max(0.0, job.room_steps - job.rates[c.r, c.k] * round_s)
        else:  # the copy's worth to the job, net of what it lowers its other copies'
            job.room_steps = max(0.0, job.room_steps - job.gain(job.rates[c.r, c.k]) * round_s)
            job.copies, job.total = job.copies + 1, job.total + job.rates[c.r, c.k]
        heapq.heappush(heap, (-c.score, pos))  # it may fork again on another node


def _best(nodes: NodeFree, book: Prices, job: CopyCandidate, round_s: float, mode: str) -> _Choice | None:
    """The job's best copy now: ``priced``: max payoff > 0; ``fill``: max utility > 0 at zero price
    (fewest GPUs on ties); ``speedup``: the same, counting a copy's whole rate even when the job's
    copies already finish it this round (it then finishes sooner; only for GPUs nobody else wants)."""
    if job.room_steps <= 0 and mode != SPEEDUP:
        return None
    priced = mode == PRICED
    best: _Choice | None = None
    for r in np.flatnonzero(job.unit_value > 0).tolist():
        top = min(job.rates.shape[1] - 1, nodes.largest(r, job.held))
        if priced:
            top = min(top, int(book.free[r]))
        cost = 0.0
        for k in range(1, top + 1):
            if priced:
                cost += book.price(r, k - 1)
            rate = job.rates[r, k] if job.factor is None else job.gain(job.rates[r, k])
            useful = rate if mode == SPEEDUP else min(rate * round_s, job.room_steps) / round_s
            utility = job.unit_value[r] * useful
            c = _Choice(r, k, utility, utility - cost)
            key = c.payoff if priced else c.utility
            if key > 0 and (best is None or key > (best.payoff if priced else best.utility) * (1 + 1e-9)):
                best = c
    return best


class ForkingPlanner(Stateless):
    """Leases from an allocation's ``copies`` (HadarE): one lease per (node, GPU count) copy.

    GPU ids on a node: first those the job held there last round (so a copy that keeps its node
    and size keeps exactly its GPUs), then the lowest free ones. Copy ids follow node order (copy
    0 on the lowest node index); a lease is ``extended`` when the job held exactly these GPUs as
    one copy last round. Jobs that finished since the allocation was made are skipped. Under
    ``efficiency`` (what the run credits forked copies), copies that gain by it run as one
    synchronous gang across their nodes and copies that cost their job progress are dropped
    (``fork_credit.credited_copies``).
    """

    def __init__(self, efficiency: ForkSetting = IDEAL, yield_after_s: float | None = None) -> None:
        self.efficiency = efficiency
        self.yield_after_s = yield_after_s

    def events(self, plan: RoundPlan, arrival_s: float) -> list[Event]:
        """Copies yield: on a full cluster where a job runs as several copies, an arrival ends the round once
        it has run ``yield_after_s`` (a copy's minimum lease), so the new job gets GPUs from the copies."""
        after = self.yield_after_s
        if after is None or len({lease.job_id for lease in plan.leases}) == len(plan.leases):
            return []
        return [Event(max(arrival_s, plan.start_s + after), Kind.YIELD)]

    def plan(self, state: SchedulerState, allocation: Allocation | None, previous: RoundPlan | None) -> RoundPlan:
        copies = allocation.copies if allocation is not None and allocation.copies is not None else {}
        before = {(lease.job_id, lease.gpus) for lease in previous.leases} if previous is not None else set()
        gpus = self.gpu_ids(state, copies)
        leases: list[Lease] = []
        for job in state.jobs:
            fraction = job.done_steps / job.total_steps if job.total_steps > 0 else 0.0
            groups = credited_copies(state.cluster, state.table, self.efficiency, job.job_type, job.scale_factor,
                                     gpus.get(job.job_id, []), fraction, state.round_s)
            for c, group in enumerate(groups):
                leases.append(Lease(job_id=job.job_id, job_type=job.job_type, scale_factor=job.scale_factor,
                                    gpus=group, max_steps=job.remaining_steps, copy=c,
                                    extended=(job.job_id, group) in before, restart_s=job.restart_s,
                                    owed_s=job.owed_s(group)))
        return RoundPlan(start_s=state.now_s, duration_s=state.round_s, leases=tuple(leases))

    def gpu_ids(self, state: SchedulerState, copies: Mapping[int, Sequence[tuple[int, int]]]
                ) -> dict[int, list[tuple[int, ...]]]:
        """Job id -> GPU ids of each copy (node order); raises ValueError if a node is oversubscribed or down."""
        cluster = state.cluster
        live = {job.job_id: job for job in state.jobs}
        free = {n: list(cluster.gpus_of_node(n)) if n in cluster.up_nodes else [] for n in range(len(cluster.nodes))}
        chosen: dict[tuple[int, int], list[int]] = {}
        for jid, parts in copies.items():  # pass 1: keep last round's GPUs on the same node
            if jid not in live:
                continue
            prev = live[jid].previous_gpus
            for n, k in parts:
                keep = [g for g in prev if cluster.node_of[g] == n and g in free[n]][:k]
                for g in keep:
                    free[n].remove(g)
                chosen[(jid, n)] = keep
        for jid, parts in copies.items():  # pass 2: the lowest free GPUs for the rest
            if jid not in live:
                continue
            for n, k in parts:
                got = chosen[(jid, n)]
                need = k - len(got)
                if need > len(free[n]):
                    raise ValueError(f"node {cluster.nodes[n].name}: {need} more GPUs wanted, {len(free[n])} free")
                got.extend(free[n][:need])
                del free[n][:need]
        out: dict[int, list[tuple[int, ...]]] = {}
        for (jid, _node), ids in sorted(chosen.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            out.setdefault(jid, []).append(tuple(sorted(ids)))
        return out


def copies_rate(cluster: Cluster, rates: FloatArray, type_index: Mapping[str, int], layout: Mapping[int, int]) -> float:
    """Total steps/s of a job's copies laid out as ``layout`` (node -> GPUs, one copy per node), ``rates[r, k]``
    as in CopyCandidate; summed in node order."""
    total = 0.0
    top = rates.shape[1] - 1
    for n in sorted(layout):
        total += float(rates[type_index[cluster.nodes[n].gpu_type], min(layout[n], top)])
    return total


#: a job's GPUs as node index -> how many (one copy per node); the GPU ids are the forking planner's
Layout = dict[int, int]


def add_layout(layout: Layout, more: Mapping[int, int]) -> None:
    """Add ``more`` GPUs per node to ``layout``."""
    for n, k in more.items():
        layout[n] = layout.get(n, 0) + k


def free_gpus(cluster: Cluster, held: Mapping[int, Layout]) -> Layout:
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
