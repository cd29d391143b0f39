"""Task-level placement: GPU counts per type -> GPU ids, and the planner that leases them.

Hadar decides how many GPUs of each type a job gets; ``assign_gpus`` picks
the ids: first the GPUs the job held last round (so a job that keeps its
counts keeps exactly its GPUs: no restart), then, for the rest, as few
nodes as possible (best-fit over nodes of the type, jobs needing more GPUs
placed first). ``PlacementPlanner`` turns an allocation's GPU ``counts``
into the round's leases with it. ``node_layout`` is the same rule on counts
(GPUs per node, no ids), for a policy that decides per node (HadarE).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from hadar.mechanism.planning import Stateless
from hadar.model.cluster import Cluster
from hadar.model.frozen import builder
from hadar.model.plan import Lease, RoundPlan
from hadar.model.state import Allocation, JobView, SchedulerState


def assign_gpus(cluster: Cluster, counts: Mapping[int, Mapping[str, int]],
                previous: Mapping[int, tuple[int, ...]], busy: Collection[int] = ()) -> dict[int, tuple[int, ...]]:
    """GPU ids per job for ``counts[job][gpu_type]`` among GPUs not ``busy``; raises ValueError if a
    type is oversubscribed."""
    by_node, usable = _by_node(cluster) if not busy else _free_by_node(cluster, busy)
    type_of, node_of = cluster.gpu_type_of, cluster.node_of
    kinds = _kinds(cluster)
    taken: set[int] = set()
    chosen: dict[int, list[int]] = {}
    whole: dict[int, tuple[int, ...]] = {}  # jobs that keep all of last round's GPUs: those, sorted
    need: dict[int, dict[str, int]] = {}
    for jid, per_type in counts.items():  # pass 1: keep last round's GPUs (those still up and free)
        prev = previous.get(jid, ())
        if prev:  # the common case, a job that keeps its counts on GPUs all still up and free: keeps them all
            got = kinds.get(prev)
            if got is None:
                got = kinds[prev] = (_kind(prev, type_of), tuple(sorted(prev)))
            if per_type == got[0] and usable.issuperset(prev) and taken.isdisjoint(prev):
                taken.update(prev)
                whole[jid] = got[1]
                continue
        mine: list[int] = []
        left = {}
        for t, k in per_type.items():
            if t not in by_node:
                raise KeyError(t)
            keep = [g for g in prev if type_of[g] == t and g in usable and g not in taken][:k]
            taken.update(keep)
            mine.extend(keep)
            if k - len(keep) > 0:
                left[t] = k - len(keep)
        chosen[jid] = mine
        if left:
            need[jid] = left
    if need:  # pass 2: pack the rest, on each type's nodes less the GPUs kept
        free: dict[str, dict[int, Sequence[int]]] = {}
        for jid in sorted(need, key=lambda j: -sum(need[j].values())):
            for t, k in need[jid].items():
                if t not in free:
                    free[t] = _less(by_node[t], [g for g in taken if type_of[g] == t], node_of)
                chosen[jid].extend(_take(free[t], k, {node_of[g] for g in chosen[jid]}, t))
    return {jid: whole[jid] if jid in whole else tuple(sorted(chosen[jid])) for jid in counts}


def node_layout(cluster: Cluster, counts: Mapping[int, Mapping[str, int]], previous: Mapping[int, tuple[int, ...]],
                busy: Mapping[int, int] | None = None) -> dict[int, dict[int, int]]:
    """GPUs per node (node -> count) for each job's ``counts[job][gpu_type]``, on the room ``busy`` (node ->
    GPUs held already) leaves: ``assign_gpus``'s rule on counts, choosing no GPU ids (a planner does).

    Pass 1: a job keeps the GPUs it held last round (in ``previous`` order), on up nodes with room left
    (jobs in ``counts`` order); pass 2 places the rest as ``assign_gpus`` does: the nodes the job uses
    already first, then best fit, jobs needing more GPUs first. Raises ValueError if a type is short."""
    taken = busy or {}
    room = {n: len(cluster.gpus_of_node(n)) - taken.get(n, 0) for n in cluster.up_nodes}
    type_of, node_of = cluster.gpu_type_of, cluster.node_of
    chosen: dict[int, list[int]] = {}  # job id -> the node of each GPU it gets
    need: dict[int, dict[str, int]] = {}
    for jid, per_type in counts.items():
        prev = previous.get(jid, ())
        mine: list[int] = []
        left = {}
        for t, k in per_type.items():
            if t not in cluster.gpus_by_type:
                raise KeyError(t)
            kept = 0
            for g in prev:
                if kept == k:
                    break
                n = node_of[g]
                if type_of[g] == t and room.get(n, 0) > 0:
                    room[n] -= 1
                    mine.append(n)
                    kept += 1
            if k > kept:
                left[t] = k - kept
        chosen[jid] = mine
        if left:
            need[jid] = left
    if need:  # pass 2: each free slot named by its node, so that _take's picks are nodes
        free: dict[str, dict[int, Sequence[int]]] = {}
        for jid in sorted(need, key=lambda j: -sum(need[j].values())):
            for t, k in need[jid].items():
                if t not in free:
                    free[t] = {n: (n,) * room[n] for n in cluster.nodes_of_type(t) if room[n] > 0}
                chosen[jid].extend(_take(free[t], k, set(chosen[jid]), t))
    out: dict[int, dict[int, int]] = {}
    for jid in counts:
        layout = out[jid] = {}
        for n in chosen[jid]:
            layout[n] = layout.get(n, 0) + 1
    return out


def _kind(gpus: tuple[int, ...], type_of: tuple[str, ...]) -> dict[str, int]:
    """GPUs per type of ``gpus``."""
    out: dict[str, int] = {}
    for g in gpus:
        out[type_of[g]] = out.get(type_of[g], 0) + 1
    return out


#: the last cluster's GPUs per type of each GPU tuple seen (a job keeps its tuple round after round)
_KINDS: list[tuple[Cluster, dict[tuple[int, ...], tuple[dict[str, int], tuple[int, ...]]]]] = []


def _kinds(cluster: Cluster) -> dict[tuple[int, ...], tuple[dict[str, int], tuple[int, ...]]]:
    """GPU tuple -> its GPUs per type and the tuple sorted, kept for the last cluster (by identity;
    cleared past 100,000)."""
    if _KINDS and _KINDS[0][0] is cluster and len(_KINDS[0][1]) <= 100_000:
        return _KINDS[0][1]
    _KINDS[:] = [(cluster, {})]
    return _KINDS[0][1]


#: the last cluster's up GPUs: type -> node -> ids (nodes in the order of ``gpus_by_type``), and all of them
_BY_NODE: list[tuple[Cluster, tuple[dict[str, dict[int, tuple[int, ...]]], frozenset[int]]]] = []


def _by_node(cluster: Cluster) -> tuple[dict[str, dict[int, tuple[int, ...]]], frozenset[int]]:
    """Type -> node -> its up GPUs, nodes in the order of ``gpus_by_type``, and the set of those GPUs
    (kept for the last cluster, by identity)."""
    if _BY_NODE and _BY_NODE[0][0] is cluster:
        return _BY_NODE[0][1]
    got = _free_by_node(cluster, ())
    _BY_NODE[:] = [(cluster, got)]
    return got


def _free_by_node(cluster: Cluster, busy: Collection[int]) -> tuple[dict[str, dict[int, tuple[int, ...]]],
                                                                      frozenset[int]]:
    """Type -> node -> its up GPUs not ``busy`` (nodes with none left out), and the set of those GPUs."""
    out: dict[str, dict[int, tuple[int, ...]]] = {}
    for t in cluster.gpu_types:
        per_node: dict[int, list[int]] = {}
        for g in cluster.gpus_by_type[t]:
            if g not in busy:
                per_node.setdefault(cluster.node_of[g], []).append(g)
        out[t] = {n: tuple(gs) for n, gs in per_node.items()}
    return out, frozenset(g for per in out.values() for gs in per.values() for g in gs)


def _less(nodes: dict[int, tuple[int, ...]], kept: list[int], node_of: tuple[int, ...]) -> dict[int, Sequence[int]]:
    """``nodes`` (node -> GPU ids) without the ``kept`` GPUs, in the same order (a node left empty stays)."""
    out: dict[int, Sequence[int]] = dict(nodes)
    gone = set(kept)
    for n in {node_of[g] for g in kept}:
        out[n] = [g for g in nodes[n] if g not in gone]
    return out


def _take(nodes: dict[int, Sequence[int]], k: int, mine: set[int], gpu_type: str) -> list[int]:
    """``k`` free GPUs from ``nodes``: nodes the job already uses first, then best fit, then largest
    (each node's GPUs from the front of its list; a node emptied by the best-fit pass is dropped)."""
    got: list[int] = []
    for n in mine:
        gs = nodes.get(n)
        if gs and k > len(got):
            j = min(k - len(got), len(gs))
            got.extend(gs[:j])
            nodes[n] = gs[j:]
    while len(got) < k:
        want = k - len(got)
        best_n, best_free = -1, 0
        for n, gs in nodes.items():  # smallest node that fits the rest, else the largest one
            c = len(gs)
            if c == 0:
                continue
            if c >= want and (best_free < want or c < best_free):
                best_n, best_free = n, c
                if c == want:
                    break
            elif best_free < want and c > best_free:
                best_n, best_free = n, c
        if best_n < 0:
            raise ValueError(f"not enough free {gpu_type} GPUs")
        gs = nodes[best_n]
        j = min(want, len(gs))
        got.extend(gs[:j])
        if j == len(gs):
            del nodes[best_n]
        else:
            nodes[best_n] = gs[j:]
    return got


class PlacementPlanner(Stateless):
    """Leases from an allocation's whole GPU ``counts`` per job and type (task-level policies: Hadar,
    YARN-CS): ``assign_gpus`` picks the ids, keeping each job's GPUs of last round where it can.

    Jobs that finished since the allocation was made are skipped; a lease is ``extended`` when
    the job holds exactly the GPUs it held last round. Space sharing (Hadar's ``share``): for a
    pair in ``allocation.pairs`` of which exactly one job has counts (the host), the other (the
    guest) gets a lease on the host's GPUs; both leases name their partner, so each runs at its
    co-located rate. A host shares with one guest at most (the first such pair, in the
    allocation's order). An adaptive job runs at the batch ``allocation.batches`` gives it; a lease whose
    batch differs from the job's lease of ``previous`` is not ``extended`` (a change of batch restarts it).
    """

    def plan(self, state: SchedulerState, allocation: Allocation | None, previous: RoundPlan | None) -> RoundPlan:
        counts = allocation.counts if allocation is not None and allocation.counts is not None else {}
        live = {job.job_id: job for job in state.jobs}
        want = {jid: c for jid, c in counts.items() if jid in live and c}
        prev = {jid: live[jid].previous_gpus for jid in want if live[jid].previous_gpus}
        ids = assign_gpus(state.cluster, want, prev)
        guest = _guests(allocation, want, live)
        leases: list[Lease] = []
        add = leases.append
        batches = allocation.batches if allocation is not None and allocation.batches else None
        for job in state.jobs:
            gpus = ids.get(job.job_id)
            if not gpus:
                continue
            if batches is not None and job.job_id in batches:
                add(_batch_lease(job, gpus, batches[job.job_id], previous))
            elif guest and job.job_id in guest:
                g = live[guest[job.job_id]]
                add(_lease(job, gpus, g))
                add(_lease(g, gpus, job))
            else:
                add(_lease(job, gpus, None))
        return RoundPlan(start_s=state.now_s, duration_s=state.round_s, leases=tuple(leases))


def _guests(allocation: Allocation | None, want: Mapping[int, object], live: Mapping[int, JobView]) -> dict[int, int]:
    """Host job id -> guest job id for the pairs of ``allocation`` (see ``PlacementPlanner``)."""
    out: dict[int, int] = {}
    pairs = allocation.pairs if allocation is not None and allocation.pairs else {}
    for a, b in pairs:
        for host, g in ((a, b), (b, a)):
            if (host in want and g in live and g not in want and host not in out
                    and g not in out.values() and live[g].scale_factor == live[host].scale_factor):
                out[host] = g
    return out


_build = builder(Lease)  # positional, in Lease's field order


def _batch_lease(job: JobView, gpus: tuple[int, ...], batch: float, previous: RoundPlan | None) -> Lease:
    """An adaptive job's lease at ``batch``: extended only on the same GPUs at the same batch as before."""
    before = next((x.batch for x in previous.leases if x.job_id == job.job_id and x.copy == 0), 0.0) \
        if previous is not None else 0.0
    return _build(job.job_id, job.job_type, job.scale_factor, gpus, job.remaining_steps, 0,
                  gpus == job.previous_gpus and batch == before, -1, "", job.restart_s, job.owed_s(gpus), batch)


def _lease(job: JobView, gpus: tuple[int, ...], partner: JobView | None) -> Lease:
    return _build(job.job_id, job.job_type, job.scale_factor, gpus, job.remaining_steps, 0, gpus == job.previous_gpus,
                  -1 if partner is None else partner.job_id, "" if partner is None else partner.job_type,
                  job.restart_s, job.owed_s(gpus), 0.0)
