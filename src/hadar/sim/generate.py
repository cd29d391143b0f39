"""Synthetic workloads with Gavel's semantics (seeded, reproducible).

Draw order and streams follow Gavel's generator so a seed gives Gavel's
jobs: job attributes from ``random.Random(seed + 2)``, inter-arrival times
from ``random.Random(seed + 3)``. Per job: a scale-factor draw (always
made), a duration (20 %: 60 * 10^U(3,4) s, else 60 * 10^U(1.5,3) s),
then templates drawn uniformly until one fits the scale factor; its size
is duration x isolated V100 throughput on ``scale_factor`` GPUs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

from hadar.errors import InputError
from hadar.model.job import Job
from hadar.model.throughput import ThroughputTable

#: Gavel's 26 job templates in its table order: (model, may use several GPUs).
TEMPLATES: tuple[tuple[str, bool], ...] = (
    *((f"ResNet-18 (batch size {b})", True) for b in (16, 32, 64, 128, 256)),
    *((f"ResNet-50 (batch size {b})", True) for b in (16, 32, 64, 128)),
    *((f"Transformer (batch size {b})", True) for b in (16, 32, 64, 128, 256)),
    *((f"LM (batch size {b})", True) for b in (5, 10, 20, 40, 80)),
    *((f"Recommendation (batch size {b})", False) for b in (512, 1024, 2048, 4096, 8192)),
    ("A3C", False),
    ("CycleGAN", False),
)


def _scale_factor(rng: random.Random) -> int:
    u = rng.uniform(0, 1)
    if 0.7 <= u <= 0.8:
        return 2
    if 0.8 <= u <= 0.95:
        return 4
    if u >= 0.95:
        return 8
    return 1


def _duration_s(rng: random.Random) -> float:
    if rng.random() >= 0.8:
        return 60 * 10 ** rng.uniform(3, 4)
    return 60 * 10 ** rng.uniform(1.5, 3)


class JobGenerator:
    """An endless, seeded stream of jobs arriving as a Poisson process."""

    def __init__(self, table: ThroughputTable, jobs_per_hour: float, *, seed: int = 0, multi_gpu: bool = False,
                 multi_priority: bool = False, reference_type: str = "v100") -> None:
        if jobs_per_hour <= 0:
            raise InputError(f"--jobs-per-hour must be positive, got {jobs_per_hour}")
        missing = [m for m, _ in TEMPLATES if not table.has(m, 1)]
        if missing:
            raise InputError(f"throughput table lacks Gavel job types needed for generation: {', '.join(missing[:3])}")
        self.table = table
        self.mean_interarrival_s = 3600.0 / jobs_per_hour
        self.multi_gpu = multi_gpu
        self.multi_priority = multi_priority
        self.reference_type = reference_type
        self._jobs = random.Random(seed + 2)
        self._arrivals = random.Random(seed + 3)

    def __iter__(self) -> Iterator[Job]:
        t, job_id = 0.0, 0
        while True:
            yield self._make(job_id, t)
            job_id += 1
            t += -math.log(1.0 - self._arrivals.random()) * self.mean_interarrival_s

    def _make(self, job_id: int, arrival_s: float) -> Job:
        rng = self._jobs
        sf = _scale_factor(rng)
        duration = _duration_s(rng)
        if not self.multi_gpu:
            sf = 1
        while True:
            model, distributed = rng.choice(TEMPLATES)
            if sf == 1 or distributed:
                break
        weight = 1.0
        if self.multi_priority and rng.uniform(0, 1) <= 0.2:
            weight = 5.0
        steps = duration * self.table.get(model, sf, self.reference_type)
        return Job(job_id=job_id, job_type=model, scale_factor=sf, total_steps=steps, arrival_s=arrival_s,
                   priority_weight=weight, origin=f"generated job {job_id}")
