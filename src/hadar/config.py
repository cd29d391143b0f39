"""Parsing user-facing specs: clusters (``8:16:24``, ``v100=8,k80=4`` or a YAML/JSON file)."""

from __future__ import annotations

import re
from pathlib import Path

from hadar.errors import InputError
from hadar.files import read_yaml
from hadar.model.cluster import GAVEL_TYPE_ORDER, Cluster, Node

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")


def parse_cluster(spec: str, gpus_per_node: int = 1) -> Cluster:
    """``8:16:24`` (V100:P100:K80, Gavel's order), ``v100=8,p100=16`` or a file of nodes.

    The shorthands make nodes of ``gpus_per_node`` GPUs (Gavel: 1).
    """
    if gpus_per_node <= 0:
        raise InputError(f"--gpus-per-node must be positive, got {gpus_per_node}")
    spec = spec.strip()
    path = Path(spec)
    if path.suffix.lower() in (".yaml", ".yml", ".json") or path.is_file():
        return read_cluster_file(path)
    if ":" in spec and "=" not in spec:
        parts = spec.split(":")
        if len(parts) != 3:
            raise InputError(f"cluster spec {spec!r}: want V100:P100:K80 counts like 8:16:24")
        counts = {t: _count(p, t, spec) for t, p in zip(GAVEL_TYPE_ORDER, parts, strict=True)}
    elif "=" in spec:
        counts = {}
        for item in spec.split(","):
            if "=" not in item:
                raise InputError(f"cluster spec {spec!r}: item {item!r} is not TYPE=COUNT")
            name, value = (s.strip() for s in item.split("=", 1))
            if not _NAME_RE.match(name):
                raise InputError(f"cluster spec {spec!r}: bad GPU type name {name!r}")
            if name in counts:
                raise InputError(f"cluster spec {spec!r}: GPU type {name!r} given twice")
            counts[name] = _count(value, name, spec)
    else:
        raise InputError(f"cluster spec {spec!r}: not a file and not like 8:16:24 or v100=8,k80=4")
    counts = {t: c for t, c in counts.items() if c > 0}
    if not counts:
        raise InputError(f"cluster spec {spec!r} has no GPUs")
    return Cluster.from_counts(counts, gpus_per_node)


def _count(text: str, gpu_type: str, spec: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"cluster spec {spec!r}: count for {gpu_type} must be an integer, got {text!r}") from None
    if value < 0:
        raise InputError(f"cluster spec {spec!r}: count for {gpu_type} must not be negative, got {value}")
    return value


def read_cluster_file(path: Path) -> Cluster:
    """``nodes: [{name: a, gpu_type: v100, gpus: 4}, {name: b, gpu_type: k80, gpus: 1, count: 3}]``.

    ``count`` repeats a node (names get ``-0``, ``-1``, ... suffixes). An optional ``prices: {v100: 2.48}``
    gives $ per GPU-hour of some types (the cost-aware policies; the others default to Gavel's).
    """
    data = read_yaml(path, "cluster file")
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not data["nodes"]:
        raise InputError(f"{path}: expected a mapping with a non-empty 'nodes' list")
    prices = data.get("prices") or {}
    if not isinstance(prices, dict):
        raise InputError(f"{path}: prices must be a mapping of GPU type to $ per GPU-hour")
    nodes: list[Node] = []
    for i, rec in enumerate(data["nodes"]):
        where = f"{path.name}: node {i}"
        if not isinstance(rec, dict):
            raise InputError(f"{where}: must be a mapping with gpu_type and gpus")
        unknown = set(rec) - {"name", "gpu_type", "gpus", "count"}
        if unknown:
            raise InputError(f"{where}: unknown field(s): {', '.join(sorted(unknown))}")
        gpu_type = str(rec.get("gpu_type", "")).strip()
        if not _NAME_RE.match(gpu_type):
            raise InputError(f"{where}: gpu_type missing or invalid ({gpu_type!r})")
        gpus, count = rec.get("gpus", 1), rec.get("count", 1)
        for key, value in (("gpus", gpus), ("count", count)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InputError(f"{where}: {key} must be a positive integer, got {value!r}")
        base = str(rec.get("name", f"{gpu_type}-node{i}"))
        for k in range(count):
            nodes.append(Node(base if count == 1 else f"{base}-{k}", gpu_type, gpus))
    try:
        return Cluster(tuple(nodes), prices=tuple((str(t), p) for t, p in prices.items()))
    except InputError as e:
        raise InputError(f"{path.name}: {e}") from None
