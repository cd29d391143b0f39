"""Throughputs the runtime measures, and estimates for what it has not measured yet.

Every (job type, GPU count, GPU type) entry of the scheduler's table is one of:

- ``measured``: a moving average of the steps/s leases of this run achieved there;
- ``given``: from a table passed in (``hadar run --throughputs``, e.g. an earlier run's);
- ``estimated``: predicted from everything measured or given so far, by a low-rank model
  in the spirit of Gavel's matrix completion. In logs, a rate is
  ``log X[j, k, t] = log prior[j, k, t] + a_j + b_t + c_k`` where the prior is
  ``k x eff(k) x ratio_j(t)`` (``ratio_j``: the job's per-type speed ratios from Gavel's
  table, its ``emulate_as`` row or the average row; ``eff``: 0.9 data-parallel efficiency
  beyond one GPU), ``a_j`` is the job's own level (from its entries; the mean level of the
  other jobs while it has none), ``b_t`` how much faster or slower type ``t`` runs than the
  prior says, learned from every job measured on it, and ``c_k`` the same for GPU counts
  (``b`` and ``c`` shrink to 0 when few entries inform them). So one measurement of a job
  sets its level everywhere, and the other jobs' measurements correct its ratios.

The policies always see a full table: every registered row, every type, all positive.

Space sharing: a lease that shares its GPUs with another job measures the job's co-located
rate next to that job's type, kept apart from its rate alone (``observe(..., partner=...)``).
The table's ``pairs`` hold, for every two registered rows of one GPU count, the measured
co-located rates, else an estimate: the job's rate alone (as above) x ``pair_ratio`` (its
co-located rate over its rate alone in Gavel's table, for the rows the two jobs mirror; 0,
no pair entry, when Gavel's table has none). A job measured only next to others is not left
at the prior: its co-located rates / ``pair_ratio`` stand for its rate alone where it ran
(still marked estimated) until a lease alone measures it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

from hadar.model.cluster import Cluster
from hadar.model.efficiency import family_of
from hadar.model.job import Job
from hadar.model.throughput import ThroughputTable

Key = tuple[str, int, str]
PairKey = tuple[str, int, str, str]  # (job type, GPU count, partner's job type, GPU type)
Kind = Literal["measured", "given", "estimated"]
Ratio = Callable[[str, int, str], float]
PairRatio = Callable[[str, int, str, str], float]
SHRINK = 1.0  # pseudo-observations pulling a type's or a count's correction towards 0
DEFAULT_RATE = 1.0  # steps/s per GPU on the fastest type assumed before anything is measured


class ThroughputTracker:
    """Moving averages (weight ``alpha`` on the newest lease) and the estimates around them."""

    def __init__(self, gpu_types: Sequence[str], *, ratio: Ratio | None = None, given: ThroughputTable | None = None,
                 alpha: float = 0.5, min_seconds: float = 0.5, dp_efficiency: float = 0.9,
                 pair_ratio: PairRatio | None = None) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.types = tuple(gpu_types)
        self.ratio: Ratio = ratio or (lambda jt, k, t: 1.0)
        self.alpha, self.min_seconds, self.eff = alpha, min_seconds, dp_efficiency
        self.rows: dict[tuple[str, int], None] = {}  # registered (job type, count), in order
        self.given: dict[Key, float] = {}
        self.measured: dict[Key, float] = {}  # moving average: what the policies see
        self.samples: dict[Key, int] = {}
        self.totals: dict[Key, tuple[float, float]] = {}  # (steps, seconds) over the whole run
        self.pair_ratio: PairRatio = pair_ratio or (lambda jt, k, other, t: 0.0)
        self.paired: dict[PairKey, float] = {}  # co-located rates: moving averages
        self.pair_totals: dict[PairKey, tuple[float, float]] = {}
        self._table: ThroughputTable | None = None
        if given is not None:
            for (jt, k), row in given.rates.items():
                for t, v in row.items():
                    if t in self.types and v > 0:
                        self.given[(jt, k, t)] = float(v)

    def add(self, job_type: str, k: int) -> None:
        """Make sure the table has the row (``job_type``, ``k``), and the given rows of its batches
        (``job_type (batch size B)``: an adaptive job's profiled batches, ``model/batch.py``)."""
        if (job_type, k) not in self.rows:
            self.rows[(job_type, k)] = None
            self._table = None
            for jt, kk, _ in list(self.given):
                if kk == k and jt != job_type and family_of(jt) == (job_type, family_of(jt)[1]):
                    self.rows.setdefault((jt, k), None)

    def add_types(self, gpu_types: Sequence[str]) -> bool:
        """Columns for GPU types that joined the cluster (a node of a new type); True if any was new."""
        new = tuple(t for t in dict.fromkeys(gpu_types) if t not in self.types)
        if new:
            self.types += new
            self._table = None
        return bool(new)

    def observe(self, job_type: str, k: int, gpu_type: str, steps: float, seconds: float, partner: str = "") -> bool:
        """Record one lease's rate (``partner``: the job type it shared its GPUs with, "" alone); ignored
        when it ran too briefly to say anything. True if recorded."""
        if seconds < self.min_seconds or steps <= 0 or gpu_type not in self.types:
            return False
        self.add(job_type, k)
        rate = steps / seconds
        if partner:
            pk = (job_type, k, partner, gpu_type)
            old_pair = self.paired.get(pk)
            self.paired[pk] = rate if old_pair is None else self.alpha * rate + (1 - self.alpha) * old_pair
            s, t = self.pair_totals.get(pk, (0.0, 0.0))
            self.pair_totals[pk] = (s + steps, t + seconds)
            self._table = None
            return True
        key = (job_type, k, gpu_type)
        old = self.measured.get(key)
        self.measured[key] = rate if old is None else self.alpha * rate + (1 - self.alpha) * old
        self.samples[key] = self.samples.get(key, 0) + 1
        s, t = self.totals.get(key, (0.0, 0.0))
        self.totals[key] = (s + steps, t + seconds)
        self._table = None
        return True

    def kind(self, job_type: str, k: int, gpu_type: str) -> Kind:
        key = (job_type, k, gpu_type)
        return "measured" if key in self.measured else "given" if key in self.given else "estimated"

    def anchored(self, job_type: str) -> bool:
        """Whether some entry of ``job_type`` is measured or given (its estimates then have a level)."""
        return any(jt == job_type for jt, _, _ in self.measured) or any(jt == job_type for jt, _, _ in self.given)

    def table(self) -> ThroughputTable:
        """Every registered row on every type: moving averages, given entries, estimates (the scheduler's view)."""
        if self._table is None:
            self._table = self._build({**self.given, **self.measured}, "runtime (measured and estimated)",
                                      self.paired)
        return self._table

    def mean_table(self) -> ThroughputTable:
        """As ``table`` with whole-run means (total steps / total seconds) for what was measured."""
        means = {k: s / t for k, (s, t) in self.totals.items() if t > 0}
        pair_means = {k: s / t for k, (s, t) in self.pair_totals.items() if t > 0}
        return self._build({**self.given, **means}, "runtime (measured means and estimates)", pair_means)

    def pair_kind(self, job_type: str, k: int, partner: str, gpu_type: str) -> Kind:
        return "measured" if (job_type, k, partner, gpu_type) in self.paired else "estimated"

    def entries(self) -> list[dict[str, Any]]:
        """The scheduler's table entry by entry, each marked measured, given or estimated."""
        table = self.table()
        return [{"job_type": jt, "gpus": k, "gpu_type": t, "steps_per_s": table.get(jt, k, t),
                 "kind": self.kind(jt, k, t), "samples": self.samples.get((jt, k, t), 0)}
                for jt, k in self.rows for t in self.types]

    def measurements(self) -> list[tuple[Key, float, int, float, float]]:
        """Every measured entry as (key, moving average, samples, total steps, total seconds), sorted: what
        a store keeps so that ``restore`` can put it back into a later run's tracker."""
        return [(key, rate, self.samples.get(key, 0), *self.totals.get(key, (0.0, 0.0)))
                for key, rate in sorted(self.measured.items())]

    def restore(self, key: Key, rate: float, samples: int, steps: float, seconds: float) -> None:
        """Put back a measured entry kept from an earlier run (``measurements``); it counts as measured. An
        entry of a GPU type the cluster does not have now is kept too (the type may join again)."""
        if not (rate > 0 and math.isfinite(rate)):
            return
        self.measured[key] = float(rate)
        self.samples[key] = int(samples)
        self.totals[key] = (float(steps), float(seconds))
        self._table = None

    # ---- the estimator -----------------------------------------------------------------------
    def prior(self, job_type: str, k: int, gpu_type: str) -> float:
        return DEFAULT_RATE * k * (self.eff if k > 1 else 1.0) * max(self.ratio(job_type, k, gpu_type), 1e-6)

    def _build(self, known: dict[Key, float], source: str, paired: dict[PairKey, float]) -> ThroughputTable:
        known = {**self._alone_from_pairs(paired), **known}
        level, b, c = self._fit(known)
        typical = sum(level.values()) / len(level) if level else 0.0
        rates: dict[tuple[str, int], dict[str, float]] = {}
        for jt, k in self.rows:
            row = rates.setdefault((jt, k), {})
            for t in self.types:
                v = known.get((jt, k, t))
                row[t] = v if v is not None else self.prior(jt, k, t) * math.exp(
                    level.get(jt, typical) + b.get(t, 0.0) + c.get(k, 0.0))
        return ThroughputTable(rates, source=source, pairs=self._pairs(rates, paired))

    def _alone_from_pairs(self, paired: dict[PairKey, float]) -> dict[Key, float]:
        """Rates alone implied by co-located ones (co-located rate / ``pair_ratio``, the geometric mean over
        partners): a job measured only next to others still gets its level, where it ran, from them."""
        logs: dict[Key, list[float]] = {}
        for (jt, k, other, t), rate in paired.items():
            r = self.pair_ratio(jt, k, other, t)
            if r > 0 and rate > 0:
                logs.setdefault((jt, k, t), []).append(math.log(rate / r))
        return {key: math.exp(sum(v) / len(v)) for key, v in logs.items()}

    def _pairs(self, rates: dict[tuple[str, int], dict[str, float]],
               paired: dict[PairKey, float]) -> dict[tuple[str, int, str], dict[str, tuple[float, float]]]:
        """Co-located rates of every two rows of one GPU count (a row with itself too): measured, else estimated."""
        def rate(jt: str, k: int, other: str, t: str) -> float:
            v = paired.get((jt, k, other, t))
            return v if v is not None else rates[(jt, k)][t] * max(0.0, self.pair_ratio(jt, k, other, t))

        out: dict[tuple[str, int, str], dict[str, tuple[float, float]]] = {}
        for a, k in self.rows:
            for b, kb in self.rows:
                if kb != k:
                    continue
                for t in self.types:
                    ra, rb = rate(a, k, b, t), rate(b, k, a, t)
                    if ra > 0 and rb > 0:
                        out.setdefault((a, k, b), {})[t] = (ra, rb)
        return out

    def _fit(self, known: dict[Key, float]) -> tuple[dict[str, float], dict[str, float], dict[int, float]]:
        """Least squares of the log residuals against a_j + b_t + c_k (b, c shrunk), by alternating means."""
        resid = {key: math.log(v) - math.log(self.prior(*key)) for key, v in known.items() if v > 0}
        a: dict[str, float] = {}
        b: dict[str, float] = {}
        c: dict[int, float] = {}
        for _ in range(25):
            a = _means({(key[0], key): r - b.get(key[2], 0.0) - c.get(key[1], 0.0) for key, r in resid.items()}, 0.0)
            b = _means({(key[2], key): r - a[key[0]] - c.get(key[1], 0.0) for key, r in resid.items()}, SHRINK)
            c = _means({(key[1], key): r - a[key[0]] - b[key[2]] for key, r in resid.items()}, SHRINK)
        return a, b, c


def _means(values: dict[tuple[Any, Key], float], shrink: float) -> dict[Any, float]:
    """Per group (the first part of each key): the sum of its values / (their number + ``shrink``)."""
    sums: dict[Any, float] = {}
    counts: dict[Any, int] = {}
    for (group, _), v in values.items():
        sums[group] = sums.get(group, 0.0) + v
        counts[group] = counts.get(group, 0) + 1
    return {g: total / (counts[g] + shrink) for g, total in sums.items()}


def shape_table(jobs: Sequence[Job], cluster: Cluster) -> ThroughputTable:
    """A table with every job's row (job type, GPU count) on the cluster's types, all rates positive:
    enough to check that jobs fit before they run or are stored (the tracker's table has the same keys)."""
    tracker = ThroughputTracker(cluster.gpu_types)
    for job in jobs:
        tracker.add(job.job_type, job.scale_factor)
    return tracker.table()
