"""Submissions: the job files ``hadar run`` reads, parsed and checked for the service.

``parse_job_file`` is the one place that turns a job file's text into jobs;
it reads them exactly as ``hadar run --jobs`` does (the same parser, the
same runtime job types), so a file that runs in batch submits unchanged.
The service then adds what a long-running server needs: size limits,
finite numbers, a bounded arrival delay, and a check against the cluster
(``check_fits``) before anything is stored.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hadar.errors import InputError
from hadar.model.job import Job
from hadar.service.store import NewJob

MAX_FILE_BYTES = 1 << 20  # a submitted job file larger than this is refused
MAX_BODY_BYTES = 2 << 20  # a request body larger than this is refused (413): the file, JSON-escaped
MAX_JOBS_PER_SUBMISSION = 1000
MAX_TOTAL_STEPS = 1e9
MAX_ARRIVAL_DELAY_S = 7 * 86400.0  # arrival_s in a submitted file: seconds after the submission
FORMATS = {".yaml": ".yaml", ".yml": ".yaml", ".json": ".json", ".csv": ".csv", ".trace": ".trace"}
_REQUEST_ID = re.compile(r"^[A-Za-z0-9_.-]{8,64}$")


def parse_job_file(text: str, name: str, base_dir: str | None = None) -> list[Job]:
    """The jobs of a job file (``name`` gives the format by its suffix: .yaml/.yml/.json/.csv/.trace).

    ``base_dir``: where the file lives on the submitting machine (relative paths in the file resolve
    there). Bad input raises ``InputError`` naming the problem."""
    from hadar.runtime.run import resolve_jobs
    from hadar.sim.trace import read_jobs

    suffix = FORMATS.get(Path(name).suffix.lower())
    if suffix is None:
        raise InputError(f"{name}: unknown job file format (want .yaml, .yml, .json, .csv or .trace)")
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(name).stem)[:64] or "jobs"
    with tempfile.TemporaryDirectory(prefix="hadar-submit-") as tmp:
        path = Path(tmp) / f"{stem}{suffix}"
        path.write_text(text)
        try:
            jobs = read_jobs(path)
        except InputError as e:  # name the submitted file, not the temporary copy
            raise InputError(str(e).replace(str(path), name).replace(path.name, name)) from None
    return resolve_jobs(jobs)


def check_request_id(request_id: str) -> str:
    if not _REQUEST_ID.match(request_id):
        raise InputError("request_id must be 8 to 64 characters of letters, digits, '_', '-' or '.'")
    return request_id


def check_limits(jobs: Sequence[Job], name: str) -> None:
    """Numbers a long-running service must refuse (NaN, infinities, absurd sizes or delays)."""
    if len(jobs) > MAX_JOBS_PER_SUBMISSION:
        raise InputError(f"{name}: {len(jobs)} jobs in one submission; at most {MAX_JOBS_PER_SUBMISSION}")
    for job in jobs:
        where = job.origin or f"{name}: job {job.job_id}"
        for field, value in (("total_steps", job.total_steps), ("arrival_s", job.arrival_s),
                             ("priority_weight", job.priority_weight)):
            if not math.isfinite(float(value)):
                raise InputError(f"{where}: {field} must be a finite number, got {value}")
        if job.total_steps > MAX_TOTAL_STEPS:
            raise InputError(f"{where}: total_steps {job.total_steps:g} is more than {MAX_TOTAL_STEPS:g}")
        if job.arrival_s > MAX_ARRIVAL_DELAY_S:
            raise InputError(f"{where}: arrival_s {job.arrival_s:g} is more than {MAX_ARRIVAL_DELAY_S:g} s "
                             "after the submission")


def job_name(job: Job) -> str:
    """A short name: the job file's ``name`` when it has one, else the job type's alias."""
    given = getattr(job, "name", "")
    if isinstance(given, str) and given:
        return given[:128]
    from hadar.runtime.workloads import ALIASES

    short = {full: alias for alias, full in ALIASES.items()}
    return short.get(job.job_type, job.job_type)[:128]


def to_new_jobs(jobs: Sequence[Job], now_s: float) -> list[NewJob]:
    """Jobs as the store keeps them: arrival moved to service time (``now_s`` + the file's arrival_s)."""
    out = []
    for job in jobs:
        spec = {f.name: getattr(job, f.name) for f in dataclasses.fields(Job) if f.name != "job_id"}
        spec["arrival_s"] = now_s + float(job.arrival_s)
        out.append(NewJob(job_name(job), job.job_type, job.scale_factor, float(job.total_steps), spec,
                          now_s, spec["arrival_s"]))
    return out


def job_from_spec(job_id: int, spec: dict[str, Any]) -> Job:
    """The ``Job`` a stored spec describes (the inverse of ``to_new_jobs``)."""
    known = {f.name for f in dataclasses.fields(Job)} - {"job_id"}
    return Job(job_id=job_id, **{k: v for k, v in spec.items() if k in known})


def parse_submission(text: str, name: str, now_s: float, base_dir: str | None,
                     check_fits: Callable[[Sequence[Job]], None]) -> list[NewJob]:
    """Everything a submission must pass before it is stored; ``check_fits`` raises for a job the
    cluster can never run."""
    jobs = parse_job_file(text, name, base_dir)
    check_limits(jobs, name)
    check_fits(jobs)
    return to_new_jobs(jobs, now_s)
