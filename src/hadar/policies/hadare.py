"""HadarE: Hadar's pricing and placement plus job forking (spec/hadar.md section 4).

A round, in order:

1. **Pace guard** (``fork_guard``, in rounds): the forking LP on the
   remaining work (``metrics.bound``: a GPU-second of type r earns a
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
3. **Forking** (``mechanism/forking.py``): every node with GPUs still free
   is offered to job copies by the same primal-dual rule with the same
   prices: at most one copy of a job per node, 1..W GPUs each, worth the
   share of the job's remaining work it does this round; then a zero-price
   fill pass, then a speed-up pass for jobs that finish this round anyway.
   With few jobs left, one job spreads over every node.

The allocation's ``placement`` holds every GPU of every copy of a job;
``ForkingPlanner`` splits it per node into leases with copy ids. Its
``fractions`` are GPUs of each type / max(GPUs held, W), so the usual
contract (per-job sum <= 1, per-type W x fraction <= GPUs of the type)
holds even for a job holding more than W GPUs.
"""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

import numpy as np

from hadar.mechanism.forking import CopyCandidate, ForkingPlanner, NodeFree, copies_rate, offer_nodes
from hadar.metrics.bound import copy_limits, lp_efficiency
from hadar.model.cluster import Cluster
from hadar.model.state import Allocation, SchedulerState
from hadar.model.throughput import ThroughputTable
from hadar.policies.hadar.policy import HadarPolicy
from hadar.policies.registry import register


@register("hadare", "HadarE: Hadar, then job copies (one per node, up to W GPUs each) on every node with free GPUs")
class HadarEPolicy(HadarPolicy):
    """Hadar's parameters (see ``HadarPolicy``; its JCT plan, TTD keeper and first-round rule are
    off by default here: the plan's and the keeper's horizons do not model forking, and copies
    start jobs at once), plus

    ``fork``: offer free nodes to copies (off: Hadar's placements run as per-node copies);
    ``match``: exponent of the LP-fit weight on utilities (0: off; 2 by default);
    ``fork_guard``: the pace guard's slack in rounds (None: off; 1 round by default).
    """

    name: ClassVar[str] = "hadare"
    forks: ClassVar[bool] = True
    cut_rounds: ClassVar[bool] = False  # measured (docs/results.md) with whole rounds

    def __init__(self, *, fork: bool = True, match: float = 2.0, fork_guard: float | None = 1.0,
                 guard: float | None = None, keep_slack: float | None = None, first_round: bool = False,
                 plan: str = "pack", **kwargs: object) -> None:
        super().__init__(guard=guard, keep_slack=keep_slack, first_round=first_round, plan=plan,  # type: ignore[arg-type]
                         **kwargs)
        self.fork = fork
        self.match = match
        self.fork_guard = fork_guard
        self._rates: dict[tuple[int, str, int], np.ndarray] = {}
        self._lp_memo: tuple[SchedulerState, tuple[float, np.ndarray]] | None = None

    def adjust_values(self, state: SchedulerState, x: np.ndarray, value: np.ndarray) -> np.ndarray:
        """Weigh job i's utility on type r by ``max(rel[i, r], 0.01) ** match``: how well r fits the
        forking LP's TTD-optimal plan for the remaining work (``metrics.bound.lp_efficiency``)."""
        if self.match <= 0:
            return value
        return value * np.maximum(self._lp(state)[1], 0.01) ** self.match

    def _lp(self, state: SchedulerState) -> tuple[float, np.ndarray]:
        """(horizon, rel) of the forking LP on the remaining work; solved once per state."""
        if self._lp_memo is None or self._lp_memo[0] is not state:
            per_gpu, caps = copy_limits(state.jobs, state.cluster, state.table)  # type: ignore[arg-type]
            self._lp_memo = (state, lp_efficiency(per_gpu, state.remaining_steps(), state.cluster, caps))
        return self._lp_memo[1]

    def make_planner(self, cluster: Cluster, seed: int) -> ForkingPlanner:  # type: ignore[override]
        return ForkingPlanner(cluster)

    def allocate(self, state: SchedulerState) -> Allocation:
        jobs, types = state.jobs, state.gpu_types
        if not jobs:
            return Allocation.for_state(state, np.zeros((0, len(types))), placement={})
        index = {t: r for r, t in enumerate(types)}
        reserved = self._spread_critical(state)
        x, scale, value, counts, placement = self.place(state, reserved)
        gpus = {j.job_id: list(reserved.get(j.job_id, placement.get(j.job_id, ()))) for j in jobs}
        book = self.price_book(state, value, scale) if self.fork else None
        if book is not None:
            for c in counts.values():
                book.take(c)
            book.take(Counter(index[state.cluster.gpu_type_of[g]] for gs in reserved.values() for g in gs))
            self._fork(state, x, value, book, gpus)
        fractions = np.zeros((len(jobs), len(types)))
        for i, j in enumerate(jobs):
            for g in gpus[j.job_id]:
                fractions[i, index[state.cluster.gpu_type_of[g]]] += 1.0
            fractions[i] /= max(len(gpus[j.job_id]), j.scale_factor)
        return Allocation.for_state(state, fractions, placement={k: tuple(sorted(v)) for k, v in gpus.items() if v})

    def _spread_critical(self, state: SchedulerState) -> dict[int, tuple[int, ...]]:
        """Makespan guard for forking (a pace controller). ``t_min``: a job's remaining time at its
        fastest pace (its largest copy on every node); ``H``: the forking LP's horizon for all the
        remaining work. A job with ``t_min >= H - fork_guard x round_s`` (within ``fork_guard`` rounds
        of being the bottleneck; decisions are per round, so it must be paced now) must keep at least the share
        ``t_min / H`` of its fastest pace or the workload cannot finish by H: it gets copies first
        (most critical job first; on each node as many GPUs as free, up to W; nodes where it fits
        the LP plan best, then fastest, first) until its copies reach that pace."""
        if self.fork_guard is None or not self.fork:
            return {}
        horizon, rel = self._lp(state)
        fastest = self._spread_rate(state)
        t_min = state.remaining_steps() / fastest
        hot = np.flatnonzero(t_min >= horizon - self.fork_guard * state.round_s)
        cluster = state.cluster
        index = {t: r for r, t in enumerate(state.gpu_types)}
        free = {n: list(cluster.gpus_of_node(n)) for n in range(len(cluster.nodes))}
        out: dict[int, tuple[int, ...]] = {}
        for i in hot[np.argsort(-t_min[hot], kind="stable")]:
            j = state.jobs[i]
            rates = self._copy_rates(state.table, j.job_type, j.scale_factor, state.gpu_types)
            target = min(1.0, t_min[i] / max(horizon, 1e-9)) * fastest[i]
            order = sorted(range(len(cluster.nodes)), key=lambda n: (
                -rel[i, index[cluster.nodes[n].gpu_type]], -rates[index[cluster.nodes[n].gpu_type], 1], n))
            mine: list[int] = []
            pace = 0.0
            for n in order:
                r = index[cluster.nodes[n].gpu_type]
                if pace >= target * (1 - 1e-9):
                    break
                if j.throughputs[r] > 0 and free[n]:
                    k = min(j.scale_factor, len(free[n]))
                    mine.extend(free[n][:k])
                    free[n] = free[n][k:]
                    pace += rates[r, k]
            if mine:
                out[j.job_id] = tuple(mine)
        return out

    def _spread_rate(self, state: SchedulerState) -> np.ndarray:
        """Per job: steps/s with its largest copy on every node at once (its fastest possible pace)."""
        index = {t: r for r, t in enumerate(state.gpu_types)}
        out = np.zeros(len(state.jobs))
        for i, j in enumerate(state.jobs):
            rates = self._copy_rates(state.table, j.job_type, j.scale_factor, state.gpu_types)
            out[i] = sum(rates[index[node.gpu_type], min(node.gpus, j.scale_factor)] for node in state.cluster.nodes)
        return np.maximum(out, 1e-300)

    def _fork(self, state: SchedulerState, x: np.ndarray, value: np.ndarray, book: object,
              gpus: dict[int, list[int]]) -> None:
        """Offer every node's free GPUs to job copies; adds the new copies' GPUs to ``gpus``."""
        cluster = state.cluster
        busy = {g for v in gpus.values() for g in v}
        nodes = NodeFree(cluster, [g for g in range(cluster.num_gpus) if g not in busy])
        if nodes.total() == 0:
            return
        index = {t: r for r, t in enumerate(state.gpu_types)}
        unit = np.divide(value, x, out=np.zeros_like(value), where=x > 0)
        candidates = []
        for i, j in enumerate(state.jobs):
            rates = self._copy_rates(state.table, j.job_type, j.scale_factor, state.gpu_types)
            mine = gpus[j.job_id]
            room = j.remaining_steps - copies_rate(cluster, rates, index, mine) * state.round_s
            candidates.append(CopyCandidate(i, rates, unit[i], room, {cluster.node_of[g] for g in mine},
                                            frozenset(cluster.node_of[g] for g in j.previous_gpus)))
        for i, new in offer_nodes(nodes, book, candidates, state.round_s).items():  # type: ignore[arg-type]
            gpus[state.jobs[i].job_id].extend(g for copy in new for g in copy)

    def _copy_rates(self, table: ThroughputTable, job_type: str, w: int, types: tuple[str, ...]) -> np.ndarray:
        """rates[r, k]: steps/s of a copy on k = 0..W GPUs of type r (cached per table, job type and W)."""
        key = (id(table), job_type, w)
        rates = self._rates.get(key)
        if rates is None:
            rates = np.zeros((len(types), w + 1))
            for r, t in enumerate(types):
                for k in range(1, w + 1):
                    rates[r, k] = table.rate_on(job_type, k, t)
            if len(self._rates) > 4096:
                self._rates.clear()
            self._rates[key] = rates
        return rates
