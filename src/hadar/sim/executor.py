"""The simulated executor: progress from the throughput table, no side effects."""

from __future__ import annotations

import math

from hadar.model.cluster import Cluster
from hadar.model.fork_efficiency import IDEAL, ForkEfficiency
from hadar.model.plan import Lease, LeaseResult, RoundPlan, RoundReport
from hadar.model.throughput import ThroughputTable


class SimulatedExecutor:
    """Runs a round on paper, as Gavel's simulator does.

    A lease runs ``min(floor(rate * round), max_steps)`` steps and ends at
    ``start + steps / rate``; the round ends when the last lease ends.
    Rate of a lease on GPUs of one type r: ``X[type, len(gpus), r]`` (for a
    count the table lacks, ``ThroughputTable.rate_on``'s scaling); on
    several types (Hadar's task-level placements): ``sync`` model = the
    slowest type's ``X[type, W, r]``; ``additive`` = sum over types of
    (GPUs of r) x ``X[type, W, r] / W``.

    Forked copies (HadarE: several leases of one job in a round) are credited
    ``fork_efficiency.factor(job type, k)`` x their steps (k copies; default
    ``IDEAL``: factor 1, every copy's steps count in full).
    """

    def __init__(self, cluster: Cluster, table: ThroughputTable, rate_model: str = "sync",
                 fork_efficiency: ForkEfficiency = IDEAL) -> None:
        if rate_model not in ("sync", "additive"):
            raise ValueError(f"unknown rate model {rate_model!r}")
        self.cluster = cluster
        self.table = table
        self.rate_model = rate_model
        self.fork_efficiency = fork_efficiency
        self._cache: dict[tuple[str, int, tuple[int, ...]], float] = {}

    def estimate_rate(self, lease: Lease) -> float:
        """The simulated rate is exact: the lease makes exactly this many steps/s."""
        return self.rate(lease)

    def cluster_view(self) -> None:
        """A simulated cluster never changes."""
        return

    def rate(self, lease: Lease) -> float:
        """Steps/s of the lease (cached per job type, scale factor and GPU set)."""
        key = (lease.job_type, lease.scale_factor, lease.gpus)
        rate = self._cache.get(key)
        if rate is None:
            if len(self._cache) > 100_000:
                self._cache.clear()
            rate = self._cache[key] = self._rate(lease)
        return rate

    def _rate(self, lease: Lease) -> float:
        types: dict[str, int] = {}
        for g in lease.gpus:
            t = self.cluster.gpu_type_of[g]
            types[t] = types.get(t, 0) + 1
        k = len(lease.gpus)
        if len(types) == 1:
            (t,) = types
            # a HadarE copy may use k < W GPUs with no k entry: the table's rule for that
            return self.table.rate_on(lease.job_type, k, t)
        w = lease.scale_factor
        if self.rate_model == "sync":
            return min(self.table.get(lease.job_type, w, t) for t in types)
        return sum(n * self.table.get(lease.job_type, w, t) / w for t, n in types.items())

    def run_round(self, plan: RoundPlan) -> RoundReport:
        by_job: dict[int, list[Lease]] = {}
        for lease in plan.leases:
            by_job.setdefault(lease.job_id, []).append(lease)
        results: list[LeaseResult] = []
        for leases in by_job.values():
            if len(leases) == 1:
                results.append(self._run_one(leases[0], plan))
            else:
                results.extend(self._run_copies(leases, plan))
        end = max((r.end_s for r in results), default=plan.start_s)
        return RoundReport(plan.start_s, end, tuple(results))

    def _run_one(self, lease: Lease, plan: RoundPlan) -> LeaseResult:
        rate = self.rate(lease)
        if rate <= 0:
            return LeaseResult(lease.job_id, lease.copy, lease.gpus, 0.0, plan.start_s)
        steps = min(math.floor(rate * plan.duration_s), lease.max_steps)
        if steps <= 0:
            steps = min(rate * plan.duration_s, lease.max_steps)
        return LeaseResult(lease.job_id, lease.copy, lease.gpus, float(steps), plan.start_s + steps / rate)

    def _run_copies(self, leases: list[Lease], plan: RoundPlan) -> list[LeaseResult]:
        """Forked copies of one job (HadarE) share its remaining steps.

        Each copy runs at its own rate times the fork efficiency eff(k) of its
        job's k copies (its credited steps are unforked-equivalent steps); if
        together they can do more than the job has left, all stop when the sum
        reaches it (the job tracker sees the job finish), at
        ``start + remaining / sum(rates)``.
        """
        eff = self.fork_efficiency.factor(leases[0].job_type, len(leases))
        rates = [self.rate(lease) * eff for lease in leases]
        remaining = min(lease.max_steps for lease in leases)
        full = [math.floor(r * plan.duration_s) for r in rates]
        if sum(full) <= remaining:
            return [LeaseResult(lease.job_id, lease.copy, lease.gpus, float(n), plan.start_s + (n / r if r > 0 else 0))
                    for lease, r, n in zip(leases, rates, full, strict=True)]
        t = remaining / sum(rates)
        return [LeaseResult(lease.job_id, lease.copy, lease.gpus, r * t, plan.start_s + (t if r > 0 else 0.0))
                for lease, r in zip(leases, rates, strict=True)]
