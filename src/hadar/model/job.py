"""A training job as submitted (immutable)."""

from __future__ import annotations

from dataclasses import dataclass

from hadar.errors import InputError


@dataclass(frozen=True, slots=True)
class Job:
    """One job of a workload.

    ``job_type`` names a model + batch size, a key of the throughput table
    (e.g. ``"ResNet-50 (batch size 64)"``); ``scale_factor`` is the number of
    GPUs (tasks) it asks for; ``total_steps`` is its size in the throughput
    table's steps; ``arrival_s`` is when it is submitted.
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

    def __post_init__(self) -> None:
        where = self.origin or f"job {self.job_id} ({self.job_type})"
        if self.scale_factor <= 0:
            raise InputError(f"{where}: scale factor must be positive, got {self.scale_factor}")
        if self.total_steps <= 0:
            raise InputError(f"{where}: total steps must be positive, got {self.total_steps}")
        if self.arrival_s < 0:
            raise InputError(f"{where}: arrival time must not be negative, got {self.arrival_s}")
        if self.priority_weight <= 0:
            raise InputError(f"{where}: priority weight must be positive, got {self.priority_weight}")

    @property
    def key(self) -> tuple[str, int]:
        """The throughput-table key ``(job_type, scale_factor)``."""
        return (self.job_type, self.scale_factor)
