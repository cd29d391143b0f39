"""The simulated executor: progress from the throughput table, no side effects."""

from __future__ import annotations

import math
from dataclasses import replace

from hadar.model.batch import batch_rate
from hadar.model.cluster import Cluster
from hadar.model.efficiency import Efficiency
from hadar.model.fork_model import ForkModel
from hadar.model.frozen import builder
from hadar.model.job import Job
from hadar.model.plan import Lease, LeaseResult, RoundPlan, RoundReport
from hadar.model.throughput import ThroughputTable
from hadar.model.world import World

WORLD = World()  # sync gangs, ideal forks, restarts charged

_result = builder(LeaseResult)  # positional: job_id, copy, gpus, steps, end_s, failed, metrics, error, fatal,
#                                 restore_left_s, reached_target


class SimulatedExecutor:
    """Runs a round on paper, as Gavel's simulator does.

    A lease runs ``min(floor(rate * round), max_steps)`` steps and ends at
    ``start + steps / rate``; the round ends when the last lease ends.
    Rate of a lease on GPUs of one type r: ``X[type, len(gpus), r]`` (for a
    count the table lacks, ``ThroughputTable.rate_on``'s scaling); on
    several types (Hadar's task-level placements): ``sync`` model = the
    slowest type's ``X[type, W, r]``; ``additive`` = sum over types of
    (GPUs of r) x ``X[type, W, r] / W``. A lease sharing its GPUs with a
    partner (space sharing) runs at the table's co-located rate of the pair.

    Restarts (``charge_restarts``): a lease first spends its ``lost_s`` restoring (its
    job's ``restart_s`` unless extended), then steps; a restore longer than the round (cut
    short) reports its rest (``restore_left_s``), which the lease owes next round if it keeps
    its GPUs.

    Forked copies (HadarE: several leases of one job in a round) are credited
    ``fork_efficiency.factor(job type, k)`` x their steps (k copies; default
    ``IDEAL``: factor 1, every copy's steps count in full).

    Under the noise-scale model (``ForkModel``) k >= 2 copies are credited ``rho(f) x eff(k)`` at the round's
    starting progress f (``ForkModel.factor``, the job's own profile giving its noise scale), each copy after
    ``merge_s`` of the round spent merging (on top of its restore).

    Statistical progress: a job with an efficiency profile (``Job.efficiency``, learnt at ``admit``) has
    ``total_steps`` in reference steps; its lease makes ``floor(rate * round)`` of the table's steps (at
    the job's batch), credited ``Efficiency.credit`` reference steps (``r`` per step, exact across changes
    of the noise scale), and stops when the credit reaches ``max_steps``. Its progress is read from the
    lease: ``total - max_steps`` reference steps done. Forked copies of such a job are credited ``r`` at
    the round's starting progress. An adaptive job's lease at another batch (``Lease.batch``) runs at
    ``model/batch.py``'s rate for that batch and is credited the gain at that batch.
    """

    def __init__(self, cluster: Cluster, table: ThroughputTable, world: World = WORLD) -> None:
        self.cluster = cluster
        self.table = table
        self.world = world
        self.rate_model = world.rate_model
        self.charge_restarts = world.charge_restarts
        self.fork_efficiency = world.fork_efficiency
        self._cache: dict[tuple[str, int, tuple[int, ...], str], float] = {}
        self._profiles: dict[int, tuple[Efficiency, float]] = {}  # job id -> (profile, total reference steps)
        self._batch_cache: dict[tuple[str, float, float, tuple[int, ...]], float] = {}
        self._totals: dict[int, float] = {}  # job id -> total steps (a forked job's progress, ForkModel's rho)

    def estimate_rate(self, lease: Lease) -> float:
        """The simulated rate is exact: the lease makes exactly this many steps/s (``rate``'s cache read
        inline: the engine asks for every lease of every round it may cut)."""
        rate = self._cache.get((lease.job_type, lease.scale_factor, lease.gpus, lease.partner_type))
        if rate is None or lease.batch:
            rate = self._rate_of(lease)
        if self._profiles and lease.job_id in self._profiles and rate > 0:  # its mean rate over what is left
            eff, total = self._profiles[lease.job_id]
            need = eff.steps_for(total - lease.max_steps, lease.max_steps, total, lease.batch or None)
            return rate * lease.max_steps / need if need > 0 else rate
        return rate

    def cluster_view(self) -> None:
        """A simulated cluster never changes."""
        return

    def admit(self, jobs: list[Job]) -> None:
        """The run's table is the simulated world's: it holds every job's rows already; the jobs'
        efficiency profiles are noted (their steps are credited by them)."""
        model = isinstance(self.fork_efficiency, ForkModel)
        for job in jobs:
            if model:
                self._totals[job.job_id] = float(job.total_steps)
            if job.efficiency is not None:
                self._profiles[job.job_id] = (job.efficiency, float(job.total_steps))

    def rate(self, lease: Lease) -> float:
        """Steps/s of the lease (cached per job type, scale factor and GPU set)."""
        key = (lease.job_type, lease.scale_factor, lease.gpus, lease.partner_type)
        rate = self._cache.get(key)
        if rate is None:
            if len(self._cache) > 100_000:
                self._cache.clear()
            rate = self._cache[key] = self._rate(lease)
        return rate

    def _rate_of(self, lease: Lease) -> float:
        """``rate``, or for an adaptive job's lease at another batch than its own, the rate at that batch."""
        if not lease.batch or lease.job_id not in self._profiles:
            return self.rate(lease)
        own = self._profiles[lease.job_id][0].batch
        if lease.batch == own:
            return self.rate(lease)
        key = (lease.job_type, own, lease.batch, lease.gpus)
        rate = self._batch_cache.get(key)
        if rate is None:
            if len(self._batch_cache) > 100_000:
                self._batch_cache.clear()
            rate = self._batch_cache[key] = self._at_batch(lease, own)
        return rate

    def _at_batch(self, lease: Lease, own: float) -> float:
        """A lease's rate at ``lease.batch``: each type's ``batch_rate`` on the lease's count, combined by the
        rate model where the lease spans types."""
        types: dict[str, int] = {}
        for g in lease.gpus:
            t = self.cluster.gpu_type_of[g]
            types[t] = types.get(t, 0) + 1
        k = len(lease.gpus)
        each = {t: batch_rate(self.table, lease.job_type, own, lease.batch, k, t) for t in types}
        if len(types) == 1 or self.rate_model == "sync":
            return min(each.values())
        return sum(n * each[t] / k for t, n in types.items())

    def _rate(self, lease: Lease) -> float:
        types: dict[str, int] = {}
        for g in lease.gpus:
            t = self.cluster.gpu_type_of[g]
            types[t] = types.get(t, 0) + 1
        k = len(lease.gpus)
        if len(types) == 1:
            (t,) = types
            if lease.partner_type:  # space sharing: the job's own rate next to its partner
                return self.table.pair_rates(lease.job_type, lease.partner_type, k, t)[0]
            # a HadarE copy may use k < W GPUs with no k entry: the table's rule for that
            return self.table.rate_on(lease.job_type, k, t)
        w = lease.scale_factor
        if k != w and self.table.has(lease.job_type, k):  # an elastic job on another count than it asked for
            w = k
        if self.rate_model == "sync":
            return min(self.table.get(lease.job_type, w, t) for t in types)
        return sum(n * self.table.get(lease.job_type, w, t) / w for t, n in types.items())

    def run_round(self, plan: RoundPlan) -> RoundReport:
        charge = self.charge_restarts
        if len({lease.job_id for lease in plan.leases}) == len(plan.leases):
            return self._run_alone(plan, charge)
        by_job: dict[int, list[Lease]] = {}
        for lease in plan.leases:
            by_job.setdefault(lease.job_id, []).append(lease)
        results: list[LeaseResult] = []
        losts: list[float] = []  # each result's restore time, in the results' order
        for leases in by_job.values():
            if len(leases) == 1:
                lost = leases[0].lost_s if charge else 0.0
                results.append(self._run_one(leases[0], plan, lost))
                losts.append(lost)
            else:
                lost_each = [self._lost(x) for x in leases]
                results.extend(self._run_copies(leases, plan, lost_each))
                losts.extend(lost_each)
        if charge:  # what a round too short for a restore leaves of it
            results = [replace(r, restore_left_s=lost - plan.duration_s) if lost > plan.duration_s else r
                       for r, lost in zip(results, losts, strict=True)]
        end = max((r.end_s for r in results), default=plan.start_s)
        return RoundReport(plan.start_s, end, tuple(results))

    def _run_alone(self, plan: RoundPlan, charge: bool) -> RoundReport:
        """``run_round`` where each job has one lease: ``_run_one`` lease by lease in the plan's order, a
        lease's restore (``lost_s``, when ``charge``) and what the round leaves of it inline."""
        cache, start_s, duration_s = self._cache, plan.start_s, plan.duration_s
        run0 = max(0.0, duration_s)  # a lease that loses no time: _run_one's figures with lost_s = 0
        start0 = start_s + min(0.0, duration_s)
        left0 = 0.0 - duration_s if charge and duration_s < 0.0 else 0.0
        results: list[LeaseResult] = []
        add, floor, build = results.append, math.floor, _result
        end = None  # the latest end (the first of equal ones, as max() picks)
        profiles = self._profiles
        for lease in plan.leases:  # the hot loop of a simulation: ``rate``'s cache read inline
            rate = cache.get((lease.job_type, lease.scale_factor, lease.gpus, lease.partner_type))
            if rate is None or lease.batch:
                rate = self._rate_of(lease)
            lost = lease.lost_s if charge else 0.0
            if lost == 0.0:
                run_s, start, left = run0, start0, left0
            else:
                run_s, start = max(0.0, duration_s - lost), start_s + min(lost, duration_s)
                left = lost - duration_s if lost > duration_s else 0.0
            if rate <= 0:
                done = start_s
                add(build(lease.job_id, lease.copy, lease.gpus, 0.0, done, False, {}, "", False, left, False))
            elif profiles and lease.job_id in profiles:
                credited, done = self._credited(lease, rate, run_s, start)
                add(build(lease.job_id, lease.copy, lease.gpus, credited, done, False, {}, "", False, left, False))
            else:
                steps = min(floor(rate * run_s), lease.max_steps)
                if steps <= 0:
                    steps = min(rate * run_s, lease.max_steps)
                done = start + steps / rate
                add(build(lease.job_id, lease.copy, lease.gpus, float(steps), done, False, {}, "", False, left, False))
            if end is None or done > end:
                end = done
        return RoundReport(start_s, start_s if end is None else end, tuple(results))

    def _lost(self, lease: Lease) -> float:
        """Seconds of the round the lease spends restoring (none when restarts are not charged)."""
        return lease.lost_s if self.charge_restarts else 0.0

    def _run_one(self, lease: Lease, plan: RoundPlan, lost_s: float = 0.0) -> LeaseResult:
        rate = self._rate_of(lease)
        if rate <= 0:
            return _result(lease.job_id, lease.copy, lease.gpus, 0.0, plan.start_s, False, {}, "", False, 0.0, False)
        run_s = max(0.0, plan.duration_s - lost_s)
        start = plan.start_s + min(lost_s, plan.duration_s)
        if lease.job_id in self._profiles:
            credited, end = self._credited(lease, rate, run_s, start)
            return _result(lease.job_id, lease.copy, lease.gpus, credited, end, False, {}, "", False, 0.0, False)
        steps = min(math.floor(rate * run_s), lease.max_steps)
        if steps <= 0:
            steps = min(rate * run_s, lease.max_steps)
        return _result(lease.job_id, lease.copy, lease.gpus, float(steps), start + steps / rate, False, {}, "", False,
                       0.0, False)

    def _credited(self, lease: Lease, rate: float, run_s: float, start: float) -> tuple[float, float]:
        """(reference steps credited, end time) of a profiled job's lease running ``run_s`` from ``start``
        at ``rate`` table steps/s: whole steps, as unprofiled leases make; stopped at ``max_steps``."""
        eff, total = self._profiles[lease.job_id]
        done = total - lease.max_steps
        steps = float(math.floor(rate * run_s))
        if steps <= 0:
            steps = rate * run_s
        batch = lease.batch or None
        credited = eff.credit(done, steps, total, batch)
        if credited >= lease.max_steps:
            credited, steps = lease.max_steps, eff.steps_for(done, lease.max_steps, total, batch)
        return credited, start + steps / rate

    def _run_copies(self, leases: list[Lease], plan: RoundPlan, lost: list[float]) -> list[LeaseResult]:
        """Forked copies of one job (HadarE) share its remaining steps.

        Each copy runs at its own rate times the fork efficiency eff(k) of its job's k copies (its
        credited steps are unforked-equivalent steps) after its restore (``lost``, s); if together
        they can do more than the job has left, all stop when the sum reaches it (the job tracker
        sees the job finish), at the time t where sum of rate x (t - restore) reaches the remaining steps.
        """
        model = self.fork_efficiency
        if isinstance(model, ForkModel):
            eff = self._model_factor(model, leases)
            lost = [x + model.merge_s for x in lost]
        else:
            eff = model.factor(leases[0].job_type, len(leases))
        if leases[0].job_id in self._profiles:  # r at the round's starting progress, each copy at the job's batch
            profile, total = self._profiles[leases[0].job_id]
            eff *= profile.gain((total - min(x.max_steps for x in leases)) / total)
        rates = [self.rate(lease) * eff for lease in leases]
        remaining = min(lease.max_steps for lease in leases)
        d = [min(x, plan.duration_s) for x in lost]
        full = [math.floor(r * (plan.duration_s - x)) for r, x in zip(rates, d, strict=True)]
        if sum(full) <= remaining:
            return [LeaseResult(lease.job_id, lease.copy, lease.gpus, float(n),
                                plan.start_s + x + (n / r if r > 0 else 0))
                    for lease, r, n, x in zip(leases, rates, full, d, strict=True)]
        t = _shared_finish(rates, d, remaining)
        return [LeaseResult(lease.job_id, lease.copy, lease.gpus, r * max(0.0, t - x),
                            plan.start_s + (max(t, x) if r > 0 else 0.0))
                for lease, r, x in zip(leases, rates, d, strict=True)]


    def _model_factor(self, model: ForkModel, leases: list[Lease]) -> float:
        """``ForkModel.factor`` of one job's copies at the round's starting progress (its profile's noise scale,
        else its family's; progress as a share of its total steps)."""
        job_id, remaining = leases[0].job_id, min(x.max_steps for x in leases)
        if job_id in self._profiles:
            profile, total = self._profiles[job_id]
            return model.factor(leases[0].job_type, len(leases), (total - remaining) / total, profile)
        total = self._totals.get(job_id, 0.0)
        fraction = (total - remaining) / total if total > 0 else 0.0
        return model.factor(leases[0].job_type, len(leases), fraction)


def _shared_finish(rates: list[float], delays: list[float], steps: float) -> float:
    """The time t (s) at which copies running at ``rates`` from ``delays`` on have made ``steps`` together."""
    if not any(delays):
        return steps / sum(rates)
    levels = sorted(set(delays))
    for i, level in enumerate(levels):
        on = [(r, x) for r, x in zip(rates, delays, strict=True) if x <= level]
        rate = sum(r for r, _ in on)
        if rate > 0:
            t = (steps + sum(r * x for r, x in on)) / rate
            if i + 1 == len(levels) or t <= levels[i + 1]:
                return t
    return max(levels)
