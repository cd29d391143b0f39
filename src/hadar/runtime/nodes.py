"""Watching the Ray cluster's nodes: the ones that die and the ones that join.

``NodeWatcher.poll()`` reads Ray's node table (at most once per
``min_interval_s``) and returns the cluster as it is now, or None when
nothing changed; ``RayExecutor.cluster_view()`` hands that to the engine at
each round boundary, so a node Ray declares dead leaves the scheduling view
before the next round (its jobs resume elsewhere from their checkpoints) and
a node that joins is appended (every existing GPU id keeps its meaning).

How a logical node is found on Ray: by its ``hadar_node:<name>`` resource
(emulated nodes, nodes of a cluster file) or, for nodes found by their GPUs,
by the Ray node id it is pinned to. A node that comes back gets fresh worker
actors; a node that joins gets its workers started by the pool.

How fast a death is seen is Ray's business: the GCS declares a node dead
after its health checks fail (``RAY_health_check_period_ms`` x
``RAY_health_check_failure_threshold``, about 15 s by default).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hadar.errors import InputError
from hadar.model.cluster import Cluster
from hadar.runtime.emulation import NODE_RESOURCE
from hadar.runtime.pool import NodePin, WorkerPool, moved

log = logging.getLogger(__name__)
NodeRecords = Sequence[Mapping[str, Any]]


def _ray_nodes() -> NodeRecords:
    import ray

    return ray.nodes()


class NodeWatcher:
    """Follows node deaths (and, with ``joins``, new nodes) for one ``WorkerPool`` (``list_nodes``:
    ``ray.nodes`` by default). A local emulated cluster takes no joins: the Ray instance it runs on may
    hold other logical nodes (a test session's), which are not the run's."""

    def __init__(self, pool: WorkerPool, *, joins: bool = True, min_interval_s: float = 1.0,
                 list_nodes: Callable[[], NodeRecords] = _ray_nodes) -> None:
        self.pool, self.joins = pool, joins
        self.min_interval_s = min_interval_s
        self.list_nodes = list_nodes
        self._last = float("-inf")
        self._unusable: set[str] = set()  # Ray nodes we could not read as hadar nodes (warned once)
        self._pending_pins: dict[str, NodePin] = {}  # pins of the view being built (new or moved nodes)

    def poll(self) -> Cluster | None:
        """The cluster with dead nodes down and new nodes appended; None if unchanged (or polled too soon)."""
        now = time.monotonic()
        if now - self._last < self.min_interval_s:
            return None
        self._last = now
        try:
            records = [r for r in self.list_nodes() if r.get("Alive")]
        except Exception as e:  # the GCS may be briefly unreachable: keep the current view
            log.warning("could not read Ray's node table: %s", e)
            return None
        view = self._view(records)
        if view == self.cluster:
            return None
        self._apply(view)
        return view

    def _view(self, alive: NodeRecords) -> Cluster:
        names: set[str] = set()
        ids: set[str] = set()
        for rec in alive:
            ids.add(str(rec.get("NodeID", "")))
            names.update(k[len(NODE_RESOURCE):] for k in rec.get("Resources", {}) if k.startswith(NODE_RESOURCE))
        cluster = self.cluster
        pins = dict(self.pool.pins)
        for rec in alive if self.joins else ():
            for node, pin in self._new_nodes(rec, cluster, pins, names):
                pins[node.name] = pin
                if node.name in {n.name for n in cluster.nodes}:
                    continue  # the same node back under a new Ray id (pinned by id)
                cluster = cluster.with_node(node)
                names.add(node.name)
        self._pending_pins = pins
        down = {n.name for n in cluster.nodes if not self._alive(n.name, pins.get(n.name), names, ids)}
        return cluster.with_down(down)

    @staticmethod
    def _alive(name: str, pin: NodePin | None, names: set[str], ids: set[str]) -> bool:
        if pin is not None and pin.node_id:
            return pin.node_id in ids
        return name in names

    def _new_nodes(self, rec: Mapping[str, Any], cluster: Cluster, pins: dict[str, NodePin],
                   names: set[str]) -> list[tuple[Any, NodePin]]:
        """Hadar nodes on a live Ray node that the view does not have yet (or that came back by id)."""
        from hadar.runtime.session import detect_cluster

        res = rec.get("Resources", {})
        node_id = str(rec.get("NodeID", ""))
        own = [k[len(NODE_RESOURCE):] for k in res if k.startswith(NODE_RESOURCE)]
        known = {n.name for n in cluster.nodes}
        if own and all(name in known for name in own):
            return []
        if not own and (not res.get("GPU") or any(p.node_id == node_id for p in pins.values())):
            return []
        if node_id in self._unusable:
            return []
        try:
            found, found_pins = detect_cluster([rec])
        except InputError as e:
            self._unusable.add(node_id)
            log.warning("a Ray node joined that hadar cannot use: %s", e)
            return []
        return [(n, found_pins[n.name]) for n in found.nodes if n.name not in known or not own]

    @property
    def cluster(self) -> Cluster:
        """The cluster as the pool follows it (the last view applied)."""
        return self.pool.cluster

    def _apply(self, view: Cluster) -> None:
        """Start workers on joined nodes; fresh workers on nodes that came back (the pool's ``follow``)."""
        old = self.cluster
        joined, back = moved(old, view)
        if joined:
            log.warning("node(s) joined: %s", ", ".join(view.nodes[n].name for n in joined))
        for n in back:
            log.warning("node %s is back: starting fresh workers on it", old.nodes[n].name)
        gone = sorted(view.down - old.down)
        if gone:
            log.warning("node(s) down: %s; their jobs resume elsewhere from their checkpoints", ", ".join(gone))
        self.pool.follow(view, {n.name: self._pending_pins[n.name] for n in view.nodes if n.name in self._pending_pins})
