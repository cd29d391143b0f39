"""Measured throughputs: a moving average per (job type, GPU count, GPU type).

The runtime feeds every lease's observed steps/s here; ``table()`` returns
the scheduler's table with measured entries replaced, and the unmeasured
types of a measured (job type, count) scaled by the mean correction
(measured / prior) of the measured ones, so one observation also corrects
the other types' estimates instead of leaving them optimistic.
"""

from __future__ import annotations

import math

from hadar.model.throughput import ThroughputTable

Key = tuple[str, int, str]


class ThroughputTracker:
    """Exponential moving average (weight ``alpha`` on the newest observation)."""

    def __init__(self, prior: ThroughputTable, alpha: float = 0.5, min_seconds: float = 0.5) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.prior = prior
        self.alpha = alpha
        self.min_seconds = min_seconds
        self.measured: dict[Key, float] = {}  # moving average: what the policies see
        self.samples: dict[Key, int] = {}
        self.totals: dict[Key, tuple[float, float]] = {}  # (steps, seconds) over the whole run

    def observe(self, job_type: str, k: int, gpu_type: str, steps: float, seconds: float) -> bool:
        """Record one lease's rate; ignored when it ran too briefly to say anything. True if recorded."""
        if seconds < self.min_seconds or steps <= 0:
            return False
        rate = steps / seconds
        key = (job_type, k, gpu_type)
        old = self.measured.get(key)
        self.measured[key] = rate if old is None else self.alpha * rate + (1 - self.alpha) * old
        self.samples[key] = self.samples.get(key, 0) + 1
        s, t = self.totals.get(key, (0.0, 0.0))
        self.totals[key] = (s + steps, t + seconds)
        return True

    def table(self) -> ThroughputTable:
        """The prior with the moving averages in (the scheduler's view)."""
        return self._merge(self.measured, "runtime (measured moving average)")

    def mean_table(self) -> ThroughputTable:
        """The prior with whole-run means (total steps / total seconds) in: what the run saw on average."""
        means = {k: s / t for k, (s, t) in self.totals.items() if t > 0}
        return self._merge(means, "runtime (measured means)")

    def _merge(self, measured: dict[Key, float], source: str) -> ThroughputTable:
        rates = {key: dict(v) for key, v in self.prior.rates.items()}
        for (jt, k), row in rates.items():
            ratios = [measured[(jt, k, t)] / p for t, p in row.items() if (jt, k, t) in measured and p > 0]
            corr = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else 1.0
            for t, p in row.items():
                row[t] = measured.get((jt, k, t), p * corr)
        return ThroughputTable(rates, source=source)
