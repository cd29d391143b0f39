"""The frozen snapshot a policy decides on, and the allocation it returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from hadar.arrays import FloatArray
from hadar.model.cluster import Cluster
from hadar.model.efficiency import Efficiency
from hadar.model.throughput import ThroughputTable


@dataclass(frozen=True, slots=True)
class JobView:
    """An active job as the scheduler sees it at ``SchedulerState.now_s``.

    ``throughputs`` is the job's whole-job rate (steps/s on ``scale_factor``
    GPUs) per type, in ``SchedulerState.gpu_types`` order.
    """

    job_id: int
    job_type: str
    scale_factor: int
    priority_weight: float
    arrival_s: float
    total_steps: float
    remaining_steps: float
    throughputs: tuple[float, ...]
    first_start_s: float | None = None
    attained_gpu_s: float = 0.0  # GPU-seconds received so far
    previous_gpus: tuple[int, ...] = ()  # GPUs held in the round just ended
    restart_s: float = 0.0  # seconds a start or a move to other GPUs costs it (``Job.restart_s``)
    restoring: tuple[tuple[tuple[int, ...], float], ...] = ()  # (GPUs, s): restores a cut round left unfinished
    slo: float | None = None  # the job's SLO factor (``Job.slo``; deadline = arrival + slo x its fastest run time)
    entity: str = ""  # who the job belongs to (``Job.entity``; hierarchical fairness), "" = nobody named
    gain: float = 1.0  # reference steps a table step makes, on average over the work left (``throughputs`` include it)
    gpu_range: tuple[int, int] | None = None  # an elastic job's (least, most) GPUs (``Job.gpu_range``); None: rigid
    efficiency: Efficiency | None = None  # its statistical-efficiency profile (``Job.efficiency``)
    batch_range: tuple[float, float] | None = None  # an adaptive job's (least, most) batch (``Job.batch_range``)
    merge_rho: float | None = None  # its copies' measured worth at a merge over data-parallel's (``MergeGain.rho``)

    def owed_s(self, gpus: tuple[int, ...]) -> float:
        """Restore time still owed by a lease on exactly ``gpus`` that the last round cut short (else 0)."""
        if not self.restoring:
            return 0.0
        return next((s for g, s in self.restoring if g == gpus), 0.0)

    @property
    def done_steps(self) -> float:
        return self.total_steps - self.remaining_steps


@dataclass(frozen=True, slots=True)
class SchedulerState:
    """Everything a policy may read; never mutated (the ledger makes a new one)."""

    now_s: float
    round_s: float
    cluster: Cluster
    jobs: tuple[JobView, ...]
    table: ThroughputTable
    memo: Mapping[str, Any] = field(default_factory=dict)  # from the previous Allocation

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return self.cluster.gpu_types

    @property
    def job_ids(self) -> tuple[int, ...]:
        return tuple([j.job_id for j in self.jobs])

    def throughput_matrix(self) -> FloatArray:
        """m x n matrix of whole-job steps/s (jobs in state order, types in ``gpu_types`` order)."""
        n = len(self.gpu_types)
        if not self.jobs:
            return np.zeros((0, n))
        return np.array([j.throughputs for j in self.jobs], dtype=float)

    def scale_factors(self) -> FloatArray:
        return np.array([j.scale_factor for j in self.jobs], dtype=float)

    def priority_weights(self) -> FloatArray:
        return np.array([j.priority_weight for j in self.jobs], dtype=float)

    def remaining_steps(self) -> FloatArray:
        return np.array([j.remaining_steps for j in self.jobs], dtype=float)

    def capacities(self) -> FloatArray:
        return np.array([self.cluster.count(t) for t in self.gpu_types], dtype=float)


@dataclass(frozen=True, slots=True)
class Allocation:
    """What each job should get: ``fractions[i, j]`` = share of time job i runs on type j.

    A job on type j holds ``scale_factor`` GPUs while it runs, so its share
    in GPU-equivalents is ``fractions * scale_factor`` (see ``shares``).
    Policies never pick GPU ids; planners do. Task-level policies (Hadar,
    YARN-CS) also give whole GPU ``counts`` per job and type (their
    fractions are then count / W); forking policies (HadarE) give each job's
    ``copies`` as (node index, GPU count) pairs, at most one per node.
    Space-sharing policies (Gavel's ``*_packed``) give ``pairs``: (job id, job id) -> share of
    time per type the two run together on the same GPUs; ``fractions`` is then each job's time
    alone (the job's total time is its row plus its pairs').
    ``memo`` carries policy state to the next snapshot (pure policies with
    memory, e.g. finish-time fairness's accumulated isolated time). ``batches``: the global batch each
    adaptive job runs at (job id -> batch; ``model/batch.py``); a job not in it runs at its own.
    """

    job_ids: tuple[int, ...]
    gpu_types: tuple[str, ...]
    fractions: FloatArray
    scale_factors: tuple[int, ...] = ()
    counts: Mapping[int, Mapping[str, int]] | None = None
    copies: Mapping[int, tuple[tuple[int, int], ...]] | None = None
    pairs: Mapping[tuple[int, int], tuple[float, ...]] | None = None
    memo: Mapping[str, Any] = field(default_factory=dict)
    batches: Mapping[int, float] | None = None

    def __post_init__(self) -> None:
        x = np.array(self.fractions, dtype=float).reshape(len(self.job_ids), len(self.gpu_types))
        x.setflags(write=False)
        object.__setattr__(self, "fractions", x)
        if not self.scale_factors:
            object.__setattr__(self, "scale_factors", (1,) * len(self.job_ids))
        if self.counts is not None:
            object.__setattr__(self, "counts", _frozen_counts(self.counts))
        if self.copies is not None:
            object.__setattr__(self, "copies", MappingProxyType(
                {jid: tuple((int(n), int(k)) for n, k in c) for jid, c in self.copies.items() if c}))
        if self.pairs is not None:
            object.__setattr__(self, "pairs", MappingProxyType(
                {(int(a), int(b)): tuple(float(v) for v in xs) for (a, b), xs in self.pairs.items()}))
        object.__setattr__(self, "memo", MappingProxyType(dict(self.memo)))
        if self.batches is not None:
            object.__setattr__(self, "batches", MappingProxyType({int(j): float(b) for j, b in self.batches.items()}))
        object.__setattr__(self, "_index", {jid: i for i, jid in enumerate(self.job_ids)})
        object.__setattr__(self, "_rows", tuple(map(tuple, x.tolist())))  # Python floats, as float(v)

    _index: dict[int, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    _rows: tuple[tuple[float, ...], ...] = field(default=(), init=False, repr=False, compare=False)

    def __contains__(self, job_id: int) -> bool:
        return job_id in self._index

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its constructor's arguments (the recorder keeps the allocation in force): the
        frozen mappings as plain dicts; nested values must pickle themselves."""
        def plain(m: Mapping[Any, Any] | None) -> dict[Any, Any] | None:
            return None if m is None else {k: dict(v) if isinstance(v, Mapping) else v for k, v in m.items()}

        return (Allocation, (self.job_ids, self.gpu_types, np.array(self.fractions), self.scale_factors,
                             plain(self.counts), plain(self.copies), plain(self.pairs), dict(self.memo),
                             plain(self.batches)))

    def fraction(self, job_id: int, gpu_type: str) -> float:
        """Time fraction of ``job_id`` on ``gpu_type`` (0.0 if absent)."""
        i = self._index.get(job_id)
        if i is None or gpu_type not in self.gpu_types:
            return 0.0
        return float(self.fractions[i, self.gpu_types.index(gpu_type)])

    def row(self, job_id: int) -> tuple[float, ...] | None:
        """The job's fractions in ``gpu_types`` order, or None if it is not in the allocation."""
        i = self._index.get(job_id)
        return None if i is None else self._rows[i]

    def shares(self) -> FloatArray:
        """GPU-equivalents per (job, type): fractions x scale factor."""
        out: FloatArray = self.fractions * np.array(self.scale_factors, dtype=float)[:, None]
        return out

    def as_dict(self) -> dict[int, dict[str, float]]:
        return {
            jid: {t: float(self.fractions[i, j]) for j, t in enumerate(self.gpu_types)}
            for i, jid in enumerate(self.job_ids)
        }

    @classmethod
    def for_state(cls, state: SchedulerState, fractions: FloatArray, **kw: Any) -> Allocation:
        """Build an allocation aligned with ``state``'s jobs and types."""
        return cls(
            job_ids=state.job_ids,
            gpu_types=state.gpu_types,
            fractions=fractions,
            scale_factors=tuple([j.scale_factor for j in state.jobs]),
            **kw,
        )


def _frozen_counts(counts: Mapping[int, Mapping[str, int]]) -> Mapping[int, Mapping[str, int]]:
    """``Allocation.counts`` as stored: read-only, each count an int, zero counts left out (plain loops:
    built for every job at every re-solve)."""
    out: dict[int, Mapping[str, int]] = {}
    for jid, c in counts.items():
        kept: dict[str, int] = {}
        for t, k in c.items():
            if k > 0:
                kept[t] = k if type(k) is int else int(k)
        out[jid] = MappingProxyType(kept)
    return MappingProxyType(out)
