"""``assign_gpus`` keeps a node's free GPUs as the cluster's tuples until it takes one and checks
last round's GPUs against a set: it must pick exactly the GPU ids of the plain version below (every
node's free list copied each round, GPUs removed one by one), on random clusters, counts, previous
GPUs (shared and down ones included) and busy GPUs."""

from __future__ import annotations

import random

import pytest

from hadar.mechanism.placement import assign_gpus, node_layout
from hadar.model.cluster import Cluster, Node


def _plain(cluster, counts, previous, busy=()):
    free = {}
    for t in cluster.gpu_types:
        per_node = {}
        for g in cluster.gpus_by_type[t]:
            if g not in busy:
                per_node.setdefault(cluster.node_of[g], []).append(g)
        free[t] = per_node
    chosen = {jid: [] for jid in counts}
    need = {}
    for jid, per_type in counts.items():
        prev = previous.get(jid, ())
        left = {}
        for t, k in per_type.items():
            keep = [g for g in prev if cluster.gpu_type_of[g] == t and g not in busy
                    and g in free[t].get(cluster.node_of[g], ())][:k]
            for g in keep:
                free[t][cluster.node_of[g]].remove(g)
            chosen[jid].extend(keep)
            if k - len(keep) > 0:
                left[t] = k - len(keep)
        need[jid] = left
    for jid in sorted(need, key=lambda j: -sum(need[j].values())):
        for t, k in need[jid].items():
            chosen[jid].extend(_plain_take(free[t], k, {cluster.node_of[g] for g in chosen[jid]}))
    return {jid: tuple(sorted(g)) for jid, g in chosen.items()}


def _plain_take(nodes, k, mine):
    got = []
    for n in mine:
        while k > len(got) and nodes.get(n):
            got.append(nodes[n].pop(0))
    while len(got) < k:
        want = k - len(got)
        best_n, best_free = -1, 0
        for n, gs in nodes.items():
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
            raise ValueError("not enough")
        gs = nodes[best_n]
        while gs and len(got) < k:
            got.append(gs.pop(0))
        if not gs:
            del nodes[best_n]
    return got


def _case(seed: int):
    rng = random.Random(seed)
    types = ["a", "b", "c"][:rng.randint(1, 3)]
    nodes = tuple(Node(f"n{i}", rng.choice(types), rng.choice([1, 2, 4, 8])) for i in range(rng.randint(1, 12)))
    cluster = Cluster(nodes)
    if rng.random() < 0.3:
        cluster = cluster.with_down({rng.choice(nodes).name})
    busy = set(rng.sample(range(cluster.num_gpus), rng.randint(0, cluster.num_gpus // 3))) if rng.random() < 0.4 else ()
    free = {t: len([g for g in cluster.gpus_by_type[t] if g not in busy]) for t in cluster.gpu_types}
    counts, previous = {}, {}
    for jid in rng.sample(range(100), rng.randint(1, 12)):
        want = {t: k for t in cluster.gpu_types if (k := rng.randint(0, min(free[t], 4))) > 0 and rng.random() < 0.6}
        if not want:
            continue
        for t, k in want.items():
            free[t] -= k
        counts[jid] = want
        if rng.random() < 0.7:  # last round's GPUs: any ids, some shared with another job, some on down nodes
            previous[jid] = tuple(sorted(rng.sample(range(cluster.num_gpus), rng.randint(1, min(8, cluster.num_gpus)))))
    return cluster, counts, previous, busy


@pytest.mark.parametrize("seed", range(300))
def test_assign_gpus_picks_the_plain_versions_ids(seed: int) -> None:
    cluster, counts, previous, busy = _case(seed)
    assert assign_gpus(cluster, counts, previous, busy) == _plain(cluster, counts, previous, busy)
    assert assign_gpus(cluster, counts, previous, busy) == _plain(cluster, counts, previous, busy)  # cached again


def _disjoint_case(seed: int):
    """A case as HadarE sees one: no job shares last round's GPUs with another."""
    cluster, counts, previous, _ = _case(seed)
    rng, seen = random.Random(-seed), set()
    for jid in list(previous):
        mine = tuple(g for g in previous[jid] if g not in seen)
        seen.update(mine)
        if mine and rng.random() < 0.9:
            previous[jid] = mine
        else:
            del previous[jid]
    return cluster, counts, previous


@pytest.mark.parametrize("seed", range(300))
def test_node_layout_is_assign_gpus_on_counts(seed: int) -> None:
    cluster, counts, previous = _disjoint_case(seed)
    layout = node_layout(cluster, counts, previous)
    want = {}
    for jid, gpus in assign_gpus(cluster, counts, previous).items():
        want[jid] = {}
        for g in gpus:
            want[jid][cluster.node_of[g]] = want[jid].get(cluster.node_of[g], 0) + 1
    assert layout == want


def test_node_layout_keeps_last_rounds_nodes_on_the_room_busy_leaves() -> None:
    cluster = Cluster(tuple(Node(f"n{i}", "a", 4) for i in range(3)))
    # job 1 held 2 GPUs of node 0 and job 2 held 2 of node 1; 3 GPUs of node 0 and all of node 2 are busy
    got = node_layout(cluster, {1: {"a": 2}, 2: {"a": 3}}, {1: (0, 1), 2: (4, 5)}, busy={0: 3, 2: 4})
    assert got == {1: {0: 1, 1: 1}, 2: {1: 3}}  # job 1 keeps one on node 0 (the room left), job 2 its two and one
    with pytest.raises(ValueError, match="not enough free a GPUs"):
        node_layout(cluster, {1: {"a": 6}}, {}, busy={0: 4, 2: 4})
