"""Emulating a heterogeneous GPU cluster on one CPU machine.

What it is: every GPU of the cluster file becomes one Ray worker actor
(a process running real PyTorch training on the CPU, one thread), pinned
to a *logical node* through a Ray custom resource ``hadar_node:<name>``;
the logical nodes all live on this machine. A GPU type is a speed factor
``f = X[m, k, type] / max_t X[m, k, t]`` (<= 1) taken from Gavel's
throughput table row of the Gavel model ``m`` the workload mirrors: after
each real training step the worker waits so that the step lasts
``real_step_time / f``. So a K80 runs a ResNet step ~5x slower than a V100
and a recommendation step faster, in the same proportions as Gavel measured.

What it is not: not a GPU simulator (memory limits, kernels, NVLink and
network are not modelled); the real CPU step time itself varies with how
many workers share the cores, and that contention is measured, not hidden:
the runtime feeds the observed steps/s back into the scheduler's table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hadar.model.cluster import Cluster
from hadar.model.throughput import ThroughputTable
from hadar.runtime import workloads

NODE_RESOURCE = "hadar_node:"  # + node name; amount = GPUs of the node
TYPE_RESOURCE = "hadar_gpu:"  # + GPU type; amount = GPUs of that type


def local_resources(cluster: Cluster) -> dict[str, float]:
    """Ray custom resources that describe ``cluster``'s logical nodes and GPU types."""
    res: dict[str, float] = {}
    for node in cluster.nodes:
        res[NODE_RESOURCE + node.name] = res.get(NODE_RESOURCE + node.name, 0.0) + node.gpus
        res[TYPE_RESOURCE + node.gpu_type] = res.get(TYPE_RESOURCE + node.gpu_type, 0.0) + node.gpus
    return res


def dilation(num_gpus: int, cpus: int) -> float:
    """Time dilation of an emulated cluster: every step is stretched this much more (>= 1).

    With more emulated GPUs than cores, the workers would compete for the
    cores and their speeds would depend on how many run at once; stretching
    every step by ``GPUs / cores`` keeps the total CPU demand within the
    cores, so a type's emulated speed stays close to ``native x f / dilation``.
    """
    return max(1.0, num_gpus / max(1, cpus))


def _mirror_row(gavel: ThroughputTable, mirrors: str, k: int) -> Mapping[str, float] | None:
    if gavel.has(mirrors, k):
        return gavel.rates[(mirrors, k)]
    if gavel.has(mirrors, 1):
        return gavel.rates[(mirrors, 1)]
    return None


def speed_factor(gavel: ThroughputTable, job_type: str, k: int, gpu_type: str, types: Iterable[str]) -> float:
    """Relative speed in (0, 1] of ``gpu_type`` among ``types`` for ``job_type`` on ``k`` GPUs.

    1.0 for the fastest type (and for types Gavel's table does not know).
    """
    row = _mirror_row(gavel, workloads.get(job_type).mirrors, k)
    if row is None or gpu_type not in row:
        return 1.0
    best = max((row.get(t, 0.0) for t in types), default=0.0)
    return row[gpu_type] / best if best > 0 else 1.0


def speed_factors(gavel: ThroughputTable, job_types: Iterable[str], cluster: Cluster,
                  scale_factors: Iterable[int] = (1, 2, 4, 8)) -> dict[tuple[str, int, str], float]:
    """``(job_type, k, gpu_type) -> factor`` for every combination the run may need."""
    ks = tuple(scale_factors)
    return {(jt, k, t): speed_factor(gavel, jt, k, t, cluster.gpu_types)
            for jt in job_types for k in ks for t in cluster.gpu_types}


def prior_table(native_rates: Mapping[str, float], cluster: Cluster, gavel: ThroughputTable,
                factors: Mapping[tuple[str, int, str], float] | None = None,
                scale_factors: Iterable[int] = (1, 2, 4, 8), dp_efficiency: float = 0.9) -> ThroughputTable:
    """The scheduler's starting table for real workloads.

    ``native_rates[job_type]``: measured steps/s of one worker at full CPU
    speed. Entry for k GPUs of type t: ``k * native * f(t) * eff^(k>1)`` in
    Gavel's units (a k-GPU iteration is k steps), ``f`` from ``factors``
    (the emulated speeds, dilation included) or else Gavel's ratios. Only
    the k values Gavel has for the mirrored model are listed.
    """
    rates: dict[tuple[str, int], dict[str, float]] = {}
    for jt, native in native_rates.items():
        mirrors = workloads.get(jt).mirrors
        for k in scale_factors:
            if not gavel.has(mirrors, k):
                continue
            eff = dp_efficiency if k > 1 else 1.0
            rates[(jt, k)] = {t: k * native * eff * _factor(factors, gavel, jt, k, t, cluster) for t in cluster.gpu_types}
    return ThroughputTable(rates, source="runtime prior (calibrated x Gavel ratios)")


def _factor(factors: Mapping[tuple[str, int, str], float] | None, gavel: ThroughputTable, jt: str, k: int, t: str,
            cluster: Cluster) -> float:
    if factors is not None and (jt, k, t) in factors:
        return factors[(jt, k, t)]
    return speed_factor(gavel, jt, k, t, cluster.gpu_types)
