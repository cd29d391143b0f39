"""Contract every round planner obeys (hadar.engine.RoundPlanner), whichever allocation it is given.

A planner turns a valid allocation into the round's leases on GPU ids:

- the plan starts at ``state.now_s`` and lasts ``state.round_s``; every lease names a job of the
  state with its type, gang size and remaining steps; a GPU is leased at most once, and each
  lease's GPU ids are valid, sorted and distinct;
- it realizes the allocation: Gavel's ``rounds`` planner gives a job ``scale_factor`` GPUs of one
  type it can run on; ``placement`` gives a job exactly its ``counts`` per GPU type (jobs may span
  types); ``forking`` gives every copy its (node, GPU count), all on that one node, at most one
  copy of a job per node, copies numbered 0..k-1 in node order;
- it keeps a job on the GPUs it held last round whenever the new lease has the same shape (GPUs
  per type; per node for a copy) and no other lease took them, and marks such leases ``extended``;
  ``extended`` is never set otherwise;
- the same inputs give the same plan (a fresh planner with the same seed), and the inputs are not
  modified.

The allocations come from every registered policy (through the planner its traits name) and from
seeded random generators of valid allocations of each kind.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from hadar.build import make_planner
from hadar.engine import RoundPlanner
from hadar.mechanism.forking import ForkingPlanner
from hadar.mechanism.placement import PlacementPlanner
from hadar.mechanism.rounds import GavelRoundPlanner
from hadar.model import Cluster, JobView, SchedulerState, ThroughputTable
from hadar.model.cluster import Node
from hadar.model.plan import RoundPlan
from hadar.model.state import Allocation
from hadar.policies import available, create

TABLE = ThroughputTable.load()
KINDS = [("ResNet-50 (batch size 64)", 1), ("Transformer (batch size 128)", 2), ("A3C", 1),
         ("Recommendation (batch size 1024)", 1), ("ResNet-18 (batch size 256)", 4), ("CycleGAN", 1),
         ("LM (batch size 40)", 2), ("ResNet-50 (batch size 128)", 2)]


def _cluster(per_node: int) -> Cluster:
    if per_node == 1:
        return Cluster.from_counts({"v100": 3, "p100": 3, "k80": 4})
    return Cluster((Node("v100-0", "v100", 4), Node("v100-1", "v100", 4), Node("p100-0", "p100", 4),
                    Node("k80-0", "k80", 2), Node("k80-1", "k80", 2), Node("k80-2", "k80", 2)))


def _state(n_jobs: int, per_node: int, now: float = 4_000.0) -> SchedulerState:
    cluster = _cluster(per_node)
    jobs = []
    for i in range(n_jobs):
        jt, sf = KINDS[i % len(KINDS)]
        total = 20_000.0
        jobs.append(JobView(job_id=10 + i, job_type=jt, scale_factor=sf, priority_weight=1.0 + (i % 3 == 0),
                            arrival_s=now - 250.0 * i, total_steps=total, remaining_steps=total * (1 - 0.1 * (i % 7)),
                            throughputs=TABLE.row(jt, sf, cluster.gpu_types)))
    return SchedulerState(now_s=now, round_s=360.0, cluster=cluster, jobs=tuple(jobs), table=TABLE)


STATES: dict[str, Callable[[], SchedulerState]] = {
    "crowded_1gpu_nodes": lambda: _state(14, 1),
    "sparse_1gpu_nodes": lambda: _state(3, 1),
    "crowded_4gpu_nodes": lambda: _state(14, 4),
    "sparse_4gpu_nodes": lambda: _state(3, 4),
}


# -- valid allocations of each kind (seeded) --------------------------------------------------------
def random_fractions(state: SchedulerState, rng: np.random.Generator) -> Allocation:
    """Time fractions: rows <= 1, per type sum of W x fraction <= GPUs, 0 where a job cannot run."""
    t = state.throughput_matrix()
    x = rng.random(t.shape) * (t > 0) * (rng.random(t.shape) < 0.7)
    x /= np.maximum(1.0, x.sum(axis=1))[:, None]
    load = (x * state.scale_factors()[:, None]).sum(axis=0)
    x *= np.minimum(1.0, state.capacities() / np.maximum(load, 1e-12))[None, :]
    return Allocation.for_state(state, x)


def random_counts(state: SchedulerState, rng: np.random.Generator) -> Allocation:
    """Whole gangs of W GPUs, possibly over several types (Hadar), within each type's capacity."""
    free = {t: state.cluster.count(t) for t in state.gpu_types}
    counts: dict[int, dict[str, int]] = {}
    for i in rng.permutation(len(state.jobs)):
        job = state.jobs[i]
        c: dict[str, int] = {}
        for r in rng.permutation(len(state.gpu_types)):
            t = state.gpu_types[r]
            if job.throughputs[r] > 0 and free[t] > 0:
                c[t] = min(free[t], job.scale_factor - sum(c.values()), int(rng.integers(1, job.scale_factor + 1)))
            if sum(c.values()) == job.scale_factor:
                break
        if sum(c.values()) == job.scale_factor:
            counts[job.job_id] = {t: k for t, k in c.items() if k > 0}
            for t, k in c.items():
                free[t] -= k
    x = np.zeros((len(state.jobs), len(state.gpu_types)))
    for i, job in enumerate(state.jobs):
        for t, k in counts.get(job.job_id, {}).items():
            x[i, state.gpu_types.index(t)] = k / job.scale_factor
    return Allocation.for_state(state, x, counts=counts)


def random_copies(state: SchedulerState, rng: np.random.Generator) -> Allocation:
    """Copies of 1..W GPUs, at most one per node and job, within each node's GPUs (HadarE)."""
    cluster = state.cluster
    free = [n.gpus for n in cluster.nodes]
    copies: dict[int, list[tuple[int, int]]] = {}
    for i in rng.permutation(len(state.jobs)):
        job = state.jobs[i]
        for n in rng.permutation(len(cluster.nodes)):
            r = state.gpu_types.index(cluster.nodes[n].gpu_type)
            if job.throughputs[r] > 0 and free[n] > 0 and rng.random() < 0.5:
                k = int(rng.integers(1, min(job.scale_factor, free[n]) + 1))
                copies.setdefault(job.job_id, []).append((int(n), k))
                free[n] -= k
    x = np.zeros((len(state.jobs), len(state.gpu_types)))
    for i, job in enumerate(state.jobs):
        held = copies.get(job.job_id, [])
        for n, k in held:
            x[i, state.gpu_types.index(cluster.nodes[n].gpu_type)] += k
        x[i] /= max(sum(k for _, k in held), job.scale_factor)
    return Allocation.for_state(state, x, copies={j: tuple(c) for j, c in copies.items()})


@dataclass(frozen=True)
class Kind:
    """A planner under test: how to build it and a generator of allocations it takes."""

    make: Callable[[Cluster], RoundPlanner]
    allocations: Callable[[SchedulerState, np.random.Generator], Allocation]
    realizes: str  # "one_type_gang", "counts" or "copies"


PLANNERS: dict[str, Kind] = {
    "rounds": Kind(lambda c: GavelRoundPlanner(), random_fractions, "one_type_gang"),
    "rounds_shuffled": Kind(lambda c: GavelRoundPlanner(shuffle_types=True, seed=3), random_fractions,
                            "one_type_gang"),
    "rounds_skip_zero": Kind(lambda c: GavelRoundPlanner(skip_zero_priority=True), random_fractions,
                             "one_type_gang"),
    "placement": Kind(lambda c: PlacementPlanner(), random_counts, "counts"),
    "forking": Kind(lambda c: ForkingPlanner(), random_copies, "copies"),
}
SEEDS = range(4)


# -- the contract ---------------------------------------------------------------------------------
def check_plan(state: SchedulerState, alloc: Allocation | None, plan: RoundPlan, realizes: str,
               previous: RoundPlan | None = None) -> None:
    cluster = state.cluster
    jobs = {j.job_id: j for j in state.jobs}
    assert plan.start_s == state.now_s
    assert plan.duration_s == state.round_s
    by_id = {lease.job_id: lease for lease in plan.leases}
    for lease in plan.leases:  # space sharing: a pair's two leases hold the same GPUs and name each other
        if lease.partner_id >= 0:
            other = by_id[lease.partner_id]
            assert (other.partner_id, other.partner_type, other.gpus) == (lease.job_id, lease.job_type, lease.gpus)
            # a pair the allocation gave a share, or (Gavel's rounds hand GPUs left over to units without a
            # share) two jobs of the same GPU count that the table measured together on this type
            assert alloc is not None and alloc.pairs is not None
            t = cluster.gpu_type_of[lease.gpus[0]]
            assert tuple(sorted((lease.job_id, other.job_id))) in {tuple(sorted(k)) for k in alloc.pairs} or (
                jobs[lease.job_id].scale_factor == jobs[other.job_id].scale_factor and min(
                    state.table.pair_rates(lease.job_type, other.job_type, lease.scale_factor, t)) > 0)
    leased = [g for lease in plan.leases if lease.partner_id < 0 or lease.job_id < lease.partner_id
              for g in lease.gpus]
    assert len(leased) == len(set(leased)), "a GPU is leased twice"
    assert all(0 <= g < cluster.num_gpus for g in leased)
    assert len({(lease.job_id, lease.copy) for lease in plan.leases}) == len(plan.leases)
    before = {(lease.job_id, lease.gpus) for lease in previous.leases} if previous is not None else set()
    for lease in plan.leases:
        job = jobs[lease.job_id]
        assert (lease.job_type, lease.scale_factor, lease.max_steps) == (job.job_type, job.scale_factor,
                                                                         job.remaining_steps)
        assert lease.gpus and list(lease.gpus) == sorted(set(lease.gpus))
        if realizes == "copies":
            assert lease.extended == ((lease.job_id, lease.gpus) in before)
        else:
            assert lease.extended == (lease.gpus == job.previous_gpus)
    CHECKS[realizes](state, alloc, plan)


def _types(cluster: Cluster, gpus: tuple[int, ...]) -> Counter[str]:
    return Counter(cluster.gpu_type_of[g] for g in gpus)


def _one_type_gangs(state: SchedulerState, alloc: Allocation | None, plan: RoundPlan) -> None:
    for lease in plan.leases:
        assert lease.copy == 0
        assert len(lease.gpus) == lease.scale_factor, "a gang of another size"
        (t,) = _types(state.cluster, lease.gpus)  # one GPU type
        job = next(j for j in state.jobs if j.job_id == lease.job_id)
        assert job.throughputs[state.gpu_types.index(t)] > 0, "a job placed where it cannot run"


def _counts(state: SchedulerState, alloc: Allocation | None, plan: RoundPlan) -> None:
    want = dict(alloc.counts or {}) if alloc is not None else {}
    got = {lease.job_id: _types(state.cluster, lease.gpus) for lease in plan.leases}
    assert all(lease.copy == 0 for lease in plan.leases)
    assert len(got) == len(plan.leases)
    live = {j.job_id for j in state.jobs}
    assert got == {jid: Counter(dict(c)) for jid, c in want.items() if jid in live and c}


def _copies(state: SchedulerState, alloc: Allocation | None, plan: RoundPlan) -> None:
    cluster = state.cluster
    want = dict(alloc.copies or {}) if alloc is not None else {}
    live = {j.job_id for j in state.jobs}
    got: dict[int, list[tuple[int, int]]] = {}
    first: dict[int, list[int]] = {}  # per job, each lease's first node, in copy order
    for lease in sorted(plan.leases, key=lambda le: (le.job_id, le.copy)):
        nodes = sorted({cluster.node_of[g] for g in lease.gpus})
        if len(nodes) > 1:  # a synchronous gang across the nodes of copies (fork_credit): W GPUs of one type
            assert len(lease.gpus) == lease.scale_factor and len(_types(cluster, lease.gpus)) == 1
        for n in nodes:
            got.setdefault(lease.job_id, []).append((n, sum(cluster.node_of[g] == n for g in lease.gpus)))
        first.setdefault(lease.job_id, []).append(nodes[0])
        assert 1 <= len(lease.gpus) <= sum(cluster.nodes[n].gpus for n in nodes)
    for jid, parts in got.items():
        nodes = [n for n, _ in parts]
        assert len(nodes) == len(set(nodes)), "one copy per node"
        assert first[jid] == sorted(first[jid]), "copies are numbered in node order"
    assert {j: sorted(p) for j, p in got.items()} == {j: sorted(c) for j, c in want.items() if j in live and c}


CHECKS = {"one_type_gang": _one_type_gangs, "counts": _counts, "copies": _copies}


def _held(state: SchedulerState, plan: RoundPlan) -> SchedulerState:
    """The next round's state after ``plan`` ran (same jobs and counters, GPUs held)."""
    held: dict[int, list[int]] = {}
    for lease in plan.leases:
        held.setdefault(lease.job_id, []).extend(lease.gpus)
    jobs = tuple(dataclasses.replace(j, previous_gpus=tuple(sorted(held.get(j.job_id, ())))) for j in state.jobs)
    return dataclasses.replace(state, jobs=jobs)


# -- tests ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("which", sorted(STATES))
@pytest.mark.parametrize("kind", sorted(PLANNERS))
def test_random_allocations_become_valid_leases(kind: str, which: str, seed: int) -> None:
    k, state = PLANNERS[kind], STATES[which]()
    alloc = k.allocations(state, np.random.default_rng(seed))
    plan = k.make(state.cluster).plan(state, alloc, None)
    check_plan(state, alloc, plan, k.realizes)
    if k.realizes != "one_type_gang":  # placement and forking place every job of the allocation
        assert sum(len(lease.gpus) for lease in plan.leases) == sum(
            sum((alloc.counts or {}).get(j, {}).values()) + sum(n for _, n in (alloc.copies or {}).get(j, ()))
            for j in state.job_ids)


@pytest.mark.parametrize("which", sorted(STATES))
@pytest.mark.parametrize("name", sorted(available()))
def test_policy_allocations_through_their_planner(name: str, which: str) -> None:
    policy, state = create(name), STATES[which]()
    alloc = policy.allocate(state)
    plan = make_planner(policy.traits, 0).plan(state, alloc, None)
    realizes = {"rounds": "one_type_gang", "placement": "counts", "forking": "copies"}[policy.traits.planner]
    check_plan(state, alloc, plan, realizes)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("which", sorted(STATES))
@pytest.mark.parametrize("kind", ["rounds", "rounds_skip_zero", "placement", "forking"])
def test_same_allocation_next_round_keeps_every_gpu(kind: str, which: str, seed: int) -> None:
    k, state = PLANNERS[kind], STATES[which]()
    alloc = k.allocations(state, np.random.default_rng(seed))
    first = k.make(state.cluster).plan(state, alloc, None)
    nxt = _held(state, first)
    second = k.make(state.cluster).plan(nxt, alloc, first)
    check_plan(nxt, alloc, second, k.realizes, first)
    assert {(le.job_id, le.copy, le.gpus) for le in second.leases} == {(le.job_id, le.copy, le.gpus)
                                                                        for le in first.leases}
    assert all(lease.extended for lease in second.leases)


def _without(alloc: Allocation, state: SchedulerState, drop: set[int]) -> Allocation:
    """``alloc`` with the jobs in ``drop`` given nothing (the others exactly as before)."""
    keep = np.array([[j.job_id not in drop] for j in state.jobs], dtype=float)
    counts = {j: c for j, c in alloc.counts.items() if j not in drop} if alloc.counts is not None else None
    copies = {j: c for j, c in alloc.copies.items() if j not in drop} if alloc.copies is not None else None
    return Allocation.for_state(state, alloc.fractions * keep, counts=counts, copies=copies)


def _check_kept(state: SchedulerState, plan: RoundPlan, realizes: str) -> int:
    """Wherever a lease has the shape of what its job held (per node for a copy) and no other lease took
    those GPUs, it holds exactly them. Returns how many leases that rule covered."""
    cluster = state.cluster
    prev = {j.job_id: j.previous_gpus for j in state.jobs}
    covered = 0
    for lease in plan.leases:
        others = {g for le in plan.leases if le.job_id != lease.job_id for g in le.gpus}
        mine = prev[lease.job_id]
        if realizes == "copies":
            mine = tuple(g for g in mine if cluster.node_of[g] == cluster.node_of[lease.gpus[0]])
        if mine and _types(cluster, mine) == _types(cluster, lease.gpus) and others.isdisjoint(mine):
            assert lease.gpus == mine, f"job {lease.job_id} moved from {mine} to {lease.gpus}"
            assert lease.extended
            covered += 1
    return covered


@pytest.mark.parametrize("which", sorted(STATES))
@pytest.mark.parametrize("kind", sorted(PLANNERS))
def test_a_lease_of_the_same_shape_keeps_its_gpus(kind: str, which: str) -> None:
    """Plan a round, then the next one under another allocation: the same one without some jobs (the
    others must not move), and a fresh random one (whoever keeps its shape keeps its GPUs)."""
    k, state = PLANNERS[kind], STATES[which]()
    covered = 0
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        alloc = k.allocations(state, rng)
        first = k.make(state.cluster).plan(state, alloc, None)
        nxt = _held(state, first)
        dropped = {lease.job_id for lease in first.leases[::3]}
        for again in (_without(alloc, nxt, dropped), k.allocations(nxt, rng)):
            second = k.make(state.cluster).plan(nxt, again, first)
            check_plan(nxt, again, second, k.realizes, first)
            covered += _check_kept(nxt, second, k.realizes)
    assert covered > 0


@pytest.mark.parametrize("which", sorted(STATES))
@pytest.mark.parametrize("kind", sorted(PLANNERS))
def test_deterministic_and_inputs_untouched(kind: str, which: str) -> None:
    k, state = PLANNERS[kind], STATES[which]()
    alloc = k.allocations(state, np.random.default_rng(7))
    def snapshot() -> tuple[object, ...]:
        counts = {j: dict(c) for j, c in (alloc.counts or {}).items()}
        return copy.deepcopy(state.jobs), alloc.as_dict(), counts, dict(alloc.copies or {})

    before = snapshot()
    a = k.make(state.cluster).plan(state, alloc, None)
    b = k.make(state.cluster).plan(state, alloc, None)
    assert a == b
    assert snapshot() == before


@pytest.mark.parametrize("kind", sorted(PLANNERS))
def test_no_allocation_or_no_jobs(kind: str) -> None:
    k, state = PLANNERS[kind], STATES["sparse_4gpu_nodes"]()
    empty = dataclasses.replace(state, jobs=())
    for st, alloc in ((state, None), (empty, None), (empty, k.allocations(empty, np.random.default_rng(0)))):
        plan = k.make(st.cluster).plan(st, alloc, None)
        check_plan(st, alloc, plan, k.realizes)
        assert plan.leases == ()


@pytest.mark.parametrize("kind", ["placement", "forking"])
def test_jobs_that_ended_since_the_allocation_are_skipped(kind: str) -> None:
    k, state = PLANNERS[kind], STATES["crowded_4gpu_nodes"]()
    alloc = k.allocations(state, np.random.default_rng(1))
    gone = {state.jobs[0].job_id, state.jobs[3].job_id}
    later = dataclasses.replace(state, jobs=tuple(j for j in state.jobs if j.job_id not in gone))
    plan = k.make(state.cluster).plan(later, alloc, None)
    check_plan(later, alloc, plan, k.realizes)
    assert not gone & set(plan.job_ids)
