"""RayExecutor: runs a round's leases as real training on worker actors.

The Engine calls ``run_round(plan)`` exactly as it calls the simulated
executor. Per lease: give its workers a deadline (the round's end), let them
train, checkpoint and report; the round ends when the last lease ends.
Failures (a dead actor, an error, a lease past its deadline + grace) give
``LeaseResult(failed=True, steps=0)``: the job resumes from its last
checkpoint next round, and the ledger never counts work it could lose.

HadarE's forked jobs (several leases of one job in a round, one per node)
run as copies: each starts from the job's canonical checkpoint, trains on
a disjoint shard of every global batch for its share of the job's
remaining steps (in proportion to its expected rate, so the copies
together never exceed the job's sample budget) and writes its own
checkpoint; the job tracker (``aggregate.merge_copies``) then averages the
successful copies' weights, weighted by samples, into the canonical
checkpoint. A failed copy is left out of the average; the others count.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hadar.clock import Clock, elapsed_s
from hadar.errors import InputError
from hadar.model.cluster import Cluster
from hadar.model.plan import Lease, LeaseResult, RoundPlan, RoundReport
from hadar.model.throughput import ThroughputTable
from hadar.runtime import aggregate, checkpoint, workloads
from hadar.runtime.pool import WorkerPool
from hadar.runtime.tracker import ThroughputTracker
from hadar.runtime.worker import LeaseOutcome, LeaseSpec

log = logging.getLogger(__name__)


@dataclass(slots=True)
class JobProgress:
    """What the executor knows of one job: its checkpoint and model quality."""

    checkpoint: Path
    steps: float = 0.0  # table steps in its latest checkpoint
    metric: str = ""
    higher_is_better: bool = True
    initial: float | None = None
    final: float | None = None
    restores: int = 0
    failures: int = 0


@dataclass(slots=True)
class RoundStats:
    """Per-round overhead (seconds of wall clock)."""

    round: int
    leases: int
    dispatch_s: float = 0.0  # building specs + submitting (incl. process-group rendezvous)
    restore_s: float = 0.0  # the slowest lease's restore (load + rebuild)
    save_s: float = 0.0  # the slowest lease's checkpoint write
    failed: int = 0
    continued: int = 0  # leases that continued in memory (no restore)
    merge_s: float = 0.0  # the job tracker's averaging of forked copies (all jobs)
    forked_jobs: int = 0


@dataclass(frozen=True, slots=True)
class _Fork:
    """A copy's place among its job's copies this round."""

    copies: int
    shard_offset: int
    shards: int
    max_steps: float  # this copy's share of the job's remaining steps


@dataclass(slots=True)
class _Pending:
    lease: Lease
    refs: list[Any]
    gens: list[int]
    done_at: dict[int, float] = field(default_factory=dict)  # rank -> clock time
    error: str = ""
    fork: _Fork | None = None


class RayExecutor:
    """Executes round plans on a ``WorkerPool``.

    ``speed(job_type, k, gpu_type)`` is the emulated speed factor (1.0 on
    real GPUs). ``on_table`` receives the tracker's updated table after each
    round (the runtime refreshes the ledger with it).
    """

    def __init__(self, cluster: Cluster, pool: WorkerPool, clock: Clock, *, checkpoint_dir: Path,
                 speed: Callable[[str, int, str], float] | None = None, tracker: ThroughputTracker | None = None,
                 on_table: Callable[[ThroughputTable], None] | None = None,
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 on_dispatch: Callable[[int, RoundPlan], None] | None = None,
                 grace_s: float = 30.0, seed: int = 0, fork_optimizer: str = "largest") -> None:
        if fork_optimizer not in aggregate.OPTIMIZER_POLICIES:
            raise InputError(f"fork optimizer policy must be one of {', '.join(aggregate.OPTIMIZER_POLICIES)}, "
                             f"got {fork_optimizer!r}")
        self.fork_optimizer = fork_optimizer
        self.cluster, self.pool, self.clock = cluster, pool, clock
        self.checkpoint_dir = Path(checkpoint_dir)
        self.speed = speed or (lambda jt, k, t: 1.0)
        self.tracker, self.on_table = tracker, on_table
        self.on_event = on_event or (lambda e: None)
        self.on_dispatch = on_dispatch
        self.grace_s, self.seed = grace_s, seed
        self.jobs: dict[int, JobProgress] = {}
        self.rounds: list[RoundStats] = []
        self.run_id = uuid.uuid4().hex
        self.nodes: Any = None  # a node watcher (``runtime.nodes.NodeWatcher``) that cluster_view() asks

    def job(self, job_id: int, job_type: str) -> JobProgress:
        if job_id not in self.jobs:
            wl = workloads.get(job_type)
            self.jobs[job_id] = JobProgress(checkpoint.checkpoint_path(self.checkpoint_dir, job_id),
                                            metric=wl.metric, higher_is_better=wl.higher_is_better)
        return self.jobs[job_id]

    # ---- the round -------------------------------------------------------------------
    def run_round(self, plan: RoundPlan) -> RoundReport:
        stats = RoundStats(round=len(self.rounds), leases=len(plan.leases))
        self.rounds.append(stats)
        budget = max(0.5, plan.start_s + plan.duration_s - self.clock.now())
        t0 = elapsed_s()
        forks = self._forks(plan)
        pending = [self._dispatch(lease, budget, stats.round, forks.get(i)) for i, lease in enumerate(plan.leases)]
        stats.dispatch_s = elapsed_s(t0)
        if self.on_dispatch is not None:
            self.on_dispatch(stats.round, plan)
        self._wait(pending, budget + self.grace_s)
        results = [self._result(p, stats) for p in pending]
        if forks:
            t1 = elapsed_s()
            results = self._merge_forks(pending, results, stats)
            stats.merge_s = elapsed_s(t1)
        if self.tracker is not None and self.on_table is not None:
            self.on_table(self.tracker.table())
        end = max((r.end_s for r in results), default=plan.start_s)
        return RoundReport(plan.start_s, max(end, plan.start_s), tuple(results))

    def _forks(self, plan: RoundPlan) -> dict[int, _Fork]:
        """Lease index -> its place among its job's copies, for jobs with several leases this round.

        The job's remaining steps are split over its copies in proportion to their expected rates
        (the tracker's table), so together they never exceed the job's sample budget."""
        by_job: dict[int, list[int]] = {}
        for i, lease in enumerate(plan.leases):
            by_job.setdefault(lease.job_id, []).append(i)
        table = self.tracker.table() if self.tracker is not None else None
        out: dict[int, _Fork] = {}
        for idx in by_job.values():
            if len(idx) < 2:
                continue
            leases = [plan.leases[i] for i in sorted(idx, key=lambda i: plan.leases[i].copy)]
            rates = [self._expected_rate(table, le) for le in leases]
            shards = sum(len(le.gpus) for le in leases)
            offset = 0
            for le, r in zip(leases, rates):
                share = r / sum(rates) if sum(rates) > 0 else 1 / len(leases)
                out[plan.leases.index(le)] = _Fork(len(leases), offset, shards, le.max_steps * share)
                offset += len(le.gpus)
        return out

    def cluster_view(self) -> Cluster | None:
        """Node changes seen on the Ray cluster (None: none, or no node watcher set)."""
        view = self.nodes.poll() if self.nodes is not None else None
        if view is not None:
            self.cluster = view
        return view

    def estimate_rate(self, lease: Lease) -> float | None:
        """Steps/s the lease should make: the tracker's (measured, else prior) rate for its job type,
        GPU count and type; None for a lease spanning GPU types (no single rate is known)."""
        if len({self.cluster.gpu_type_of[g] for g in lease.gpus}) != 1:
            return None
        table = self.tracker.table() if self.tracker is not None else None
        rate = self._expected_rate(table, lease)
        return rate if rate > 0 else None

    def _expected_rate(self, table: ThroughputTable | None, lease: Lease) -> float:
        t = self.cluster.gpu_type_of[lease.gpus[0]]
        k = len(lease.gpus)
        if table is not None:
            try:
                return max(table.rate_on(lease.job_type, k, t), 0.0)
            except InputError:
                pass
        return self.speed(lease.job_type, k, t) * k

    def _dispatch(self, lease: Lease, budget: float, round_no: int, fork: _Fork | None = None) -> _Pending:
        import ray

        info = self.job(lease.job_id, lease.job_type)
        world = len(lease.gpus)
        actors = [self.pool.actor(g) for g in lease.gpus]
        gens = [self.pool.generation[g] for g in lease.gpus]
        speed = min(self.speed(lease.job_type, world, self.cluster.gpu_type_of[g]) for g in lease.gpus)
        store = None
        if world > 1:
            try:
                store = ray.get(actors[0].open_store.remote(), timeout=self.grace_s)
            except ray.exceptions.RayError as e:  # dead or stuck rank 0 (GetTimeoutError is one): fail the lease
                return _Pending(lease, [], gens, error=f"rendezvous failed: {type(e).__name__}: {e}", fork=fork)
        max_steps = fork.max_steps if fork is not None else lease.max_steps
        base = LeaseSpec(job_id=lease.job_id, job_type=lease.job_type, seed=self.seed * 100_003 + lease.job_id,
                         rank=0, world=world, max_iterations=max(1, math.ceil(max_steps / world - 1e-9)),
                         budget_s=budget, speed=speed, checkpoint=str(info.checkpoint), expect_steps=info.steps,
                         store=store, group=f"job{lease.job_id}-c{lease.copy}-r{round_no}/", timeout_s=self.grace_s,
                         run_id=self.run_id)
        if fork is not None:
            base = replace(base, copy=lease.copy, copies=fork.copies, restore_from=str(info.checkpoint),
                           checkpoint=str(aggregate.copy_path(info.checkpoint, lease.copy)),
                           shard_offset=fork.shard_offset, shards=fork.shards)
        refs = []
        for rank, actor in enumerate(actors):
            spec = base if rank == 0 else replace(base, rank=rank)
            refs.append(actor.run_lease.remote(spec))
        return _Pending(lease, refs, gens, fork=fork)

    def _wait(self, pending: list[_Pending], timeout_s: float) -> None:
        import ray

        owner = {ref: (p, rank) for p in pending for rank, ref in enumerate(p.refs)}
        left = list(owner)
        deadline = elapsed_s() + timeout_s
        while left:
            ready, left = ray.wait(left, num_returns=1, timeout=max(0.0, deadline - elapsed_s()))
            if not ready:
                break
            now = self.clock.now()
            for ref in ready:
                p, rank = owner[ref]
                p.done_at[rank] = now
        for ref in left:
            p, _ = owner[ref]
            p.error = p.error or f"no answer within {timeout_s:.0f} s (deadline + grace)"

    def _result(self, p: _Pending, stats: RoundStats) -> LeaseResult:
        import ray

        lease = p.lease
        outcomes: list[LeaseOutcome | None] = []
        for rank, ref in enumerate(p.refs):
            if rank not in p.done_at:
                outcomes.append(None)
                continue
            try:
                outcomes.append(ray.get(ref))
            except ray.exceptions.RayError as e:  # RayActorError (dead worker) or a task error
                outcomes.append(None)
                p.error = p.error or f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ok = bool(p.refs) and not p.error and all(o is not None and o.ok for o in outcomes)
        answered = len(p.done_at) == len(p.refs) and p.refs
        end = max(p.done_at.values()) if answered else self.clock.now()
        info = self.jobs[lease.job_id]
        if not ok:
            errors = [o.error for o in outcomes if o is not None and o.error]
            self._recover(p, outcomes)
            info.failures += 1
            stats.failed += 1
            why = p.error or "; ".join(errors) or "unknown"
            log.warning("lease of job %d on GPUs %s failed: %s", lease.job_id, list(lease.gpus), why)
            self.on_event({"t": end, "event": "lease_failed", "job": lease.job_id, "copy": lease.copy,
                           "gpus": list(lease.gpus), "round": stats.round, "error": why})
            return LeaseResult(lease.job_id, lease.copy, lease.gpus, 0.0, end, failed=True)
        head = outcomes[0]
        assert head is not None
        steps = float(head.iterations * len(lease.gpus))
        if p.fork is None:  # a forked job's progress and quality come from the tracker's merge
            info.steps = head.steps_total
            if info.metric in head.metrics:
                info.final = head.metrics[info.metric]
        info.restores += int(head.restored)
        info.initial = head.metrics.get("initial_" + info.metric, info.initial)
        stats.restore_s = max(stats.restore_s, max(o.restore_s for o in outcomes if o is not None))
        stats.save_s = max(stats.save_s, head.save_s)
        stats.continued += int(not head.restored and head.restore_s == 0.0)
        self._observe(lease, steps, head.train_s)
        self.on_event({"t": end, "event": "lease", "job": lease.job_id, "copy": lease.copy, "round": stats.round,
                       "gpus": list(lease.gpus), "iterations": head.iterations, "start_digest": head.start_digest,
                       "steps": steps, "progress_from": head.steps_start, "progress_to": head.steps_total,
                       "restored": head.restored, "train_s": head.train_s})
        metrics = {"train_s": head.train_s, "restore_s": head.restore_s, "save_s": head.save_s, "loss": head.loss,
                   "rate": steps / head.train_s if head.train_s > 0 else 0.0, "iterations": float(head.iterations)}
        return LeaseResult(lease.job_id, lease.copy, lease.gpus, steps, end, metrics=metrics)

    def _merge_forks(self, pending: list[_Pending], results: list[LeaseResult], stats: RoundStats) -> list[LeaseResult]:
        """The job tracker: average each forked job's successful copies into its canonical checkpoint.

        A copy that failed is left out (its result already says failed, 0 steps); if the merge itself
        fails, the job's copies of this round count as failed and the canonical checkpoint is untouched."""
        by_job: dict[int, list[int]] = {}
        for i, p in enumerate(pending):
            if p.fork is not None:
                by_job.setdefault(p.lease.job_id, []).append(i)
        out = list(results)
        for jid, idx in by_job.items():
            stats.forked_jobs += 1
            info = self.jobs[jid]
            paths = {pending[i].lease.copy: aggregate.copy_path(info.checkpoint, pending[i].lease.copy) for i in idx}
            ok = [i for i in idx if not results[i].failed and results[i].steps > 0]
            copies = [aggregate.CopyResult(pending[i].lease.copy, paths[pending[i].lease.copy], results[i].steps,
                                           int(results[i].metrics.get("iterations", 0))) for i in ok]
            start = checkpoint.load(info.checkpoint) if info.checkpoint.is_file() else None
            if start is not None and start.get("run_id") != self.run_id:
                start = None
            try:
                merged = aggregate.merge_copies(info.checkpoint, start, copies, optimizer=self.fork_optimizer)
            except (OSError, RuntimeError, KeyError, ValueError) as e:
                log.warning("job tracker: merging job %d's copies failed: %s", jid, e)
                for i in ok:
                    out[i] = replace(results[i], steps=0.0, failed=True)
                info.failures += 1
                stats.failed += len(ok)
                self.on_event({"t": self.clock.now(), "event": "merge_failed", "job": jid, "round": stats.round,
                               "error": f"{type(e).__name__}: {e}"})
                continue
            finally:
                for path in paths.values():
                    path.unlink(missing_ok=True)
            if merged is None:
                continue
            info.steps = merged.steps
            done = sum(c.steps for c in copies) >= pending[idx[0]].lease.max_steps - 1e-6
            if done:
                info.final = self._evaluate(pending[idx[0]].lease.job_type, jid, merged.state)
            batch = workloads.get(pending[idx[0]].lease.job_type).batch_size
            self.on_event({"t": self.clock.now(), "event": "merge", "job": jid, "round": stats.round,
                           "copies": list(merged.copies), "steps": [c.steps for c in copies],
                           "samples": [c.steps * batch for c in copies], "progress_to": merged.steps,
                           "optimizer": self.fork_optimizer, "final": info.final if done else None})
        return out

    def _evaluate(self, job_type: str, job_id: int, state: dict[str, Any]) -> float:
        """Held-out metric of a merged (averaged) model, computed here in the driver."""
        wl = workloads.get(job_type)
        ts = wl.new_state(self.seed * 100_003 + job_id)
        ts.model.load_state_dict(state["model"])
        value = wl.evaluate(ts.model, ts.test)
        state["final_metric"] = value
        checkpoint.save_atomic(state, self.jobs[job_id].checkpoint)
        return value

    def _recover(self, p: _Pending, outcomes: list[LeaseOutcome | None]) -> None:
        """Replace every worker of the lease that died or did not answer (same generation only).

        A lease that failed before dispatch (no rendezvous) blames its rank 0.
        """
        suspects = [0] if not p.refs else [r for r, o in enumerate(outcomes) if o is None]
        for rank in suspects:
            g = p.lease.gpus[rank]
            if self.pool.generation[g] == p.gens[rank]:
                self.pool.replace(g)

    def _observe(self, lease: Lease, steps: float, train_s: float) -> None:
        types = {self.cluster.gpu_type_of[g] for g in lease.gpus}
        if self.tracker is None or len(types) != 1:
            return
        (t,) = types
        if self.tracker.observe(lease.job_type, len(lease.gpus), t, steps, train_s):
            self.on_event({"t": self.clock.now(), "event": "measured", "job_type": lease.job_type,
                           "k": len(lease.gpus), "gpu_type": t, "rate": steps / train_s})
