"""``hadar serve --slurm``: the service's engine with the Slurm executor, and what a restart finds on Slurm.

Every Slurm job the service submits carries its tag: the comment ``hadar:<run id>:<job>:<copy>:<round>``,
where the run id is the store's (``hadar.db`` in the state directory), so a restarted service knows its
own jobs and no one else's. The state directory is the executor's work folder: ``checkpoints/``,
``logs/`` and ``leases/`` (one folder per lease) are all there, so it must be storage every node sees.

A restart (after ``kill -9``, say) adopts what the killed service left on Slurm before it schedules
anything (``adopt``): its jobs still held or pending never started and are cancelled; its running ones
are waited for (each ends by itself at its round's end, or is cancelled ``grace_s`` later); then each
job's latest lease, if it succeeded and saved, has its checkpoint committed, as the killed service would
have done. The service then resumes every job from its committed checkpoint, so no lease is lost that
finished and none runs twice at once; a HadarE copy's lease in flight is not adopted (its job resumes
from the checkpoint before it).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hadar.clock import Clock
from hadar.model.cluster import Cluster
from hadar.model.plan import NodeChange, RoundPlan
from hadar.runtime import checkpoint
from hadar.runtime.tracker import ThroughputTracker
from hadar.slurm import script
from hadar.slurm.accounting import Accounted, SacctFeed
from hadar.slurm.commands import JobState, Slurm, SlurmError
from hadar.slurm.executor import TAG, SlurmExecutor, SlurmOptions
from hadar.slurm.userjobs import UserJobs

log = logging.getLogger(__name__)
USER_JOB = "sbatch"  # the job type a user's own sbatch job is rated as (the bundled table's average row)
POLL_S = 0.5  # how often squeue is asked while a restart waits for the killed service's leases
_FOLDER = re.compile(r"^(?P<run>[0-9a-f]+)-j(?P<job>\d+)-c(?P<copy>\d+)-r(?P<round>\d+)-(?P<mode>[a-z]+)$")


@dataclass(frozen=True, slots=True)
class SlurmServe:
    """``hadar serve --slurm``'s options: the partition (None: every partition's GPU nodes) and
    ``SLURM_CONF`` (None: as the environment says)."""

    partition: str | None = None
    conf: str | None = None


@dataclass(frozen=True, slots=True)
class Adopted:
    """What a restart found of its own on Slurm: jobs cancelled before they started, jobs waited for,
    and the hadar jobs whose latest lease's checkpoint it committed."""

    cancelled: tuple[int, ...] = ()
    waited: tuple[int, ...] = ()
    committed: tuple[int, ...] = ()


@dataclass(slots=True)
class SlurmBackend:
    """What trains for the service: the Slurm executor (``executor.tracker``: measured rates)."""

    executor: SlurmExecutor

    @property
    def tracker(self) -> ThroughputTracker:
        return self.executor.tracker

    def close(self) -> None:
        """Cancel any Slurm job of this service still there (none, after a round that ended)."""
        try:
            left = [j.job_id for j in own_jobs(self.executor.slurm, self.executor.run_id) if not j.ended]
            self.executor.slurm.cancel(left)
        except SlurmError as e:
            log.warning("cancelling the service's Slurm jobs failed: %s", e)


class ServiceExecutor(SlurmExecutor):
    """The Slurm executor of ``hadar serve --slurm``: at each round boundary, users' marked sbatch jobs are placed
    (``hadar.slurm.userjobs``), and the nodes they hold are down to hadar's schedule until they end."""

    def __init__(self, slurm: Slurm, clock: Clock, options: SlurmOptions, *, users: UserJobs | None = None,
                 feed: SacctFeed | None = None, on_event: Callable[[dict[str, Any]], None] | None = None,
                 on_dispatch: Callable[[int, RoundPlan], None] | None = None) -> None:
        """``users``: the users' marked sbatch jobs (None: none placed); ``feed``: sacct's records of the service's
        ended leases, into its store (None: not read); the rest as ``SlurmExecutor``'s."""
        self.users: UserJobs | None = None  # (the first sinfo read, during the construction, counts no user job)
        self.feed: SacctFeed | None = None
        self._sinfo: Cluster | None = None  # the cluster as sinfo said last (nodes held by user jobs up)
        super().__init__(slurm, clock, options, on_event=on_event, on_dispatch=on_dispatch)
        self.users, self.feed = users, feed

    def read_cluster(self) -> Cluster:
        cluster = self._sinfo = super().read_cluster()
        held = self.users.refresh() if self.users is not None else frozenset()
        return cluster.with_down(cluster.down | held) if held else cluster

    def cluster_view(self) -> NodeChange | None:
        if self.users is not None and self._sinfo is not None:
            self.users.refresh()
            self.users.record_ended({n.name: n.gpu_type for n in self.cluster.nodes})
            self.users.place(self._sinfo, lambda t: self.ratio(USER_JOB, 1, t), self.members)
        if self.feed is not None:
            self.feed.poll(r["slurm_job"] for r in self.records)
        return super().cluster_view()


def tag_prefix(run_id: str) -> str:
    return f"{TAG}:{run_id}:"


def own_jobs(slurm: Slurm, run_id: str) -> list[JobState]:
    """The Slurm jobs (any state Slurm still keeps) whose comment carries ``run_id``'s tag, by id."""
    prefix = tag_prefix(run_id)
    return [j for _, j in sorted(slurm.jobs().items()) if j.comment.startswith(prefix)]


def start_backend(opts: SlurmServe, state_dir: Path, clock: Clock, *, run_id: str, seed: int,
                  listeners: tuple[Callable[[dict[str, Any]], None], Callable[[int, Any], None] | None],
                  restore: Callable[[ThroughputTracker], None],
                  usage: tuple[float, Callable[[list[Accounted], float], None]] | None = None) -> SlurmBackend:
    """The executor on the partition sinfo describes, in ``state_dir``, its numbering continued after the
    leases already there, its tracker given what the store measured before (``restore``); ``usage``: where
    sacct's window starts and what keeps its records (``SacctFeed``); ``listeners``: the executor's ``on_event``
    and its ``on_dispatch`` (None: none)."""
    slurm = Slurm(opts.conf)
    options = SlurmOptions(state_dir, partition=opts.partition, dilation="auto", seed=seed, run_id=run_id,
                           round_base=next_round(state_dir / "leases", run_id))
    executor = ServiceExecutor(slurm, clock, options, users=UserJobs(slurm, opts.partition, state_dir),
                               feed=None if usage is None else SacctFeed(slurm, run_id, *usage),
                               on_event=listeners[0], on_dispatch=listeners[1])
    restore(executor.tracker)
    return SlurmBackend(executor)


def next_round(leases: Path, run_id: str) -> int:
    """One past the highest round number of ``run_id``'s lease folders (0: none)."""
    rounds = [int(m["round"]) for m in _folders(leases, run_id)]
    return max(rounds) + 1 if rounds else 0


def _folders(leases: Path, run_id: str) -> list[re.Match[str]]:
    if not leases.is_dir():
        return []
    found = (_FOLDER.match(p.name) for p in sorted(leases.iterdir()))
    return [m for m in found if m is not None and m["run"] == run_id[:8]]


def adopt(opts: SlurmServe, state_dir: Path, run_id: str, grace_s: float = 30.0) -> Adopted:
    """Take over what a killed service of ``run_id`` left on Slurm (see the module docstring)."""
    slurm = Slurm(opts.conf)
    mine = own_jobs(slurm, run_id)
    pending = [j.job_id for j in mine if j.state == "PENDING"]
    if pending:
        slurm.cancel(pending)  # held or not started yet: nothing of them ran
    running = [j.job_id for j in mine if not j.ended and j.job_id not in pending]
    _wait_ended(slurm, [*pending, *running], _latest_deadline(state_dir / "leases", run_id) + grace_s)
    committed = [job for job in sorted(_latest_leases(state_dir / "leases", run_id).items())
                 if _commit(*job[1])]
    out = Adopted(tuple(pending), tuple(running), tuple(j for j, _ in committed))
    if mine:
        log.warning("adopted the Slurm jobs of the previous run: cancelled %s (never started), waited for %s, "
                    "committed the checkpoints of jobs %s", list(out.cancelled), list(out.waited),
                    list(out.committed))
    return out


def _latest_deadline(leases: Path, run_id: str) -> float:
    deadlines = [0.0]
    for m in _folders(leases, run_id):
        try:
            deadlines.append(script.read_lease(leases / m.string / script.SPEC)[1])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return max(deadlines)


def _wait_ended(slurm: Slurm, ids: Sequence[int], deadline: float) -> None:
    """Until Slurm says every job of ``ids`` ended; those still there at ``deadline`` (wall clock) are cancelled,
    and waited for again."""
    left, cancelled = set(ids), False
    while left:
        states = slurm.jobs(sorted(left))
        left = {i for i in left if i in states and not states[i].ended}
        if left and not cancelled and time.time() >= deadline:
            slurm.cancel(sorted(left))
            cancelled = True
        if left:
            time.sleep(POLL_S)


def _latest_leases(leases: Path, run_id: str) -> dict[int, tuple[Path, int]]:
    """hadar job -> (its latest lease's folder, its round), of ``run_id``'s training leases."""
    out: dict[int, tuple[Path, int]] = {}
    for m in _folders(leases, run_id):
        job, rnd = int(m["job"]), int(m["round"])
        if m["mode"] == "train" and (job not in out or rnd > out[job][1]):
            out[job] = (leases / m.string, rnd)
    return out


def _commit(folder: Path, round_no: int) -> bool:
    """Commit the checkpoint the lease in ``folder`` saved, if it succeeded, saved, was no HadarE copy and its
    saved file is still uncommitted; whether it did."""
    res = script.read_result(folder)
    try:
        spec = script.read_lease(folder / script.SPEC)[0]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if res is None or not res[0].ok or res[0].saved_steps is None or spec.forked:
        return False
    saved = Path(spec.checkpoint)
    if saved != checkpoint.pending_path(spec.restore_from) or not saved.exists():
        return False
    try:
        steps = float(checkpoint.meta_of(checkpoint.load(saved)).get("steps", -1.0))
    except Exception as e:  # an unreadable file: the job resumes from its last committed checkpoint
        log.warning("lease of round %d in %s: unreadable checkpoint %s (%s)", round_no, folder, saved, e)
        return False
    if abs(steps - res[0].saved_steps) > 1e-6:
        return False  # another lease's file
    saved.replace(spec.restore_from)
    return True
