"""RayExecutor: runs a round's leases as real training on worker actors.

The Engine calls ``run_round(plan)`` exactly as it calls the simulated executor. Every
lease runs the job's ``train(ctx)`` (``hadar.job``) on each of its GPUs' worker actors,
with a deadline at the round's end; the round ends when the last lease ends. Nothing here
knows any particular workload: a job is its ``TrainSpec`` (``register``).

Failures (a dead actor, the job's code raising, a lease past its deadline + grace) give
``LeaseResult(failed=True, steps=0)``: the job resumes from its last checkpoint next round,
until ``max_failures`` make it fatal (``bookkeeping``). HadarE's copies (several leases of
one job) are split and merged as ``forks`` says; when a forked job finishes, its function
runs once more on the merged state with no steps (``ctx.finished``: evaluate and report).
Profiling (``profile: true``): GPUs the round leaves idle run short measurement-only leases
of jobs on the types they have no measurement of. Pairs (space sharing): the second job of a
pair runs on its GPUs' second workers (``colocation``), at once with the first.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from hadar.clock import Clock, elapsed_s
from hadar.errors import InputError
from hadar.job.lease import LeaseOutcome, LeaseSpec, Mode
from hadar.model.cluster import Cluster
from hadar.model.job import Job
from hadar.model.plan import Lease, LeaseResult, NodeChange, RoundPlan, RoundReport
from hadar.model.throughput import ThroughputTable
from hadar.runtime import aggregate, checkpoint, colocation, forks, merges
from hadar.runtime.bookkeeping import Bookkeeper
from hadar.runtime.emulation import AVERAGE
from hadar.runtime.pool import WorkerPool
from hadar.runtime.profiling import pick_profiles
from hadar.runtime.progress import JobProgress, log_path
from hadar.runtime.records import ExecutorOptions, Pending, RoundStats, error_text
from hadar.runtime.tracker import ThroughputTracker

log = logging.getLogger(__name__)


class RayExecutor:
    """Executes round plans on a ``WorkerPool``.

    ``ratios`` gives each job's per-type speed ratios (its ``emulate_as`` row of Gavel's table):
    the tracker's prior, and, with ``dilation`` set (an emulated cluster), the speed factor each
    step is stretched to. Everything measured comes back in the round's report (the tracker's table,
    restart costs, committed checkpoints); ``admit`` hands the table with new jobs' rows to the engine.
    ``nodes``: a node watcher (``runtime.nodes.NodeWatcher``) that ``cluster_view()`` asks. ``run_id``
    marks the checkpoints this executor writes and the only ones it
    resumes from (a service restarting on its old checkpoints passes its stored id, and sets each
    job's ``JobProgress`` steps, iteration and saved_steps from its store)."""

    def __init__(self, cluster: Cluster, pool: WorkerPool, clock: Clock, **options: Any) -> None:
        """``options``: the fields of ``ExecutorOptions``."""
        o = ExecutorOptions(**options)
        self.cluster, self.pool, self.clock = cluster, pool, clock
        self.checkpoint_dir, self.log_dir = Path(o.checkpoint_dir), o.log_dir
        self.ratios, self.dilation = o.ratios, o.dilation
        self.mirrors: dict[str, str] = {}  # job type -> the Gavel row it behaves like
        self.tracker = ThroughputTracker(cluster.gpu_types, ratio=self.ratio, given=o.given, pair_ratio=self.pair_ratio)
        self.on_event, self.on_dispatch = o.on_event or (lambda e: None), o.on_dispatch
        self.book = Bookkeeper(lambda: self.cluster, self.tracker, self.on_event)
        self.grace_s, self.seed, self.fork_optimizer, self.profile_s = o.grace_s, o.seed, o.fork_optimizer, o.profile_s
        self.jobs: dict[int, JobProgress] = {}
        self.rounds: list[RoundStats] = []
        self.run_id = o.run_id or uuid.uuid4().hex  # checkpoints of another run id are never restored
        self._hosts: dict[tuple[int, int, int], str] = {}  # (GPU, slot, generation) -> the worker's node address
        self._slots: dict[int, tuple[tuple[int, ...], int]] = {}  # job -> (GPUs, worker slot) last round
        self.nodes = o.nodes

    # ---- jobs ---------------------------------------------------------------------------
    def register(self, job: Job) -> JobProgress:
        """Know ``job`` (resolved: it has a ``TrainSpec``) before it arrives: its row joins the table."""
        if job.train is None or not job.train.entrypoint:
            raise InputError(f"job {job.job_id} ({job.job_type}) has no entrypoint: resolve it first")
        self.mirrors.setdefault(job.job_type, job.train.emulate_as or AVERAGE)
        self.tracker.add(job.job_type, job.scale_factor)
        info = JobProgress(job, job.train, checkpoint.checkpoint_path(self.checkpoint_dir, job.job_id),
                           log_path(self.log_dir, job.job_id))
        self.jobs[job.job_id] = info
        return info

    def admit(self, jobs: list[Job]) -> ThroughputTable:
        """Jobs about to join the run (each registered unless it is already): the table with their rows."""
        for job in jobs:
            if job.job_id not in self.jobs:
                self.register(job)
        return self.tracker.table()

    def ratio(self, job_type: str, k: int, gpu_type: str) -> float:
        """The job type's speed on ``gpu_type`` relative to its fastest type (Gavel's row it behaves like)."""
        return self.ratios(self.mirrors.get(job_type, AVERAGE), k, gpu_type)

    def pair_ratio(self, job_type: str, k: int, partner: str, gpu_type: str) -> float:
        """The job type's co-located rate next to ``partner`` over its rate alone (Gavel's rows they behave like)."""
        return self.ratios.pair(self.mirrors.get(job_type, AVERAGE), k, self.mirrors.get(partner, AVERAGE), gpu_type)

    def speed(self, lease: Lease, gpu: int) -> float:
        """The emulated speed factor a step of ``lease`` is stretched to on ``gpu`` (1.0 on real GPUs); a job
        sharing the GPU with a partner is slowed further by its co-location ratio."""
        if self.dilation is None:
            return 1.0
        k, t = len(lease.gpus), self.cluster.gpu_type_of[gpu]
        shared = min(1.0, self.pair_ratio(lease.job_type, k, lease.partner_type, t)) if lease.partner_type else 1.0
        return self.ratio(lease.job_type, k, t) * shared / self.dilation

    # ---- the round ----------------------------------------------------------------------------
    def run_round(self, plan: RoundPlan) -> RoundReport:
        stats = RoundStats(round=len(self.rounds), leases=len(plan.leases))
        self.rounds.append(stats)
        budget = max(0.5, plan.start_s + plan.duration_s - self.clock.now())
        wall = time.time()  # every lease's deadline, fixed now: one dispatched late still ends with the round
        t0 = elapsed_s()
        split = forks.split(plan, self._expected_rate)
        stats.paired = sum(1 for lease in plan.leases if lease.partner_id >= 0)
        if stats.paired and not self.pool.partners:
            self.pool.start_partners()  # the run's first pair: every GPU's second worker starts now
        slots = colocation.slots(plan.leases, self._slots)
        self._slots = {lease.job_id: (lease.gpus, s) for lease, s in zip(plan.leases, slots, strict=True)}
        pending = [self._dispatch(lease, budget, stats.round, fork=split.get(i), slot=slots[i], wall=wall)
                   for i, lease in enumerate(plan.leases)]
        profiles = [self._dispatch(lease, min(budget, self.profile_s), stats.round, mode="profile", wall=wall)
                    for lease in pick_profiles(plan, self.jobs, self.tracker, self.cluster)]
        stats.dispatch_s, stats.profiles = elapsed_s(t0), len(profiles)
        if self.on_dispatch is not None:
            self.on_dispatch(stats.round, plan)
        self._wait(pending + profiles, budget + self.grace_s)
        outcomes = [self._outcomes(p) for p in pending + profiles]  # every answer first: a worker replaced by
        results = [self._collect(p, o, stats) for p, o in zip(pending, outcomes, strict=False)]  # _recover ends
        for p, o in zip(profiles, outcomes[len(pending):], strict=True):  # its GPU's second worker too
            self._collect_profile(p, o, stats.round)
        if split:
            t1 = elapsed_s()
            results = self._merge(pending, results, stats)
            stats.merge_s = elapsed_s(t1)
        end = max((r.end_s for r in results), default=plan.start_s)
        jobs = sorted(self.jobs.items())
        return RoundReport(plan.start_s, max(end, plan.start_s), tuple(results), table=self.tracker.table(),
                           restart_s=tuple((jid, s) for jid, q in jobs if (s := q.restart_s) is not None),
                           saved_steps=tuple((jid, q.saved_steps) for jid, q in jobs if q.saved_steps is not None),
                           noise_scales=merges.noise_scales({jid: q.last for jid, q in jobs}),
                           merge_gains=self.book.merges.drain())

    def cluster_view(self) -> NodeChange | None:
        """Node changes seen on the Ray cluster (None: none, or no node watcher set). A node of a GPU type
        the cluster did not have adds that type to the tracker's table (estimated until measured)."""
        view = self.nodes.poll() if self.nodes is not None else None
        if view is None:
            return None
        self.cluster = view
        return NodeChange(view, self.tracker.table() if self.tracker.add_types(view.gpu_types) else None)

    def estimate_rate(self, lease: Lease) -> float | None:
        """Steps/s the lease should make, once its job type has a measured (or given) rate somewhere;
        None before (a guess would only cut rounds at the wrong time) or across GPU types."""
        if len({self.cluster.gpu_type_of[g] for g in lease.gpus}) != 1 or not self.tracker.anchored(lease.job_type):
            return None
        rate = self._expected_rate(lease)
        return rate if rate > 0 else None

    def _expected_rate(self, lease: Lease) -> float:
        t = self.cluster.gpu_type_of[lease.gpus[0]]
        if lease.partner_type:
            return self.tracker.table().pair_rates(lease.job_type, lease.partner_type, len(lease.gpus), t)[0]
        try:
            return max(self.tracker.table().rate_on(lease.job_type, len(lease.gpus), t), 0.0)
        except InputError:
            return self.ratio(lease.job_type, len(lease.gpus), t) * len(lease.gpus)

    # ---- dispatch ---------------------------------------------------------------------------------
    def _dispatch(self, lease: Lease, budget: float, round_no: int, *, fork: forks.Fork | None = None,
                  mode: Mode = "train", slot: int = 0, wall: float | None = None) -> Pending:
        """The lease sent to its GPUs' workers, each to stop at wall-clock time ``wall + budget`` (the
        round's end; ``wall`` None: now), however late the call reaches it (a rendezvous before it, a
        loaded machine)."""
        wall = time.time() if wall is None else wall
        info = self.jobs[lease.job_id]
        try:
            actors = [self.pool.actor(g, slot) for g in lease.gpus]
        except Exception as e:  # a GPU's second worker could not start (its node is gone)
            return Pending(lease, [], [self.pool.gen(g, slot) for g in lease.gpus], mode, fork,
                            error=f"starting a second worker failed: {error_text(e)}", slot=slot)
        gens = [self.pool.gen(g, slot) for g in lease.gpus]
        spec = self._spec(info, lease, budget, round_no, fork, mode)
        if len(lease.gpus) > 1:
            try:
                spec = replace(spec, rendezvous=self._open_store(lease, actors, slot))
            except Exception as e:
                return Pending(lease, [], gens, mode, fork, error=f"rendezvous failed: {error_text(e)}", slot=slot)
        refs = [actor.run_lease.remote(replace(spec, rank=rank), wall + budget) for rank, actor in enumerate(actors)]
        return Pending(lease, refs, gens, mode, fork, slot=slot)

    def _spec(self, info: JobProgress, lease: Lease, budget: float, round_no: int, fork: forks.Fork | None,
              mode: Mode) -> LeaseSpec:
        world = len(lease.gpus)
        s = info.spec
        max_steps = fork.max_steps if fork is not None else lease.max_steps
        spec = LeaseSpec(job_id=lease.job_id, entrypoint=s.entrypoint, rank=0, world=world,
                         max_iterations=max(1, math.ceil(max_steps / world - 1e-9)) if mode != "finalize" else 0,
                         budget_s=budget, checkpoint=str(checkpoint.pending_path(info.checkpoint)),
                         restore_from=str(info.checkpoint), name=s.name, args_json=s.args_json,
                         search_path=s.search_path, seed=self.seed * 100_003 + lease.job_id,
                         total_steps=float(info.job.total_steps), start_iteration=info.iteration,
                         steps_done=info.steps, resume_steps=info.saved_steps, run_id=self.run_id,
                         speed=min(self.speed(lease, g) for g in lease.gpus),
                         group=f"job{lease.job_id}-c{lease.copy}-r{round_no}-{mode}/", timeout_s=self.grace_s,
                         mode=mode, digest=fork is not None, target_metric=s.quality, target=s.target,
                         **merges.lease_fields(info.job, lease, merges.measured_noise(info.last), info.steps))
        if fork is not None:
            spec = replace(spec, copy=lease.copy, copies=fork.copies,
                           checkpoint=str(aggregate.copy_path(info.checkpoint, lease.copy)),
                           shard_offset=fork.shard_offset, shards=fork.shards)
        return spec

    def _open_store(self, lease: Lease, actors: list[Any], slot: int = 0) -> tuple[str, int]:
        """Rank 0's rendezvous store, on loopback when every rank's worker is on its machine, else its address."""
        import ray

        keys = [(g, slot, self.pool.gen(g, slot)) for g in lease.gpus]
        missing = [i for i, key in enumerate(keys) if key not in self._hosts]
        if missing:
            infos = ray.get([actors[i].info.remote() for i in missing], timeout=self.grace_s)
            for i, rec in zip(missing, infos, strict=True):
                self._hosts[keys[i]] = str(rec["ip"])
        hosts = {self._hosts[key] for key in keys}
        host = "127.0.0.1" if len(hosts) == 1 else self._hosts[keys[0]]
        addr, port = ray.get(actors[0].open_store.remote(host), timeout=self.grace_s)
        self.on_event({"t": self.clock.now(), "event": "rendezvous", "job": lease.job_id, "copy": lease.copy,
                       "host": addr, "port": port})
        return str(addr), int(port)

    def _wait(self, pending: list[Pending], timeout_s: float) -> None:
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
            p.error = p.error or (f"no answer within {timeout_s:.0f} s (the lease's deadline + {self.grace_s:.0f} s "
                                  "grace)")

    # ---- results ------------------------------------------------------------------------------------
    def _outcomes(self, p: Pending) -> list[LeaseOutcome | None]:
        """Every rank's outcome (None: it died or did not answer); a Ray error becomes ``p.error``."""
        import ray

        outcomes: list[LeaseOutcome | None] = []
        for rank, ref in enumerate(p.refs):
            if rank not in p.done_at:
                outcomes.append(None)
                continue
            try:
                outcomes.append(ray.get(ref))
            except ray.exceptions.RayError as e:  # RayActorError (dead worker) or a task error
                outcomes.append(None)
                p.error = p.error or f"the worker of GPU {p.lease.gpus[rank]} failed: {error_text(e)}"
        return outcomes

    def _collect(self, p: Pending, outcomes: list[LeaseOutcome | None], stats: RoundStats) -> LeaseResult:
        lease, info = p.lease, self.jobs[p.lease.job_id]
        answered = bool(p.refs) and len(p.done_at) == len(p.refs)
        end = max(p.done_at.values()) if answered else self.clock.now()
        if p.error or not all(o is not None and o.ok for o in outcomes):
            self._recover(p, outcomes)
            checkpoint.pending_path(info.checkpoint).unlink(missing_ok=True)  # never commit a failed lease's state
            stats.failed += 1
            bad = next((o for o in outcomes if o is not None and not o.ok), None)
            why = p.error or (bad.error if bad is not None else "unknown")
            trace = bad.traceback if bad is not None and not p.error else ""
            output = "\n".join(o.output for o in outcomes if o is not None and o.output)
            return self.book.failure(info, lease, stats.round, end, why, trace, output)
        head = outcomes[0]
        assert head is not None
        if p.fork is None and head.saved_steps is not None:
            try:
                self._commit(info)
            except OSError as e:
                why = f"committing the checkpoint failed: {error_text(e)}"
                return self.book.failure(info, lease, stats.round, end, why + " (on several nodes, --checkpoint-dir "
                                         "must be storage every node sees)")
        stats.restore_s = max(stats.restore_s, *(o.restore_s for o in outcomes if o is not None))
        stats.save_s = max(stats.save_s, head.save_s)
        stats.continued += int(head.continued)
        limit = p.fork.max_steps if p.fork is not None else lease.max_steps
        return self.book.success(info, lease, head, stats.round, end, forked=p.fork is not None, limit=limit)

    def _commit(self, info: JobProgress) -> None:
        """The lease succeeded: what it saved becomes the job's checkpoint."""
        checkpoint.pending_path(info.checkpoint).replace(info.checkpoint)

    def _collect_profile(self, p: Pending, outcomes: list[LeaseOutcome | None], round_no: int) -> None:
        info = self.jobs[p.lease.job_id]
        head = outcomes[0] if outcomes else None
        if not p.error and head is not None and all(o is not None and o.ok for o in outcomes):
            self.book.observe(p.lease, float(head.iterations * len(p.lease.gpus)), head.train_s, self.clock.now(),
                              profile=True)
            return
        self._recover(p, outcomes)
        bad = next((o for o in outcomes if o is not None and not o.ok), None)
        why = p.error or (bad.error if bad is not None else "unknown")
        info.profile_off = True  # the job's own leases will meet the same error and count it
        info.write_log(f"round {round_no}: profiling lease on GPUs {list(p.lease.gpus)} failed; no more profiling",
                       (bad.traceback if bad is not None and bad.traceback else why))
        self.on_event({"t": self.clock.now(), "event": "profile_failed", "job": p.lease.job_id, "error": why})

    def _recover(self, p: Pending, outcomes: list[LeaseOutcome | None]) -> None:
        """Replace every worker of the lease that died or did not answer (same generation only).

        A lease that failed before dispatch (no rendezvous) blames its rank 0."""
        suspects = [0] if not p.refs else [r for r, o in enumerate(outcomes) if o is None]
        for rank in suspects:
            g = p.lease.gpus[rank]
            if self.pool.gen(g, p.slot) == p.gens[rank] and (p.slot == 0 or g in self.pool.partners):
                self.pool.replace(g, p.slot)

    # ---- HadarE's copies ----------------------------------------------------------------------------------
    def _merge(self, pending: list[Pending], results: list[LeaseResult], stats: RoundStats) -> list[LeaseResult]:
        """The job tracker: average each forked job's copies that saved into its canonical checkpoint.

        A copy that failed is left out (its result already says failed, 0 steps); if the merge itself
        fails, the job's copies of this round count as failed and the canonical checkpoint is untouched."""
        by_job: dict[int, list[int]] = {}
        for i, p in enumerate(pending):
            if p.fork is not None:
                by_job.setdefault(p.lease.job_id, []).append(i)
        out = list(results)
        for jid, idx in by_job.items():
            stats.forked_jobs += 1
            ok = [i for i in idx if not results[i].failed and results[i].steps > 0]
            try:
                self._merge_job(jid, [pending[i] for i in ok], [results[i] for i in ok], stats.round)
            except (OSError, RuntimeError, KeyError, ValueError, TypeError) as e:
                why = f"merging the copies' checkpoints failed: {error_text(e)}"
                for i in ok:
                    out[i] = self.book.failure(self.jobs[jid], pending[i].lease, stats.round, self.clock.now(), why)
                stats.failed += len(ok)
            finally:
                for i in idx:
                    aggregate.copy_path(self.jobs[jid].checkpoint, pending[i].lease.copy).unlink(missing_ok=True)
        return out

    def _merge_job(self, jid: int, done: list[Pending], results: list[LeaseResult], round_no: int) -> None:
        info = self.jobs[jid]
        if not done:
            return
        copies = [aggregate.CopyResult(p.lease.copy, aggregate.copy_path(info.checkpoint, p.lease.copy), r.steps,
                                       int(r.metrics.get("iterations", 0))) for p, r in zip(done, results, strict=True)]
        saved = [c for c in copies if c.path.is_file()]
        merged = aggregate.merge_copies(info.checkpoint, info.steps, info.iteration, saved,
                                        optimizer=self.fork_optimizer)
        for r in results:
            info.count(r)
        info.iteration += max(c.iterations for c in copies)
        if merged is not None:
            info.saved_steps = info.steps
        finished = info.steps >= info.job.total_steps - 1e-6
        if merged is not None:
            self.book.merges.merged(jid, round_no, self.clock.now())
        if finished and merged is not None:
            self._finalize(info, done[0].lease, round_no)
        self.on_event({"t": self.clock.now(), "event": "merge", "job": jid, "round": round_no,
                       "copies": list(merged.copies) if merged else [], "steps": [c.steps for c in copies],
                       "progress_to": info.steps, "optimizer": self.fork_optimizer,
                       "final": info.final if finished else None})

    def _finalize(self, info: JobProgress, lease: Lease, round_no: int) -> None:
        """A forked job just finished: run its function once on the merged state, with no steps, to report."""
        one = replace(lease, gpus=lease.gpus[:1], copy=0)
        p = self._dispatch(one, self.grace_s, round_no, mode="finalize")
        self._wait([p], 2 * self.grace_s)
        outcomes = self._outcomes(p)
        head = outcomes[0] if outcomes else None
        if p.error or head is None or not head.ok:
            self._recover(p, outcomes)
            self.book.warn(info, f"evaluating the merged model failed: {p.error or (head.error if head else '')}")
            return
        self.book.metrics(info, head)
        if head.saved_steps is not None:
            try:
                self._commit(info)
            except OSError as e:
                self.book.warn(info, f"committing the merged model's final checkpoint failed: {error_text(e)}")
