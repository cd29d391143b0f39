"""The cluster as Slurm sees it: nodes, GPU types and counts from ``sinfo --json``.

A node's GPUs are its typed GRES (``gpu:v100:4``, optionally ``(S:0-1)``); a node with GPUs of no
type, or of two types, cannot be scheduled by type and is an error. Nodes without GPUs are left out.
A node DOWN, DRAINED/DRAINING, FAIL or not responding is down in the returned ``Cluster`` (it keeps its
GPU ids); one that comes back is up again. Nodes are ordered by name, so GPU ids are stable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hadar.model.cluster import Cluster, Node
from hadar.slurm.commands import SlurmError

_GRES = re.compile(r"^gpu(?::(?P<type>[^:(]+))?:(?P<count>\d+)(?:\(.*\))?$")
_DOWN_STATES = frozenset({"down", "drained", "draining", "fail", "failing", "future", "unknown", "error"})
_DOWN_FLAGS = frozenset({"DRAIN", "DRAINED", "DRAINING", "NOT_RESPONDING", "FAIL", "MAINTENANCE", "REBOOT_REQUESTED",
                         "POWERED_DOWN", "POWERING_DOWN"})


@dataclass(frozen=True, slots=True)
class SlurmNode:
    name: str
    gpu_type: str
    gpus: int
    up: bool
    state: str
    partitions: tuple[str, ...] = ()


def gpus_of(name: str, gres: str) -> tuple[str, int] | None:
    """(type, count) of a node's ``gres`` string; None without GPUs; ``SlurmError`` for untyped or mixed GPUs."""
    found: dict[str, int] = {}
    for item in (g.strip() for g in gres.split(",")):
        if not item.startswith("gpu"):
            continue
        m = _GRES.match(item)
        if m is None:
            raise SlurmError(f"node {name}: cannot read its GPUs from gres {gres!r}")
        if not m["type"]:
            raise SlurmError(f"node {name}: its GPUs have no type (gres {gres!r}); hadar schedules by GPU type: "
                             "declare them as gpu:TYPE:N in slurm.conf and gres.conf")
        found[m["type"]] = found.get(m["type"], 0) + int(m["count"])
    if len(found) > 1:
        raise SlurmError(f"node {name}: GPUs of several types ({', '.join(sorted(found))}); hadar needs one type "
                         "per node")
    if not found:
        return None
    ((t, n),) = found.items()
    return (t, n) if n > 0 else None


def is_up(rec: Mapping[str, Any]) -> bool:
    state = str(rec.get("state", "")).lower()
    flags = {str(f).upper() for f in rec.get("state_flags") or []}
    return state not in _DOWN_STATES and not (flags & _DOWN_FLAGS)


def read_nodes(records: Sequence[Mapping[str, Any]], partition: str | None) -> list[SlurmNode]:
    """The GPU nodes of ``partition`` (every partition: None), by name; ``SlurmError`` if it is unknown or empty."""
    seen_partitions: set[str] = set()
    out: dict[str, SlurmNode] = {}
    for rec in records:
        parts = [str(p) for p in rec.get("partitions") or []]
        seen_partitions.update(parts)
        if partition is not None and partition not in parts:
            continue
        name = str(rec["name"])
        gpus = gpus_of(name, str(rec.get("gres", "") or ""))
        if gpus is None or name in out:
            continue
        out[name] = SlurmNode(name, gpus[0], gpus[1], is_up(rec), str(rec.get("state", "")), tuple(parts))
    if partition is not None and partition not in seen_partitions:
        raise SlurmError(f"unknown partition {partition!r} (Slurm has {', '.join(sorted(seen_partitions)) or 'none'})")
    if not out:
        where = f"partition {partition!r}" if partition is not None else "the cluster"
        raise SlurmError(f"{where} has no node with typed GPUs (gres gpu:TYPE:N)")
    return [out[n] for n in sorted(out)]


def to_cluster(nodes: Sequence[SlurmNode]) -> Cluster:
    """hadar's ``Cluster`` of ``nodes`` (those not up are down)."""
    cluster = Cluster(tuple(Node(n.name, n.gpu_type, n.gpus) for n in nodes))
    down = frozenset(n.name for n in nodes if not n.up)
    return cluster.with_down(down) if down else cluster
