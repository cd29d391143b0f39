"""Cluster topology: nodes, each with GPUs of one type.

GPU ids are dense integers 0..G-1, assigned node by node in the order the
nodes are listed; ``gpu_types`` keeps the first-seen order of types, except
that Gavel's ``v100, p100, k80`` come first in that order when present (the
order Gavel's round mechanism walks types in). A cluster may be given an
explicit ``order`` instead (``in_order``): runs outside ``--gavel-compat``
order types by speed (``ThroughputTable.speed_order``), so that no decision
depends on what the types are called.

Nodes can be ``down`` (a real cluster loses and regains machines): a down
node keeps its GPU ids (so every id stays valid), but the scheduling view
(``gpus_by_type``, ``count``, ``capacity``, ``nodes_of_type``, ``up_nodes``,
``up_gpus``) leaves it out, so no policy or planner gives it work.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hadar.errors import InputError

GAVEL_TYPE_ORDER = ("v100", "p100", "k80")


@dataclass(frozen=True, slots=True)
class Node:
    """One machine: ``gpus`` GPUs of one ``gpu_type``."""

    name: str
    gpu_type: str
    gpus: int

    def __post_init__(self) -> None:
        if not self.name:
            raise InputError("node name must not be empty")
        if not self.gpu_type:
            raise InputError(f"node {self.name!r}: gpu_type must not be empty")
        if not isinstance(self.gpus, int) or isinstance(self.gpus, bool) or self.gpus <= 0:
            raise InputError(f"node {self.name!r}: gpus must be a positive integer, got {self.gpus!r}")


@dataclass(frozen=True, slots=True)
class Cluster:
    """An immutable set of nodes with derived per-GPU lookups."""

    nodes: tuple[Node, ...]
    down: frozenset[str] = frozenset()  # names of nodes that are down
    order: tuple[str, ...] = ()  # explicit type order (others follow, first seen first); () = Gavel's
    gpu_types: tuple[str, ...] = field(init=False)
    gpu_type_of: tuple[str, ...] = field(init=False)  # indexed by GPU id
    node_of: tuple[int, ...] = field(init=False)  # GPU id -> node index
    gpus_by_type: dict[str, tuple[int, ...]] = field(init=False)  # GPUs of up nodes only
    up_nodes: tuple[int, ...] = field(init=False)  # indices of the nodes that are up
    up_gpus: tuple[int, ...] = field(init=False)  # GPU ids on nodes that are up
    node_gpus: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)  # node index -> GPU ids

    def __post_init__(self) -> None:
        if not self.nodes:
            raise InputError("cluster has no nodes")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise InputError(f"duplicate node names: {', '.join(dup)}")
        unknown = sorted(set(self.down) - set(names))
        if unknown:
            raise InputError(f"unknown node(s) marked down: {', '.join(unknown)}")
        object.__setattr__(self, "down", frozenset(self.down))
        seen: list[str] = []
        type_of: list[str] = []
        node_of: list[int] = []
        by_type: dict[str, list[int]] = {}
        for idx, node in enumerate(self.nodes):
            if node.gpu_type not in seen:
                seen.append(node.gpu_type)
            by_type.setdefault(node.gpu_type, [])
            for _ in range(node.gpus):
                gid = len(type_of)
                type_of.append(node.gpu_type)
                node_of.append(idx)
                if node.name not in self.down:
                    by_type[node.gpu_type].append(gid)
        first = tuple(dict.fromkeys(self.order)) if self.order else GAVEL_TYPE_ORDER
        object.__setattr__(self, "order", tuple(self.order))
        ordered = [t for t in first if t in seen] + [t for t in seen if t not in first]
        object.__setattr__(self, "gpu_types", tuple(ordered))
        object.__setattr__(self, "gpu_type_of", tuple(type_of))
        object.__setattr__(self, "node_of", tuple(node_of))
        object.__setattr__(self, "gpus_by_type", {t: tuple(v) for t, v in by_type.items()})
        up = tuple(i for i, n in enumerate(self.nodes) if n.name not in self.down)
        object.__setattr__(self, "up_nodes", up)
        up_set = set(up)
        object.__setattr__(self, "up_gpus", tuple(g for g, n in enumerate(node_of) if n in up_set))
        per_node: list[list[int]] = [[] for _ in self.nodes]
        for g, n in enumerate(node_of):
            per_node[n].append(g)
        object.__setattr__(self, "node_gpus", tuple(tuple(v) for v in per_node))

    @property
    def listed_types(self) -> tuple[str, ...]:
        """The types in the order their first node is listed (no name decides it)."""
        return tuple(dict.fromkeys(n.gpu_type for n in self.nodes))

    def in_order(self, types: tuple[str, ...]) -> Cluster:
        """The same nodes with ``gpu_types`` in ``types``'s order (types it leaves out follow, first seen
        first); GPU ids and everything else unchanged."""
        return Cluster(self.nodes, self.down, tuple(types))

    @property
    def num_gpus(self) -> int:
        return len(self.gpu_type_of)

    def count(self, gpu_type: str) -> int:
        """Number of GPUs of ``gpu_type`` on nodes that are up (0 if the type is absent)."""
        return len(self.gpus_by_type.get(gpu_type, ()))

    def capacity(self) -> dict[str, int]:
        """GPU count per type, in ``gpu_types`` order."""
        return {t: self.count(t) for t in self.gpu_types}

    def nodes_of_type(self, gpu_type: str) -> tuple[int, ...]:
        """Indices of the up nodes of ``gpu_type``."""
        return tuple(i for i in self.up_nodes if self.nodes[i].gpu_type == gpu_type)

    def gpus_of_node(self, node_index: int) -> tuple[int, ...]:
        """Every GPU id of a node (up or down); precomputed, as planners ask for every node each round."""
        return self.node_gpus[node_index]

    def with_down(self, names: frozenset[str] | set[str]) -> Cluster:
        """The same nodes with exactly ``names`` down (GPU ids unchanged)."""
        return Cluster(self.nodes, frozenset(names), self.order)

    def with_node(self, node: Node) -> Cluster:
        """A node that joins: appended, so every existing GPU id keeps its meaning."""
        return Cluster((*self.nodes, node), self.down, self.order)

    @classmethod
    def from_counts(cls, counts: dict[str, int], gpus_per_node: int = 1) -> Cluster:
        """Nodes of ``gpus_per_node`` GPUs (the last node of a type may be smaller)."""
        nodes: list[Node] = []
        for gpu_type, count in counts.items():
            if count < 0:
                raise InputError(f"GPU count for {gpu_type!r} must not be negative, got {count}")
            left, i = count, 0
            while left > 0:
                take = min(gpus_per_node, left)
                nodes.append(Node(f"{gpu_type}-{i}", gpu_type, take))
                left -= take
                i += 1
        if not nodes:
            raise InputError("cluster has no GPUs")
        return cls(tuple(nodes))
