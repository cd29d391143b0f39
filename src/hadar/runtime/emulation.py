"""Emulating a heterogeneous GPU cluster on one CPU machine.

What it is: every GPU of the cluster file becomes one Ray worker actor
(a process running real PyTorch training on the CPU, one thread), pinned
to a *logical node* through a Ray custom resource ``hadar_node:<name>``;
the logical nodes all live on this machine. A GPU type is a speed factor
``f = X[m, k, type] / max_t X[m, k, t]`` (<= 1) taken from a row of Gavel's
throughput table: the row of the Gavel model ``m`` the job says it behaves
like (its ``emulate_as``; the bundled workloads name the model they mirror)
or, by default, the *average Gavel row* (``average_row``: per type, the
geometric mean over Gavel's models of their one-GPU speed relative to their
fastest type: V100 1.0, P100 0.943, K80 0.297). After each real training step the job's ``ctx.steps()`` waits so
that the step lasts ``real_step_time / f``. So a K80 runs a ResNet step ~5x
slower than a V100 and a recommendation step faster, in the same proportions
as Gavel measured.

Two jobs sharing a GPU (space sharing) run in two processes on it at once; on an emulated
GPU each job's steps are stretched by a further ``pair(mirror, k, other, type)``: its rate next
to the other job over its rate alone, in Gavel's co-location entries for the two mirrored models
(``SpeedRatios.pair``). On a real GPU nothing is stretched: the two processes contend for it.

What it is not: not a GPU simulator (memory limits, kernels, NVLink and
network are not modelled); the real CPU step time itself varies with how
many workers share the cores, and that contention is measured, not hidden:
the runtime feeds the observed steps/s back into the scheduler's table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hadar.errors import InputError
from hadar.model.cluster import Cluster
from hadar.model.throughput import ThroughputTable

NODE_RESOURCE = "hadar_node:"  # + node name; amount = GPUs of the node
TYPE_RESOURCE = "hadar_gpu:"  # + GPU type; amount = GPUs of that type
AVERAGE = ""  # the mirror name of the average Gavel row


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


class SpeedRatios:
    """``ratio(mirror, k, gpu_type)``: speed in (0, 1] relative to the fastest of ``types`` (cached).

    ``mirror`` is a Gavel job type, or ``AVERAGE`` (""). A type Gavel's table does not know runs
    at 1.0; a GPU count the row lacks uses the row for 1 GPU."""

    def __init__(self, gavel: ThroughputTable, types: Sequence[str]) -> None:
        self.gavel, self.types = gavel, tuple(types)
        self._cache: dict[tuple[str, int], dict[str, float]] = {}

    def check(self, mirror: str, where: str) -> None:
        """``InputError`` unless ``mirror`` names a Gavel job type (or is the average row)."""
        if mirror != AVERAGE and not self.gavel.scale_factors(mirror):
            known = ", ".join(self.gavel.job_types[:6])
            raise InputError(f"{where}: emulate_as {mirror!r} is not a job type of Gavel's table (e.g. {known}, ...)")

    def __call__(self, mirror: str, k: int, gpu_type: str) -> float:
        key = (mirror, k)
        if key not in self._cache:
            self._cache[key] = self._row(mirror, k)
        return self._cache[key].get(gpu_type, 1.0)

    def pair(self, mirror: str, k: int, other: str, gpu_type: str) -> float:
        """``mirror``'s rate next to ``other`` over its rate alone on ``gpu_type`` in Gavel's co-location entries
        (at ``k`` GPUs, else 1); 0.0 when the table has no entry (the average row has none)."""
        ref = k if self.gavel.pair_rates(mirror, other, k, gpu_type)[0] > 0 else 1
        together = self.gavel.pair_rates(mirror, other, ref, gpu_type)[0]
        alone = self.gavel.get(mirror, ref, gpu_type) if self.gavel.has(mirror, ref) else 0.0
        return together / alone if together > 0 and alone > 0 else 0.0

    def _row(self, mirror: str, k: int) -> dict[str, float]:
        if mirror == AVERAGE:
            return average_row(self.gavel, self.types)
        ref = k if self.gavel.has(mirror, k) else 1
        if not self.gavel.has(mirror, ref):
            return {}
        row = self.gavel.rates[(mirror, ref)]
        best = max((row.get(t, 0.0) for t in self.types), default=0.0)
        return {t: row[t] / best for t in self.types if t in row and best > 0 and row[t] > 0}


def average_row(gavel: ThroughputTable, types: Sequence[str]) -> dict[str, float]:
    """Per type: the geometric mean over Gavel's models (on one GPU) of their rate relative to their fastest
    type among ``types``, renormalized so the fastest type is 1.0; used for every GPU count. On V100, P100
    and K80 with the bundled table: 1.0, 0.943, 0.297."""
    logs: dict[str, list[float]] = {t: [] for t in types}
    for jt in gavel.job_types:
        if not gavel.has(jt, 1):
            continue
        row = gavel.rates[(jt, 1)]
        if not all(row.get(t, 0.0) > 0 for t in types):
            continue
        best = max(row[t] for t in types)
        for t in types:
            logs[t].append(math.log(row[t] / best))
    means = {t: math.exp(sum(v) / len(v)) for t, v in logs.items() if v}
    top = max(means.values(), default=1.0)
    return {t: m / top for t, m in means.items()}
