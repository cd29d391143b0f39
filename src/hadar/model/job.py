"""A training job as submitted (immutable)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from hadar.errors import InputError
from hadar.model.efficiency import Efficiency


@dataclass(frozen=True, slots=True)
class TrainSpec:
    """What the real runtime runs for a job: a ``train(ctx)`` function (see ``hadar.job``).

    ``entrypoint`` is ``FILE.py:FUNCTION`` or ``package.module:FUNCTION`` ("" = the bundled
    workload the job's ``job_type`` names, filled in by the runtime); a relative FILE is
    looked up in ``search_path`` (the job file's folder, then the current folder), where modules
    are imported from too. ``args_json`` is the job's ``args`` mapping as JSON (hashable, storable).
    ``max_failures``: failed leases after which the job ends as failed. ``profile``: short
    measurement-only leases on GPU types it has not run on yet. ``emulate_as``: the Gavel job type
    whose per-GPU-type speed ratios the emulated cluster and the throughput prior use ("" = the
    average Gavel row). ``quality``: the reported metric that measures the model ("" = none;
    ``-name``: lower is better). ``target``: the job ends as soon as its ``quality`` metric reaches
    this value (at least it; at most it for ``-name``), before its ``total_steps`` if need be (None:
    it runs its steps): its completion time is then its time to accuracy.
    """

    entrypoint: str
    name: str = ""
    args_json: str = "{}"
    max_failures: int = 3
    profile: bool = False
    emulate_as: str = ""
    quality: str = ""
    search_path: tuple[str, ...] = ()
    target: float | None = None

    def __post_init__(self) -> None:
        where = f"job {self.name!r}" if self.name else "job"
        if self.entrypoint and ":" not in self.entrypoint.strip(":"):
            raise InputError(f"{where}: entrypoint must be FILE.py:FUNCTION or package.module:FUNCTION, "
                             f"got {self.entrypoint!r}")
        if isinstance(self.max_failures, bool) or not isinstance(self.max_failures, int) or self.max_failures < 1:
            raise InputError(f"{where}: max_failures must be an integer >= 1, got {self.max_failures!r}")
        if not isinstance(json.loads(self.args_json), dict):
            raise InputError(f"{where}: args must be a mapping")
        if self.target is not None:
            if self.entrypoint and not self.quality.lstrip("-"):  # (a bundled workload's comes with it)
                raise InputError(f"{where}: target needs quality (the reported metric it is a value of)")
            t = self.target
            if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
                raise InputError(f"{where}: target must be a finite number, got {self.target!r}")

    @property
    def args(self) -> dict[str, Any]:
        """A fresh copy of the job's ``args``."""
        out: dict[str, Any] = json.loads(self.args_json)
        return out


@dataclass(frozen=True, slots=True)
class Job:
    """One job of a workload.

    ``job_type`` names a model + batch size, a key of the throughput table
    (e.g. ``"ResNet-50 (batch size 64)"``); ``scale_factor`` is the number of
    GPUs (tasks) it asks for; ``total_steps`` is its size in the throughput
    table's steps; ``arrival_s`` is when it is submitted. ``extra`` carries a CSV
    job list's other columns (name, value) in file order, e.g. an imported trace's
    source id and fields: nothing schedules on them, ``jobs.csv`` writes them back.
    ``restart_s`` is the time (s) the job loses each time it starts or moves to other GPUs
    (a checkpoint restore; a lease extended on the same GPUs costs nothing); None = not
    given: the run's default (``--restart-s``, else 0, as Gavel's simulator). ``slo``: Gavel's SLO factor
    (the job should finish within ``slo`` times its run time alone on its fastest type; None = none).
    ``entity``: who the job belongs to (a team); hierarchical fairness shares between entities first.
    ``efficiency``: its statistical-efficiency profile (``model/efficiency.py``); then ``total_steps`` are
    reference steps (at the profile's reference batch) and the world credits each step at the batch used
    its gain; None = every step counts one (as Gavel's world). ``gpu_range``: ``(least, most)`` GPUs an
    elastic job may run on (``scale_factor`` within it; a policy that sizes jobs picks the count each
    round, every change paying ``restart_s``); None = rigid, always ``scale_factor``. ``batch_range``:
    ``(least, most)`` global batch an adaptive job may run at (it needs ``efficiency``: its own batch
    within the range, its learning-rate rule ``efficiency.lr_rule``); a policy that sizes jobs picks
    the batch each round, every change paying ``restart_s`` (``model/batch.py``); None = its own batch.
    """

    job_id: int
    job_type: str
    scale_factor: int
    total_steps: float
    arrival_s: float = 0.0
    priority_weight: float = 1.0
    slo: float | None = None
    # Kept only so a trace can be written back unchanged (Gavel's columns).
    command: str = ""
    working_directory: str = ""
    num_steps_arg: str = ""
    needs_data_dir: bool = False
    origin: str = ""  # where it came from, e.g. "small_test.trace:3", for error messages
    train: TrainSpec | None = None  # what the real runtime runs (None: a simulated job type only)
    extra: tuple[tuple[str, str], ...] = ()
    restart_s: float | None = None
    entity: str = ""  # the team/tenant it belongs to (hierarchical fairness); "" = none named
    efficiency: Efficiency | None = None
    gpu_range: tuple[int, int] | None = None
    batch_range: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        where = self.origin or f"job {self.job_id} ({self.job_type})"
        for name in ("total_steps", "arrival_s", "priority_weight"):
            if not math.isfinite(getattr(self, name)):
                raise InputError(f"{where}: {name} must be a finite number, got {getattr(self, name)}")
        if self.scale_factor <= 0:
            raise InputError(f"{where}: scale factor must be positive, got {self.scale_factor}")
        if self.total_steps <= 0:
            raise InputError(f"{where}: total steps must be positive, got {self.total_steps}")
        if self.arrival_s < 0:
            raise InputError(f"{where}: arrival time must not be negative, got {self.arrival_s}")
        if self.priority_weight <= 0:
            raise InputError(f"{where}: priority weight must be positive, got {self.priority_weight}")
        if self.restart_s is not None:
            check_restart_s(self.restart_s, where)
        if self.gpu_range is not None and not (1 <= self.gpu_range[0] <= self.scale_factor <= self.gpu_range[1]):
            raise InputError(f"{where}: want 1 <= min_gpus <= scale_factor <= max_gpus, got {self.gpu_range[0]} <= "
                             f"{self.scale_factor} <= {self.gpu_range[1]}")
        if self.batch_range is not None:
            check_batch_range(self.batch_range, self.efficiency, where)
        if self.slo is not None and not (math.isfinite(self.slo) and self.slo > 0):
            raise InputError(f"{where}: slo must be a positive number (a factor of the job's run time), got {self.slo}")

    @property
    def restart_cost_s(self) -> float:
        """``restart_s``, 0 where not given."""
        return 0.0 if self.restart_s is None else self.restart_s

    @property
    def table_steps(self) -> float:
        """Steps of the throughput table (at the job's own batch) it needs alone: ``total_steps`` unless it
        has an efficiency profile."""
        e = self.efficiency
        return float(self.total_steps) if e is None else e.steps_for(0.0, self.total_steps, self.total_steps)

    @property
    def key(self) -> tuple[str, int]:
        """The throughput-table key ``(job_type, scale_factor)``."""
        return (self.job_type, self.scale_factor)


def check_restart_s(value: float, where: str) -> None:
    """A restart cost must be a finite number of seconds >= 0 (``InputError`` naming ``where``)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InputError(f"{where}: restart_s must be a finite number of seconds >= 0, got {value!r}")


def check_batch_range(batch_range: tuple[float, float], efficiency: Efficiency | None, where: str) -> None:
    """An adaptive job's ``(min_batch, max_batch)``: positive, finite, around its own batch; it needs an
    efficiency profile (a batch's worth is read from it)."""
    lo, hi = batch_range
    if efficiency is None:
        raise InputError(f"{where}: min_batch/max_batch need an efficiency profile (noise_scale)")
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= efficiency.batch <= hi):
        raise InputError(f"{where}: want 0 < min_batch <= batch <= max_batch, got {lo:g} <= {efficiency.batch:g} "
                         f"<= {hi:g}")
