"""Round plans (what runs where this round) and round reports (what happened)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hadar.model.cluster import Cluster
from hadar.model.throughput import ThroughputTable


@dataclass(frozen=True, slots=True)
class Lease:
    """Job ``job_id`` (copy ``copy``; 0 = the job itself, 1..k = HadarE forks)
    runs on ``gpus`` for at most ``max_steps`` steps this round.

    ``extended`` is True when the same copy held exactly these GPUs in the
    previous round (Gavel's lease extension: no checkpoint/restore needed).
    ``partner_id``/``partner_type``: the job sharing these GPUs (space sharing), -1/"" when alone;
    the lease then runs at the job's co-located rate with that partner.
    ``restart_s`` is what a lease that is not extended loses to the restore at its start (the
    job's ``restart_s``); ``owed_s``, what an extended lease still owes of a restore the last
    round cut short; ``lost_s`` is what this lease loses. ``batch``: the global batch an adaptive job
    runs at this round (``model/batch.py``; a change of batch is not ``extended``); 0 = the job's own.
    """

    job_id: int
    job_type: str
    scale_factor: int
    gpus: tuple[int, ...]
    max_steps: float
    copy: int = 0
    extended: bool = False
    partner_id: int = -1
    partner_type: str = ""
    restart_s: float = 0.0
    owed_s: float = 0.0
    batch: float = 0.0

    @property
    def lost_s(self) -> float:
        """Seconds of the round this lease spends restoring before its first step."""
        return self.owed_s if self.extended else self.restart_s


@dataclass(frozen=True, slots=True)
class RoundPlan:
    """Leases for one round starting at ``start_s``, lasting at most ``duration_s``."""

    start_s: float
    duration_s: float
    leases: tuple[Lease, ...] = ()

    @property
    def job_ids(self) -> tuple[int, ...]:
        return tuple(sorted({lease.job_id for lease in self.leases}))

    def gpus_of(self, job_id: int) -> tuple[int, ...]:
        return tuple(g for lease in self.leases if lease.job_id == job_id for g in lease.gpus)


@dataclass(frozen=True, slots=True)
class LeaseResult:
    """What one lease achieved: ``steps`` done, busy from round start to ``end_s``.

    ``failed`` marks a lease that did not complete (its worker died, the
    job's code raised): its steps are 0 and the job resumes from its last
    checkpoint next round, unless ``fatal``: the job cannot go on (it failed
    too often) and ends as failed, with ``error`` as the reason.
    ``restore_left_s``: the part of the lease's restore the round was too short for.
    ``reached_target``: the job's quality metric reached its target in this lease: it is done, whatever
    steps it has left (a real run's time to accuracy; the simulator never sets it).
    """

    job_id: int
    copy: int
    gpus: tuple[int, ...]
    steps: float
    end_s: float
    failed: bool = False
    metrics: dict[str, float] = field(default_factory=dict)
    error: str = ""
    fatal: bool = False
    restore_left_s: float = 0.0
    reached_target: bool = False


@dataclass(frozen=True, slots=True)
class MergeGain:
    """What one merge of a forked job's copies gained, as the job tracker measured it on the job's held-out
    loss (``hadar.runtime.merges``): ``start_loss`` of the model the ``copies`` started the round from,
    ``copy_loss`` the copies' mean after their round, ``merged_loss`` the averaged model's. ``gain``: the
    merged model's loss decrease over one copy's, ``(start - merged) / (start - copy)`` (None where the
    copies did not lower the loss): what the merge was worth in copies (1: one copy's worth; ``copies``: as
    much as all of them). ``rho``: ``gain`` over what data-parallel training at the copies' summed batch
    would have been worth, ``copies x (Bn + B) / (Bn + copies x B)`` with the copies' measured noise scale
    ``Bn`` and per-copy batch ``B``: the fork's measured drift factor (None without a measured ``Bn``)."""

    job_id: int
    round: int
    copies: int
    start_loss: float
    copy_loss: float
    merged_loss: float
    gain: float | None = None
    rho: float | None = None


@dataclass(frozen=True, slots=True)
class RoundReport:
    """The round ran from ``start_s`` to ``end_s`` (the last lease's end): everything the executor
    learned in it comes back here, and only here.

    ``table``: the executor's throughputs as measured so far (alone and co-located), None where it
    measures nothing (the simulator: its table is the world's truth the policy was given).
    ``restart_s``: (job id, measured restart cost in s) for jobs whose cost the executor measured.
    ``saved_steps``: (job id, steps its committed checkpoint holds) for the jobs that saved one so far.
    ``noise_scales``: (job id, gradient noise scale in samples) the jobs measured so far (``ctx.gradient_noise``;
    the last value each reported); ``merge_gains``: the merges of forked jobs' copies measured since the last
    report (``MergeGain``).
    """

    start_s: float
    end_s: float
    results: tuple[LeaseResult, ...] = ()
    table: ThroughputTable | None = None
    restart_s: tuple[tuple[int, float], ...] = ()
    saved_steps: tuple[tuple[int, float], ...] = ()
    noise_scales: tuple[tuple[int, float], ...] = ()
    merge_gains: tuple[MergeGain, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeChange:
    """Nodes went down, came back or joined, as the executor sees them now: the new ``cluster`` (every
    existing node in its place, joins appended) and, where a new GPU type came with them, the
    executor's ``table`` with that type's column (None: the table did not change)."""

    cluster: Cluster
    table: ThroughputTable | None = None
