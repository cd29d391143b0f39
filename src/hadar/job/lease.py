"""One lease of one job on one worker: what it must do (``LeaseSpec``) and what it did (``LeaseOutcome``).

Plain values (no Ray, no torch): the Ray worker actor receives a spec and returns an
outcome; a plain process can build a spec and call ``hadar.job.runner.run_lease`` itself.
Units: ``*_s`` seconds; *steps* are the job's steps as the job file counts them (one
iteration of one worker: a W-GPU iteration is W steps); *iterations* are iterations of the
job's loop (one item of ``ctx.steps()``, on every rank).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Mode = Literal["train", "profile", "finalize"]
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True, slots=True)
class LeaseSpec:
    """What rank ``rank`` of ``world`` must do for job ``job_id`` in this lease.

    - ``max_iterations``: stop after this many iterations (the job's remaining steps / world, or a
      HadarE copy's share); ``budget_s``: start no iteration this long after the lease began
      (the first iteration always runs, so every lease makes progress).
    - ``start_iteration``: the number ``ctx.steps()`` yields first; ``steps_done``: the job's
      progress when the lease starts; ``resume_steps``: its progress at its last save in this
      run (None: it never saved; ``ctx.load_state()`` then returns None).
    - ``checkpoint``: where rank 0's ``ctx.save_state`` writes; ``restore_from``: where
      ``ctx.load_state`` reads ("" = ``checkpoint``). Files of another ``run_id`` are ignored.
    - ``rendezvous``: rank 0's TCPStore (host, port) for a process group (world > 1, or
      ``process_group``); a loopback host means every rank is on this machine.
    - HadarE copies: copy ``copy`` of ``copies`` reads data shard ``shard_offset + rank`` of
      ``shards`` (0 = ``world``), so the copies of a round read disjoint data.
    - ``mode``: ``train``; ``profile`` (measure only: nothing saved, progress thrown away) or
      ``finalize`` (no steps: the function evaluates and reports a merged model).
    - ``speed``: emulated GPU speed in (0, 1]: each step is stretched to last step time / speed.
    - ``target_metric`` / ``target``: the job ends once ``ctx.report`` gives the metric (``-name``:
      lower is better) a value at or past ``target``; the lease then stops after that step.
    - ``batch``: the global batch this lease runs at (an adaptive job's: the scheduler's choice for this
      lease; a rigid job's: its own; 0 = the scheduler knows no batch for the job); ``own_batch``: the job's
      own batch (the one its learning rate is set for), ``lr_rule`` the rule it scales its learning rate
      with at another batch (``adascale``, ``sqrt``, ``linear``; "" = none) and ``noise_scale`` the
      scheduler's gradient noise scale for the job at dispatch (measured, else its profile's; None = none):
      ``ctx.batch_size`` and ``ctx.lr_scale`` (``hadar.job.goodput``).
    """

    job_id: int
    entrypoint: str
    rank: int
    world: int
    max_iterations: int
    budget_s: float
    checkpoint: str
    name: str = ""
    args_json: str = "{}"
    search_path: tuple[str, ...] = ()
    seed: int = 0
    total_steps: float = 0.0
    start_iteration: int = 0
    steps_done: float = 0.0
    resume_steps: float | None = None
    restore_from: str = ""
    run_id: str = ""
    speed: float = 1.0
    rendezvous: tuple[str, int] | None = None
    group: str = ""
    timeout_s: float = 60.0
    process_group: bool = False
    copy: int = 0
    copies: int = 1
    shard_offset: int = 0
    shards: int = 0
    mode: Mode = "train"
    digest: bool = False
    target_metric: str = ""
    target: float | None = None
    batch: float = 0.0
    own_batch: float = 0.0
    lr_rule: str = ""
    noise_scale: float | None = None

    @property
    def forked(self) -> bool:
        return self.copies > 1

    @property
    def local_group(self) -> bool:
        """Every rank runs on this machine (the rendezvous is on loopback)."""
        return self.rendezvous is None or self.rendezvous[0] in LOOPBACK


@dataclass(slots=True)
class LeaseOutcome:
    """What one rank did. ``ok`` False: the lease failed (``error``: one line; ``traceback``: all of it)."""

    ok: bool = False
    iterations: int = 0
    train_s: float = 0.0  # from the first step to the end of the last
    restore_s: float = 0.0  # reading the saved state from disk
    startup_s: float | None = None  # from the lease's start to its first step: the restart it cost (None: no step)
    save_s: float = 0.0
    restored: bool = False  # load_state read a checkpoint file
    continued: bool = False  # load_state was served from this worker's memory (lease extension)
    saved_steps: float | None = None  # the job's progress when it last called save_state in this lease
    finished: bool = False  # the job's steps are all done, or it reached its target
    reached_target: bool = False  # a reported metric reached the job's target (``LeaseSpec.target``)
    metrics: dict[str, float] = field(default_factory=dict)  # the last value of each reported metric
    first_metrics: dict[str, float] = field(default_factory=dict)  # the first value reported in this lease
    error: str = ""
    traceback: str = ""
    output: str = ""  # what the function printed (its last 64 KiB)
    warnings: list[str] = field(default_factory=list)
    start_digest: str = ""  # fingerprint of the loaded state's model (``LeaseSpec.digest``)
