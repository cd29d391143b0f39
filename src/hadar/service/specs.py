"""Submissions: the job files ``hadar run`` reads, parsed and checked for the service.

``parse_job_file`` is the one place that turns a job file's text into jobs; it reads them
exactly as ``hadar run --jobs`` does (the same parser, bundled job types resolved into
entrypoints, every entrypoint found without running it, ``emulate_as`` known, jobs of one
name identical: ``runtime.run.prepare_jobs``), with relative paths resolved where the file
came from (``base_dir``, then the submitter's ``cwd``). The service then adds what a
long-running server needs: size limits, finite numbers, a bounded arrival delay, a check
against the cluster (``check_fits``), and one job per name across submissions (``identity``:
the store compares it) before anything is stored.
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
from hadar.job.entrypoint import parse as parse_entrypoint
from hadar.model.job import Job, TrainSpec
from hadar.service.store import NewJob

MAX_FILE_BYTES = 1 << 20  # a submitted job file larger than this is refused
MAX_BODY_BYTES = 2 << 20  # a request body larger than this is refused (413): the file, JSON-escaped
MAX_JOBS_PER_SUBMISSION = 1000
MAX_TOTAL_STEPS = 1e9
MAX_ARRIVAL_DELAY_S = 7 * 86400.0  # arrival_s in a submitted file: seconds after the submission
FORMATS = {".yaml": ".yaml", ".yml": ".yaml", ".json": ".json", ".csv": ".csv", ".trace": ".trace"}
_REQUEST_ID = re.compile(r"^[A-Za-z0-9_.-]{8,64}$")
_TRAIN_FIELDS = {f.name for f in dataclasses.fields(TrainSpec)}


def search_path(base_dir: str | None, cwd: str | None) -> tuple[str, ...]:
    """Where a submission's relative entrypoints are looked up: the job file's folder, then the folder the
    client ran in (as ``hadar run`` looks in the job file's folder, then the current one). Absolute only:
    the server's own current folder means nothing to the submitter."""
    folders = []
    for what, folder in (("base_dir", base_dir), ("cwd", cwd)):
        if folder is None:
            continue
        if not folder or "\0" in folder or not Path(folder).is_absolute():
            raise InputError(f"{what} must be an absolute path, got {folder!r}")
        folders.append(str(Path(folder)))
    return tuple(dict.fromkeys(folders))


def parse_job_file(text: str, name: str, base_dir: str | None = None, cwd: str | None = None) -> list[Job]:
    """The jobs of a job file (``name`` gives the format by its suffix: .yaml/.yml/.json/.csv/.trace),
    within the service's limits (``check_limits``), resolved and checked as ``hadar run`` checks them.

    ``base_dir``: where the file lives on the submitting machine; ``cwd``: the folder the client ran in
    (relative entrypoint files are looked up there, in that order). Bad input raises ``InputError``
    naming the problem."""
    from hadar.runtime.run import prepare_jobs
    from hadar.sim.trace import read_jobs

    suffix = FORMATS.get(Path(name).suffix.lower())
    if suffix is None:
        raise InputError(f"{name}: unknown job file format (want .yaml, .yml, .json, .csv or .trace)")
    folders = search_path(base_dir, cwd)
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(name).stem)[:64] or "jobs"
    with tempfile.TemporaryDirectory(prefix="hadar-submit-") as tmp:
        path = Path(tmp) / f"{stem}{suffix}"
        path.write_text(text)
        try:
            jobs = read_jobs(path)
        except InputError as e:  # name the submitted file, not the temporary copy
            raise InputError(str(e).replace(str(path), name).replace(path.name, name)) from None
    check_limits(jobs, name)
    jobs = [_relocated(job, folders) for job in jobs]
    if any(job.train is not None and _relative_file(job.train.entrypoint) for job in jobs) and not folders:
        raise InputError(f"{name}: an entrypoint names a relative file; send base_dir (hadar submit does) or "
                         "give an absolute path")
    return prepare_jobs(jobs, max_arrival_s=None)


def _relocated(job: Job, folders: tuple[str, ...]) -> Job:
    """``job`` with its entrypoint looked up in ``folders`` (the parser put the temporary copy's there)."""
    if job.train is None:
        return job
    return dataclasses.replace(job, train=dataclasses.replace(job.train, search_path=folders))


def _relative_file(entrypoint: str) -> bool:
    target = entrypoint.strip().rpartition(":")[0]
    return (target.endswith(".py") or "/" in target) and not Path(target).expanduser().is_absolute()


def identity(job: Job) -> tuple[str, str, str]:
    """What jobs sharing a name (their throughput key) must share: the function (its resolved file or
    module), ``args`` and ``emulate_as``. ``job`` is resolved (it has a train spec)."""
    spec = job.train
    assert spec is not None
    try:
        where = str(parse_entrypoint(spec.entrypoint, spec.search_path))
    except InputError:  # a stored job whose file is gone: compare the text
        where = spec.entrypoint
    return where, spec.args_json, spec.emulate_as


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
    """A short name: the job's ``name`` (a bundled workload's: its alias), else its job type."""
    given = job.train.name if job.train is not None else ""
    return (given or job.job_type)[:128]


def to_new_jobs(jobs: Sequence[Job], now_s: float) -> list[NewJob]:
    """Jobs as the store keeps them: arrival moved to service time (``now_s`` + the file's arrival_s)."""
    out = []
    for job in jobs:
        spec = {f.name: getattr(job, f.name) for f in dataclasses.fields(Job) if f.name not in ("job_id", "train")}
        spec["arrival_s"] = now_s + float(job.arrival_s)
        if job.train is not None:
            spec["train"] = dataclasses.asdict(job.train)
        out.append(NewJob(job_name(job), job.job_type, job.scale_factor, float(job.total_steps), spec,
                          now_s, spec["arrival_s"]))
    return out


def job_from_spec(job_id: int, spec: dict[str, Any]) -> Job:
    """The ``Job`` a stored spec describes (the inverse of ``to_new_jobs``), resolved for the runtime (a spec
    stored before jobs had entrypoints gets its bundled workload's). ``InputError`` if it cannot be."""
    from hadar.runtime.workloads import resolve_job

    known = {f.name for f in dataclasses.fields(Job)} - {"job_id"}
    fields = {k: v for k, v in spec.items() if k in known}
    train = fields.get("train")
    if isinstance(train, dict):
        args = {k: v for k, v in train.items() if k in _TRAIN_FIELDS}
        args["search_path"] = tuple(args.get("search_path", ()))
        fields["train"] = TrainSpec(**args)
    if "extra" in fields:  # a CSV's extra columns: (name, value) pairs, lists once stored as JSON
        fields["extra"] = tuple((str(k), str(v)) for k, v in fields["extra"])
    return resolve_job(Job(job_id=job_id, **fields))


def parse_submission(text: str, name: str, now_s: float, base_dir: str | None, cwd: str | None,
                     check_fits: Callable[[Sequence[Job]], None]) -> list[NewJob]:
    """Everything a submission must pass before it is stored; ``check_fits`` raises for a job the
    cluster can never run."""
    jobs = parse_job_file(text, name, base_dir, cwd)
    check_fits(jobs)
    return to_new_jobs(jobs, now_s)
