"""Adaptive jobs: a job's rate at another global batch than its own, and the batches it may choose from.

An adaptive job (``Job.batch_range``) may run at any global batch of its range; the world runs each lease at
the batch the plan chose and credits ``Efficiency.gain`` reference steps per step at that batch.

**Step time at a batch** (``batch_rate``: table steps/s of ``FAMILY (batch size B)`` on ``k`` GPUs of one
type; ``FAMILY`` as ``family_of`` reads the job type):

1. where the throughput table has ``FAMILY (batch size B)`` at ``k`` GPUs, its rate there (Sia's imports
   write every batch a model was profiled at: Sia measured them; a 0 there means that batch cannot run on
   ``k`` GPUs of that type);
2. otherwise the step time ``T = 1 / rate`` is linear in the batch, ``T(B) = a + c B`` with a fixed overhead
   ``a >= 0`` and a per-sample cost ``c >= 0``, through the family's batches the table has at ``k`` GPUs of
   that type (rate > 0): between two of them interpolated linearly; beyond the last (or before the first)
   along the line through the two nearest, its slope held within ``[0, T / B]`` of the nearest (no
   negative overhead, no step faster at a larger batch); with one known batch, ``T`` proportional to the
   batch (no overhead: samples/s stay as measured);
3. with no batch of the family at ``k``, the job's own rate on ``k`` GPUs (``ThroughputTable.rate_on``)
   scaled by ``own / B`` (samples/s as at its own batch).

**Candidates** (``candidates``): the family's batches the table names within the range, both ends of the
range, the job's own batch, and its own batch times every power of two within the range; ascending.
"""

from __future__ import annotations

from itertools import pairwise

from hadar.model.efficiency import family_of
from hadar.model.throughput import ThroughputTable


def batch_type(job_type: str, batch: float) -> str:
    """``"bert (batch size 96)"``: the family of ``job_type`` at global ``batch`` (a whole batch without
    a decimal point)."""
    text = str(int(batch)) if batch == int(batch) else repr(batch)
    return f"{family_of(job_type)[0]} (batch size {text})"


_FAMILIES: dict[int, tuple[ThroughputTable, dict[str, tuple[float, ...]]]] = {}  # id(table) -> (table, batches)


def family_batches(table: ThroughputTable, job_type: str) -> tuple[float, ...]:
    """The batches of ``job_type``'s family that the table names, ascending (read once per table)."""
    held = _FAMILIES.get(id(table))
    if held is None or held[0] is not table:
        if len(_FAMILIES) > 32:
            _FAMILIES.clear()
        per: dict[str, set[float]] = {}
        for jt in table.job_types:
            name, b = family_of(jt)
            if b is not None:
                per.setdefault(name, set()).add(b)
        held = _FAMILIES[id(table)] = (table, {name: tuple(sorted(bs)) for name, bs in per.items()})
    return held[1].get(family_of(job_type)[0], ())


def candidates(table: ThroughputTable, job_type: str, own: float, lo: float, hi: float) -> tuple[float, ...]:
    """The batches an adaptive job of range ``[lo, hi]`` (own batch ``own``) chooses from (module docstring)."""
    out = {b for b in family_batches(table, job_type) if lo <= b <= hi} | {lo, hi, own}
    b = own * 2
    while b <= hi:
        out.add(b)
        b *= 2
    b = own / 2
    while b >= lo:
        out.add(b)
        b /= 2
    return tuple(sorted(out))


def batch_rate(table: ThroughputTable, job_type: str, own: float, batch: float, k: int, gpu_type: str) -> float:
    """Table steps/s of ``job_type``'s family at global ``batch`` on ``k`` GPUs of ``gpu_type`` (module
    docstring); ``own`` is the job's own batch (rule 3)."""
    exact = batch_type(job_type, batch)
    if table.has(exact, k):
        return table.get(exact, k, gpu_type)
    known = []
    for b in family_batches(table, job_type):
        jt = batch_type(job_type, b)
        if table.has(jt, k) and (rate := table.get(jt, k, gpu_type)) > 0:
            known.append((b, 1.0 / rate))
    if not known:
        rate = table.rate_on(job_type, k, gpu_type)
        return rate * own / batch
    step = _step_time(known, batch)
    return 1.0 / step if step > 0 else 0.0


def _step_time(known: list[tuple[float, float]], batch: float) -> float:
    """``T(batch)`` from ``(batch, step time)`` points, ascending in batch (rule 2)."""
    if len(known) == 1:
        b, t = known[0]
        return t * batch / b
    for (b0, t0), (b1, t1) in pairwise(known):
        if b0 <= batch <= b1:
            return t0 + (t1 - t0) * (batch - b0) / (b1 - b0)
    (b0, t0), (b1, t1) = known[-2:] if batch > known[-1][0] else known[:2]
    near_b, near_t = (b1, t1) if batch > b1 else (b0, t0)
    slope = min(max((t1 - t0) / (b1 - b0), 0.0), near_t / near_b)
    return near_t + slope * (batch - near_b)
