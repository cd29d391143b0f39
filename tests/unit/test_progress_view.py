"""The runtime's ``JobProgress.steps``: a read-only view of the lease results reported for the job."""

from __future__ import annotations

from pathlib import Path

import pytest

from hadar.model.job import Job, TrainSpec
from hadar.model.plan import LeaseResult
from hadar.runtime.progress import JobProgress


def progress() -> JobProgress:
    job = Job(job_id=3, job_type="m", scale_factor=1, total_steps=100, arrival_s=0.0)
    return JobProgress(job, TrainSpec(entrypoint="m.py:train", name="m"), Path("ckpt-3"))


def test_steps_are_the_reported_results_on_top_of_the_resumed_checkpoint() -> None:
    info = progress()
    info.count(LeaseResult(3, 0, (0,), 12.0, 10.0))
    info.count(LeaseResult(3, 1, (1,), 5.0, 10.0))
    info.count(LeaseResult(3, 0, (0,), 0.0, 20.0, failed=True))
    assert info.steps == 17.0
    info.resume_at(40.0, 41)
    assert (info.steps, info.iteration, info.saved_steps) == (40.0, 41, 40.0)
    info.count(LeaseResult(3, 0, (0,), 8.0, 30.0))
    assert info.steps == 48.0


def test_steps_cannot_be_written_nor_counted_for_another_job() -> None:
    info = progress()
    with pytest.raises(AttributeError):
        info.steps = 5.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="a result of job 4 counted for job 3"):
        info.count(LeaseResult(4, 0, (0,), 1.0, 1.0))
