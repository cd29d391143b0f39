"""SlurmExecutor: hadar decides, Slurm runs the jobs.

Each round, every lease of the plan becomes one Slurm batch job (``hadar.slurm.script``), submitted
held (``sbatch --hold``) and pinned to its node (``--nodelist``, ``--gres=gpu:W``: Slurm picks which of
the node's GPUs, hadar picks the node and so the GPU type; a gang's nodes and tasks: ``hadar.slurm.gang``,
its ranks started by ``srun``: ``hadar.slurm.lease``); once the whole round is submitted, every
job is released at once (``scontrol release``). The lease runs the job's ``train(ctx)`` until the round's
end (a wall-clock deadline in its spec) and saves its checkpoint; one that is still running at the
deadline is told to stop (``scancel --signal=USR1 --batch``: it saves and exits), and one still there
``grace_s`` later is cancelled: a failed lease. So preempting a job means its next lease is elsewhere or
never: no Slurm job outlives its round.

State comes from ``squeue --json`` (polled) and each lease's ``result.json``; a job Slurm ended as
FAILED, CANCELLED, NODE_FAIL, TIMEOUT, ... or that wrote no result is a failed lease (the job resumes
from its last committed checkpoint). ``cluster_view`` reads ``sinfo --json``: a node DOWN or DRAIN, or
back up, is a node change. The bookkeeping of progress, checkpoints, measured rates, failures and
HadarE's copies is the Ray executor's (this class runs its rounds through the same steps); only the
dispatch, the wait and the answers differ. Ray is never imported. Not supported (yet): space sharing
(a lease with a partner fails with a reason) and a gang whose nodes hold different GPU counts.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import hadar
from hadar.clock import Clock, elapsed_s
from hadar.job.lease import LeaseOutcome, Mode
from hadar.model.cluster import Cluster
from hadar.model.plan import Lease, NodeChange, RoundPlan, RoundReport
from hadar.model.throughput import ThroughputTable
from hadar.runtime import emulation, forks
from hadar.runtime.emulation import SpeedRatios
from hadar.runtime.executor import RayExecutor
from hadar.runtime.records import Pending, RoundStats
from hadar.slurm import gang, script
from hadar.slurm.cluster import read_nodes, to_cluster
from hadar.slurm.commands import JobState, Slurm, SlurmError

log = logging.getLogger(__name__)
POLL_S = 0.1  # how often squeue is asked once a lease of the round has answered or its end is near
SLOW_POLL_S = 1.0  # how often before that (a lease that fails early is seen within this; its result file sooner)
CONTROLLER_WAIT_S = 120.0  # how long a Slurm command waits for a controller that cannot be contacted
STARTUP_ALPHA = 0.5  # weight of the newest lease in the moving average of a job type's startup
STOP_AFTER_S = 5.0  # a lease still running this long after its deadline is told to stop (SIGUSR1)
TAG = "hadar"  # job names: hadar-<run>-j<job>-c<copy>-r<round>; comment: hadar:<run>:<job>:<copy>:<round>


@dataclass(slots=True)
class Submitted:
    """A lease's Slurm job: its id and folder, and how its end was handled."""

    job_id: int
    folder: Path
    submitted: float = 0.0  # wall-clock time of the submission
    released: bool = False
    signalled: bool = False
    cancelled: bool = False
    state: JobState | None = None
    gang: bool = False  # an srun of several tasks: a stop is signalled to its tasks, not the batch script


@dataclass(frozen=True, slots=True)
class Request:
    """One lease's sbatch: its script and options, its folder and when it was written."""

    script: Path
    options: list[str]
    folder: Path
    submitted: float


@dataclass(frozen=True, slots=True)
class SlurmOptions:
    """A ``SlurmExecutor``'s settings. ``work_dir``: where leases' folders and checkpoints go (every node must see
    it); ``partition``: where hadar's jobs go (None: every partition's GPU nodes); ``device``: ``auto`` (CUDA
    where the lease finds it, else the CPU), ``cpu`` or ``cuda``; ``dilation``: set for emulated GPUs (a lease on
    the CPU stretches its steps by its type's speed factor / dilation, as the Ray demo does; one on CUDA never;
    ``"auto"``: the cluster's GPUs over this machine's cores, once sinfo has said how many; None: no stretch);
    ``given``: a throughput table given up front; the grace after a lease's deadline, the seed, the run id its
    checkpoints and Slurm jobs carry (None: a new one), the fork optimizer policy and ``round_base``, added to
    round numbers in lease names (a restarted service continues its numbering)."""

    work_dir: Path
    partition: str | None = None
    device: str = "auto"
    dilation: float | Literal["auto"] | None = None
    given: ThroughputTable | None = None
    grace_s: float = 30.0
    seed: int = 0
    run_id: str | None = None
    fork_optimizer: str = "largest"
    round_base: int = 0


class SlurmExecutor(RayExecutor):
    """Executes round plans as Slurm jobs (see the module docstring), with ``options`` (``SlurmOptions``).

    ``slurm``: the commands; ``cluster``: None to read it from sinfo; ``ratios``: None for the bundled table's.
    ``on_submitted(round, [(lease, Slurm id), ...])`` is called once a round's jobs are submitted, before
    their release; ``on_dispatch(round, plan)`` once the round's leases are dispatched."""

    def __init__(self, slurm: Slurm, clock: Clock, options: SlurmOptions, *, cluster: Cluster | None = None,
                 ratios: SpeedRatios | None = None, on_event: Callable[[dict[str, Any]], None] | None = None,
                 on_submitted: Callable[[int, list[tuple[Lease, int]]], None] | None = None,
                 on_dispatch: Callable[[int, RoundPlan], None] | None = None) -> None:
        o = options
        self.slurm, self.partition = slurm, o.partition
        self._partition_of: dict[str, str] = {}  # node -> the partition its leases go to
        self.members: dict[str, tuple[str, ...]] = {}  # node -> its partitions
        cluster = cluster if cluster is not None else self.read_cluster()
        if ratios is None:
            ratios = SpeedRatios(ThroughputTable.load(), cluster.gpu_types)
        work_dir = Path(o.work_dir).resolve()
        dilation = emulation.dilation(cluster.num_gpus, os.cpu_count() or 1) if o.dilation == "auto" else o.dilation
        super().__init__(cluster, None, clock, checkpoint_dir=work_dir / "checkpoints", ratios=ratios,  # type: ignore[arg-type]
                         dilation=dilation, given=o.given, log_dir=work_dir / "logs",
                         on_event=on_event, on_dispatch=on_dispatch, grace_s=o.grace_s, seed=o.seed,
                         fork_optimizer=o.fork_optimizer, run_id=o.run_id)
        self.work_dir, self.device, self.on_submitted = work_dir, o.device, on_submitted
        self.slurm = slurm.waiting(CONTROLLER_WAIT_S)  # from now on, a restarting controller is waited for
        for sub in ("checkpoints", "logs", "leases"):
            (work_dir / sub).mkdir(parents=True, exist_ok=True)
        self._jobs: dict[int, Submitted] = {}  # id(Pending) -> its Slurm job
        self.records: list[dict[str, Any]] = []  # one per lease: job, copy, round, Slurm id, node, GPU type, state
        self.startup: dict[tuple[str, int], float] = {}  # (job type, GPUs) -> mean s from submission to first step
        self.path = (str(Path(hadar.__file__).resolve().parents[1]),)  # where the lease imports hadar from
        self.round_base = o.round_base  # added to round numbers in lease names

    def read_cluster(self) -> Cluster:
        """The partition's GPU nodes from sinfo (``SlurmError`` if Slurm cannot be asked or has none)."""
        nodes = read_nodes(self.slurm.nodes(), self.partition)
        self.members = {n.name: n.partitions for n in nodes}  # node -> its partitions
        for n in nodes:
            self._partition_of.setdefault(n.name, self.partition or (n.partitions[0] if n.partitions else ""))
        return to_cluster(nodes)

    # ---- the round ----------------------------------------------------------------------------
    def run_round(self, plan: RoundPlan) -> RoundReport:
        stats = RoundStats(round=len(self.rounds), leases=len(plan.leases))
        self.rounds.append(stats)
        budget = max(0.5, plan.start_s + plan.duration_s - self.clock.now())
        wall = time.time()  # every lease's deadline, fixed now: one submitted late still ends with the round
        t0 = elapsed_s()
        split = forks.split(plan, self._expected_rate)
        pending = [self._dispatch(lease, budget, stats.round, fork=split.get(i), wall=wall)
                   for i, lease in enumerate(plan.leases)]
        self._release(pending, stats.round)
        stats.dispatch_s = elapsed_s(t0)
        if self.on_dispatch is not None:
            self.on_dispatch(stats.round, plan)
        self._wait(pending, budget + self.grace_s)
        outcomes = [self._outcomes(p) for p in pending]
        results = [self._collect(p, o, stats) for p, o in zip(pending, outcomes, strict=True)]
        if split:
            t1 = elapsed_s()
            results = self._merge(pending, results, stats)
            stats.merge_s = elapsed_s(t1)
        end = max((r.end_s for r in results), default=plan.start_s)
        jobs = sorted(self.jobs.items())
        # measured rates and committed checkpoints; no restart costs: the estimates hold each lease's start
        return RoundReport(plan.start_s, max(end, plan.start_s), tuple(results), table=self.tracker.table(),
                           saved_steps=tuple((jid, q.saved_steps) for jid, q in jobs if q.saved_steps is not None))

    def cluster_view(self) -> NodeChange | None:
        """The cluster again when a node went down or drained, came back, or joined (None: no change)."""
        try:
            view = self.read_cluster()
        except SlurmError as e:  # a controller restarting: the cluster is as it was
            log.warning("reading the cluster from sinfo failed: %s", e)
            return None
        known = {n.name for n in self.cluster.nodes}
        now = self.cluster
        for node in view.nodes:
            if node.name not in known:
                now = now.with_node(node)
        down = frozenset(n for n in view.down) | (known - {n.name for n in view.nodes})
        if down != now.down:
            now = now.with_down(down)
        if now == self.cluster:
            return None
        self.cluster = now
        return NodeChange(now, self.tracker.table() if self.tracker.add_types(now.gpu_types) else None)

    # ---- dispatch ---------------------------------------------------------------------------------
    def _dispatch(self, lease: Lease, budget: float, round_no: int, *, fork: forks.Fork | None = None,
                  mode: Mode = "train", slot: int = 0, wall: float | None = None) -> Pending:
        p, request = self._prepare(lease, budget, round_no, fork=fork, mode=mode, wall=wall)
        self._submit(p, request)
        return p

    def _prepare(self, lease: Lease, budget: float, round_no: int, *, fork: forks.Fork | None = None,
                 mode: Mode = "train", wall: float | None = None) -> tuple[Pending, Request | None]:
        """The lease's folder, spec and batch script written, and its sbatch request (None: it cannot run);
        its deadline is wall-clock ``wall + budget`` (``wall`` None: now)."""
        info = self.jobs[lease.job_id]
        p = Pending(lease, [], [0] * len(lease.gpus), mode, fork)
        if lease.partner_id >= 0:
            p.error = "space sharing (two jobs on one GPU) is not supported on Slurm"
            return p, None
        layout = gang.layout(self.cluster, lease.gpus)
        if isinstance(layout, str):
            p.error = layout
            return p, None
        spec = self._spec(info, lease, budget, round_no, fork, mode)
        round_no += self.round_base
        tag = f"{self.run_id[:8]}-j{lease.job_id}-c{lease.copy}-r{round_no}"
        folder = self.work_dir / "leases" / f"{tag}-{mode}"
        deadline = (time.time() if wall is None else wall) + budget
        path = script.write_lease(folder, spec, deadline, self.device, path=(*self.path, *spec.search_path))
        minutes = max(1, math.ceil((budget + 3 * self.grace_s) / 60))
        options = ["--hold", f"--job-name={TAG}-{tag}",
                   f"--comment={TAG}:{self.run_id}:{lease.job_id}:{lease.copy}:{round_no}",
                   *layout.options(), f"--time={minutes}", "--no-requeue", f"--chdir={folder}",
                   f"--output={folder / script.LOG}", "--open-mode=append"]
        partition = gang.partition(layout.nodes, self._partition_of, self.members)
        if partition:
            options.append(f"--partition={partition}")
        return p, Request(path, options, folder, deadline - budget)

    def _submit(self, p: Pending, request: Request | None) -> None:
        """sbatch the request (none: the lease cannot run): ``p`` gets its Slurm job, or its error."""
        if request is None:
            return
        try:
            job_id = self.slurm.submit(request.script, request.options)
        except SlurmError as e:
            p.error = f"sbatch failed: {e}"
            return
        p.refs = [job_id]
        self._jobs[id(p)] = Submitted(job_id, request.folder, request.submitted, gang=len(p.lease.gpus) > 1)

    def _release(self, pending: list[Pending], round_no: int | None = None) -> None:
        """Release the submitted, held jobs of ``pending`` at once (``on_submitted`` first, for a round)."""
        held = [p for p in pending if p.refs and not self._jobs[id(p)].released]
        for p in held:
            self._jobs[id(p)].released = True
        if self.on_submitted is not None and round_no is not None:
            self.on_submitted(round_no, [(p.lease, p.refs[0]) for p in held])
        ids = sorted(p.refs[0] for p in held)
        try:
            self.slurm.release(ids)
        except SlurmError as e:
            if "invalid job id" not in str(e).lower() and "already" not in str(e).lower():
                raise  # (a job the callback cancelled cannot be released: it has already ended)
            for job_id in ids:  # one by one: the ones still held start
                try:
                    self.slurm.release([job_id])
                except SlurmError as e1:
                    log.debug("release of %d: %s", job_id, e1)

    # ---- waiting ------------------------------------------------------------------------------------
    def _wait(self, pending: list[Pending], timeout_s: float) -> None:
        """Until every lease's Slurm job has ended. A lease stops at its deadline (``timeout_s - grace_s``,
        the round's end) by itself; one still running ``STOP_AFTER_S`` later is told to stop (USR1: it saves
        and exits after its current step), and one still there at ``timeout_s`` is cancelled."""
        self._release(pending)  # (a lease dispatched outside a round: the finalizing one of a forked job)
        subs = {p.refs[0]: (p, self._jobs[id(p)]) for p in pending if p.refs}
        start = elapsed_s()
        stop_at = start + max(0.0, timeout_s - self.grace_s) + min(STOP_AFTER_S, self.grace_s / 2)
        kill_at = start + timeout_s
        left = set(subs)
        end_at = start + max(0.0, timeout_s - self.grace_s)  # the leases' deadline: they end then by themselves
        while left:
            asked = elapsed_s()
            try:
                states = self.slurm.jobs(sorted(left))
            except SlurmError as e:  # the controller restarting: keep waiting
                log.warning("squeue failed: %s", e)
                states = {}
            now = elapsed_s()
            for job_id in sorted(left):
                p, sub = subs[job_id]
                st = states.get(job_id)
                if st is not None:
                    sub.state = st
                if (st is not None and st.ended) or (st is None and sub.state is not None and states):
                    left.discard(job_id)
                    p.done_at[0] = self._end_time(sub)
                elif now >= kill_at and not sub.cancelled:
                    self._cancel(sub)
                elif now >= stop_at and not sub.signalled and (sub.folder / script.RESULT).exists():
                    sub.signalled = True  # it has answered and is exiting: nothing to stop
                elif now >= stop_at and not sub.signalled:
                    sub.signalled = True
                    try:
                        self.slurm.signal(job_id, "USR1", batch=not sub.gang)
                    except SlurmError as e:
                        log.debug("signalling %d: %s", job_id, e)
            if now >= kill_at + self.grace_s:
                for job_id in left:
                    subs[job_id][0].error = f"Slurm job {job_id} did not end within {self.grace_s:.0f} s of " \
                                            "being cancelled"
                break
            if left:
                _next_poll(asked, end_at, [subs[j][1].folder for j in left])

    def _cancel(self, sub: Submitted) -> None:
        sub.cancelled = True
        try:
            self.slurm.cancel([sub.job_id])
        except SlurmError as e:
            log.debug("cancelling %d: %s", sub.job_id, e)

    def _end_time(self, sub: Submitted) -> float:
        """When the lease ended on the executor's clock: its result's end time, else now."""
        now = self.clock.now()
        res = script.read_result(sub.folder)
        if res is None:
            return now
        return min(now, max(0.0, now - max(0.0, time.time() - res[2])))

    # ---- answers ------------------------------------------------------------------------------------
    def _outcomes(self, p: Pending) -> list[LeaseOutcome | None]:
        if not p.refs:
            return [None]
        sub = self._jobs.pop(id(p))
        st = sub.state
        res = script.read_result(sub.folder)
        self._record(p, sub, res)
        if st is None or 0 not in p.done_at:
            p.error = p.error or f"Slurm job {sub.job_id} was never seen ending"
            return [None]
        if res is not None and st.state in ("COMPLETED", "FAILED") and not sub.cancelled:
            return [res[0]]  # the lease's own answer (a failed one carries the job's error and traceback)
        if res is None and st.state == "COMPLETED":
            p.error = p.error or (f"Slurm job {sub.job_id} wrote no result; its output: "
                                  f"{script.tail(sub.folder / script.LOG, 600).strip()}")
            return [None]
        why = f"Slurm job {sub.job_id} ended {st.state}" + (f" ({st.reason})" if st.reason not in ("", "None") else "")
        if sub.cancelled:
            why += f": still running {self.grace_s:.0f} s past the round's end"
        p.error = p.error or why
        return [None]

    def _record(self, p: Pending, sub: Submitted, res: tuple[LeaseOutcome, float, float] | None) -> None:
        """The lease's record (``start_s``: from its submission to its first step) and its job type's startup."""
        node = self.cluster.nodes[self.cluster.node_of[p.lease.gpus[0]]]
        seen = None
        if res is not None and res[0].startup_s is not None and p.mode == "train":
            key = (p.lease.job_type, len(p.lease.gpus))
            seen = max(0.0, res[1] - sub.submitted) + res[0].startup_s
            old = self.startup.get(key)
            self.startup[key] = seen if old is None else STARTUP_ALPHA * seen + (1 - STARTUP_ALPHA) * old
        self.records.append({"job": p.lease.job_id, "copy": p.lease.copy, "round": len(self.rounds) - 1,
                             "slurm_job": sub.job_id, "node": node.name, "gpu_type": node.gpu_type,
                             "gpus": len(p.lease.gpus), "state": sub.state.state if sub.state else "",
                             "iterations": res[0].iterations if res else 0,
                             "restored": bool(res and res[0].restored), "seconds": (res[2] - res[1]) if res else 0.0,
                             "start_s": seen, "mode": p.mode})

    def estimate_rate(self, lease: Lease) -> float | None:
        """Steps/s the lease makes over its whole time, its start included: every Slurm lease is a new process
        that starts (Slurm's launch, Python, the job's imports and model) before its first step, so a lease of
        ``max_steps`` at the measured rate ``r`` takes ``startup + max_steps / r``, startup as measured for the
        job type and gang size (none yet: 0). The engine predicts the lease's end from this (its ``lost_s``,
        the restore, comes on top: a Slurm run leaves it 0, the startup holds it)."""
        rate = super().estimate_rate(lease)
        if rate is None or not math.isfinite(lease.max_steps):
            return rate
        startup = self.startup.get((lease.job_type, len(lease.gpus)), 0.0)
        return lease.max_steps / (startup + lease.max_steps / rate)

    def _recover(self, p: Pending, outcomes: list[LeaseOutcome | None]) -> None:
        """Nothing to replace: a lease's processes end with its Slurm job."""

    def _open_store(self, lease: Lease, actors: list[Any], slot: int = 0) -> tuple[str, int]:
        raise NotImplementedError("a Slurm lease opens its gang's rendezvous itself")


def _next_poll(asked: float, end_at: float, folders: list[Path]) -> None:
    """Sleep until squeue is worth asking again (it was asked at ``asked``): ``POLL_S`` after it once a lease
    still running has written its result (it is exiting) or the leases' deadline ``end_at`` is near, else
    ``SLOW_POLL_S`` after it (a lease that fails early is seen then; a squeue is a process that would compete
    with the round's lease starts for the CPU), looking for result files every ``POLL_S`` in between."""
    while True:
        time.sleep(POLL_S)
        t = elapsed_s()
        if t - asked >= SLOW_POLL_S or t >= end_at - SLOW_POLL_S or any((f / script.RESULT).exists() for f in folders):
            return
