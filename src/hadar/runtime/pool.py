"""One worker actor per GPU, pinned to its node through Ray resources.

Emulated clusters pin an actor with one unit of the custom resource
``hadar_node:<node>`` (the node's GPU count); real nodes found on a Ray
cluster are pinned by node id with ``num_gpus=1``. A dead actor is
replaced by a fresh one on the same node (``replace``); its in-memory
state is gone, so the executor restores the job from its checkpoint.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from hadar.errors import HadarError
from hadar.model.cluster import Cluster
from hadar.runtime.emulation import NODE_RESOURCE

log = logging.getLogger(__name__)


class RuntimeFailure(HadarError):
    """The Ray cluster could not start or keep the workers the run needs."""


@dataclass(frozen=True, slots=True)
class NodePin:
    """How to place actors on one logical node: a custom resource, or a Ray node id (+ real GPUs)."""

    resource: str | None = None
    node_id: str | None = None
    num_gpus: float = 0.0


class WorkerPool:
    """Creates and tracks the actor of every GPU id of ``cluster``."""

    def __init__(self, cluster: Cluster, pins: dict[str, NodePin] | None = None, *,
                 ready_timeout_s: float = 120.0) -> None:
        self.cluster = cluster
        self.pins = pins or {n.name: NodePin(resource=NODE_RESOURCE + n.name) for n in cluster.nodes}
        self.ready_timeout_s = ready_timeout_s
        self.actors: list[Any] = [None] * cluster.num_gpus
        self.generation = [0] * cluster.num_gpus  # bumps on every replacement
        self.replaced = 0

    def start(self) -> None:
        import ray

        self.actors = [self._spawn(g) for g in range(self.cluster.num_gpus)]
        refs = [a.info.remote() for a in self.actors]
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=self.ready_timeout_s)
        if pending:
            raise RuntimeFailure(f"{len(pending)} of {len(refs)} worker actors did not start within "
                                 f"{self.ready_timeout_s:.0f} s: does the Ray cluster have the nodes and "
                                 "resources the cluster file names?")
        ray.get(ready)

    def _spawn(self, gpu: int) -> Any:
        import ray

        from hadar.runtime.worker import Worker

        node = self.cluster.nodes[self.cluster.node_of[gpu]]
        pin = self.pins[node.name]
        opts: dict[str, Any] = {"num_cpus": 0, "max_restarts": 0, "max_concurrency": 1}
        if pin.resource:
            opts["resources"] = {pin.resource: 1}
        if pin.node_id:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(pin.node_id, soft=False)
        if pin.num_gpus:
            opts["num_gpus"] = pin.num_gpus
        return ray.remote(Worker).options(**opts).remote(gpu, node.name, node.gpu_type)

    def actor(self, gpu: int) -> Any:
        return self.actors[gpu]

    def replace(self, gpu: int) -> None:
        """Kill (if still alive) and respawn the actor of ``gpu``."""

        old = self.actors[gpu]
        if old is not None:
            _kill(old)
        self.actors[gpu] = self._spawn(gpu)
        self.generation[gpu] += 1
        self.replaced += 1
        log.warning("replaced the worker of GPU %d (%s)", gpu, self.cluster.gpu_type_of[gpu])

    def grow(self, cluster: Cluster, pins: dict[str, NodePin]) -> None:
        """Nodes joined: ``cluster`` appends them (existing GPU ids unchanged); start their workers."""
        self.pins.update(pins)
        first, self.cluster = self.cluster.num_gpus, cluster
        for g in range(first, cluster.num_gpus):
            self.actors.append(self._spawn(g))
            self.generation.append(0)

    def kill(self, gpu: int) -> None:
        """Testing aid: kill the actor of ``gpu`` now (the executor notices and replaces it)."""
        import ray

        ray.kill(self.actors[gpu], no_restart=True)

    def shutdown(self) -> None:

        for a in self.actors:
            if a is not None:
                _kill(a)
        self.actors = [None] * self.cluster.num_gpus


def _kill(actor: Any) -> None:
    import ray

    try:
        ray.kill(actor, no_restart=True)
    except (ValueError, ray.exceptions.RayError) as e:  # already gone
        log.debug("kill: %s", e)
