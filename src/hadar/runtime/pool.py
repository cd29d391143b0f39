"""One worker actor per GPU, pinned to its node through Ray resources.

Emulated clusters pin an actor with one unit of the custom resource
``hadar_node:<node>`` (the node's GPU count); real nodes found on a Ray
cluster are pinned by node id with ``num_gpus=1``. A dead actor is
replaced by a fresh one on the same node (``replace``); its in-memory
state is gone, so the executor restores the job from its checkpoint.

Space sharing: a GPU running a pair of jobs runs the second job in a second
actor of that GPU (slot 1, started the first time a pair needs it): its own
process, pinned to the node of the GPU's slot-0 actor by node id and, on a
real GPU, using the same CUDA device (slot 0's ``CUDA_VISIBLE_DEVICES``), as a
real cluster runs two co-located jobs (two processes sharing one GPU). Slot 1
takes no Ray resources: slot 0 holds the GPU for both.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Any

from hadar.errors import HadarError, InputError
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


#: How long worker actors may take to start (s) unless the pool is told otherwise: the environment's
#: ``HADAR_WORKER_START_S`` (a loaded machine or a slow cluster may need more), else 120.
WORKER_START_ENV = "HADAR_WORKER_START_S"


def worker_start_s() -> float:
    """The start limit ``WORKER_START_ENV`` sets (a positive number of seconds), else 120."""
    raw = os.environ.get(WORKER_START_ENV, "")
    try:
        value = float(raw) if raw else 120.0
    except ValueError:
        raise InputError(f"{WORKER_START_ENV} must be a number of seconds, got {raw!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"{WORKER_START_ENV} must be a positive number of seconds, got {raw!r}")
    return value


class WorkerPool:
    """Creates and tracks the actor of every GPU id of ``cluster``."""

    def __init__(self, cluster: Cluster, pins: dict[str, NodePin] | None = None, *,
                 ready_timeout_s: float | None = None) -> None:
        self.cluster = cluster
        self.pins = pins or {n.name: NodePin(resource=NODE_RESOURCE + n.name) for n in cluster.nodes}
        self.ready_timeout_s = ready_timeout_s if ready_timeout_s is not None else worker_start_s()
        self.actors: list[Any] = [None] * cluster.num_gpus
        self.generation = [0] * cluster.num_gpus  # bumps on every replacement
        self.replaced = 0
        self.partners: dict[int, Any] = {}  # GPU -> its slot-1 actor (space sharing), started when first needed
        self.partner_generation: dict[int, int] = {}
        self._info: dict[int, Any] = {}  # GPU -> its slot-0 actor's info() (asked at spawn, before any lease)

    def start(self, partners: bool = False) -> None:
        """Start every GPU's worker and wait until all are up; ``partners``: every GPU's second worker too
        (space sharing), so that no pair waits for one during the run."""

        self.actors = [self._spawn(g) for g in range(self.cluster.num_gpus)]
        self._ready([self._info[g] for g in range(self.cluster.num_gpus)])
        if partners:
            self.start_partners()
            self._ready([a.info.remote() for a in self.partners.values()])

    def _ready(self, refs: list[Any]) -> None:
        import ray

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
        actor = ray.remote(Worker).options(**opts).remote(gpu, node.name, node.gpu_type)
        self._info[gpu] = actor.info.remote()  # first in its queue: answered as soon as the actor is up
        return actor

    def actor(self, gpu: int, slot: int = 0) -> Any:
        """The actor of ``gpu``'s slot 0 (the GPU's own worker) or slot 1 (the second job of a pair)."""
        if slot == 0:
            return self.actors[gpu]
        if gpu not in self.partners:
            self.partners[gpu] = self._spawn_partner(gpu)
            self.partner_generation[gpu] = self.partner_generation.get(gpu, -1) + 1
        return self.partners[gpu]

    def start_partners(self) -> None:
        """Start the second worker of every GPU of a live node that has none (not waiting for them): the
        first pair of a run calls this, so that later pairs on other GPUs find their worker up."""
        import ray

        for g in range(self.cluster.num_gpus):
            if self.cluster.nodes[self.cluster.node_of[g]].name not in self.cluster.down:
                try:
                    self.actor(g, 1)
                except (ray.exceptions.RayError, ValueError) as e:  # its first worker died: a pair there fails
                    log.warning("could not start the second worker of GPU %d: %s", g, e)  # its lease, as usual

    def gen(self, gpu: int, slot: int = 0) -> int:
        """How many times the actor of ``gpu``'s slot was replaced (a fresh actor has a new generation)."""
        return self.generation[gpu] if slot == 0 else self.partner_generation.get(gpu, 0)

    def _spawn_partner(self, gpu: int) -> Any:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from hadar.runtime.worker import Worker

        rec = ray.get(self._info[gpu], timeout=self.ready_timeout_s)
        node = self.cluster.nodes[self.cluster.node_of[gpu]]
        opts: dict[str, Any] = {"num_cpus": 0, "max_restarts": 0, "max_concurrency": 1,
                                "scheduling_strategy": NodeAffinitySchedulingStrategy(rec["node_id"], soft=False)}
        return ray.remote(Worker).options(**opts).remote(gpu, node.name, node.gpu_type, visible=rec["visible"])

    def replace(self, gpu: int, slot: int = 0) -> None:
        """Kill (if still alive) and respawn the actor of ``gpu``'s slot. Replacing slot 0 also ends slot 1
        (it shares the GPU and the node; it is started again when a pair needs it)."""
        if slot == 1:
            old = self.partners.pop(gpu, None)
            if old is not None:
                _kill(old)
            self.replaced += 1
            log.warning("replaced the second worker of GPU %d (%s)", gpu, self.cluster.gpu_type_of[gpu])
            return
        old = self.actors[gpu]
        if old is not None:
            _kill(old)
        if gpu in self.partners:
            _kill(self.partners.pop(gpu))
        self.actors[gpu] = self._spawn(gpu)
        self.generation[gpu] += 1
        self.replaced += 1
        log.warning("replaced the worker of GPU %d (%s)", gpu, self.cluster.gpu_type_of[gpu])

    def follow(self, cluster: Cluster, pins: dict[str, NodePin]) -> None:
        """The cluster as it is now: workers on the nodes that joined (``cluster`` appends them, existing GPU
        ids unchanged; ``pins``: where the new or re-found nodes' workers go) and fresh workers on the nodes
        that came back up."""
        old = self.cluster
        joined, back = moved(old, cluster)
        self.pins.update(pins)
        self.cluster = cluster
        for n in joined:  # appended nodes: their GPU ids follow the existing ones, in order
            for g in cluster.gpus_of_node(n):
                self.actors.append(self._spawn(g))
                self.generation.append(0)
        for n in back:
            for g in old.gpus_of_node(n):
                self.replace(g)

    def kill(self, gpu: int, slot: int = 0) -> None:
        """Testing aid: kill the actor of ``gpu``'s slot now (the executor notices and replaces it)."""
        import ray

        ray.kill(self.actors[gpu] if slot == 0 else self.partners[gpu], no_restart=True)

    def shutdown(self) -> None:

        for a in [*self.actors, *self.partners.values()]:
            if a is not None:
                _kill(a)
        self.actors = [None] * self.cluster.num_gpus
        self.partners = {}


def _kill(actor: Any) -> None:
    import ray

    try:
        ray.kill(actor, no_restart=True)
    except (ValueError, ray.exceptions.RayError) as e:  # already gone
        log.debug("kill: %s", e)


def moved(old: Cluster, new: Cluster) -> tuple[range, list[int]]:
    """From ``old`` to ``new`` (which appends the nodes that joined): the indices of the nodes that joined,
    and those of the nodes that came back up."""
    back = [i for i, n in enumerate(old.nodes) if n.name in old.down and n.name not in new.down]
    return range(len(old.nodes), len(new.nodes)), back
