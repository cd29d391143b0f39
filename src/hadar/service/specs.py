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

import csv
import dataclasses
import math
import re
import tempfile
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from hadar.errors import InputError
from hadar.job.entrypoint import parse as parse_entrypoint
from hadar.model.job import Job, TrainSpec
from hadar.service.store import NewJob

MAX_FILE_BYTES = 1 << 20  # a submitted job file larger than this is refused
MAX_BODY_BYTES = 2 << 20  # a request body larger than this is refused (413): the file, JSON-escaped
MAX_JOBS_PER_SUBMISSION = 1000
MAX_TOTAL_STEPS = 1e9
MAX_ARRIVAL_DELAY_S = 7 * 86400.0  # arrival_s in a submitted file: seconds after the submission
MAX_YAML_VALUES = 200_000  # YAML aliases may not expand a file past this many values (a "billion laughs")
MAX_YAML_DEPTH = 32  # a job file's fields need 4 levels; args may nest the rest
MAX_NAME_CHARS = 128
#: (field, lowest, highest) of the other numbers a job may give: a long-running service refuses absurd ones
BOUNDS = (("priority_weight", 1e-6, 1e6), ("restart_s", 0.0, 86400.0), ("slo", 0.0, 1e6))
MAX_FAILURES = 1000
#: Unicode categories no name may hold: controls (NUL, ESC, ...), format characters (the right-to-left
#: override U+202E, zero-width spaces, ...), surrogates, line and paragraph separators.
BAD_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
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
    if suffix in (".yaml", ".json"):
        check_structure(text, name)
    with tempfile.TemporaryDirectory(prefix="hadar-submit-") as tmp, _hostile(name):
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
    with _hostile(name):
        return prepare_jobs(jobs, max_arrival_s=None)


@contextmanager
def _hostile(name: str) -> Iterator[None]:
    """What a hostile file can make the parsers raise besides ``InputError``, as ``InputError``: nesting
    deeper than Python's recursion limit, an integer of more than 4,300 digits, a CSV cell over 128 KiB."""
    try:
        yield
    except RecursionError:
        raise InputError(f"{name}: nested too deeply") from None
    except (ValueError, OverflowError, csv.Error, UnicodeError) as e:
        raise InputError(f"{name}: cannot read it: {e}") from None


def check_structure(text: str, name: str) -> None:
    """Refuse a YAML (or JSON) file nested deeper than ``MAX_YAML_DEPTH`` or whose aliases (``*name``) expand
    it past ``MAX_YAML_VALUES`` values, before the parser that builds the jobs (pure Python, and every later
    walk pays the expanded size). libyaml reads the file into nodes in a few ms."""
    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        if "nesting depth" in str(e):
            raise InputError(f"{name}: nested more than {MAX_YAML_DEPTH} levels deep") from None
        return  # the parser that builds the jobs says what is wrong with it
    except RecursionError:
        raise InputError(f"{name}: nested more than {MAX_YAML_DEPTH} levels deep") from None
    sizes: dict[int, tuple[int, int]] = {}  # node -> (expanded size, depth); an alias is the same node again
    open_: set[int] = set()  # nodes whose children are being counted: meeting one again is a cycle
    stack: list[yaml.Node] = [root] if root is not None else []
    while stack:
        node = stack[-1]
        children = [c for c in _children(node) if id(c) not in sizes]
        if id(node) not in open_ and children:
            open_.add(id(node))
            if any(id(c) in open_ for c in children):
                raise InputError(f"{name}: a YAML alias refers to a value that holds it (a cycle)")
            stack.extend(children)
            continue
        stack.pop()
        open_.discard(id(node))
        below = [sizes.get(id(c), (1, 1)) for c in _children(node)]
        sizes[id(node)] = (1 + sum(n for n, _ in below), 1 + max((d for _, d in below), default=0))
    expanded, depth = sizes.get(id(root), (0, 0))
    if depth > MAX_YAML_DEPTH:
        raise InputError(f"{name}: nested more than {MAX_YAML_DEPTH} levels deep")
    if expanded > max(MAX_YAML_VALUES, len(sizes)):
        raise InputError(f"{name}: its YAML aliases expand it to {expanded:,} values; at most {MAX_YAML_VALUES:,}")


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


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
    """What a long-running service must refuse: NaN, infinities, absurd sizes, delays and weights, names
    holding control or format characters."""
    if len(jobs) > MAX_JOBS_PER_SUBMISSION:
        raise InputError(f"{name}: {len(jobs)} jobs in one submission; at most {MAX_JOBS_PER_SUBMISSION}")
    for job in jobs:
        where = job.origin or f"{name}: job {job.job_id}"
        _check_numbers(job, where)
        spec = job.train
        texts = [("name", spec.name), ("quality", spec.quality), ("emulate_as", spec.emulate_as)] if spec else []
        texts += [("job_type", job.job_type), ("entity", job.entity), *[(f"column {k!r}", v) for k, v in job.extra]]
        for field, value in texts:
            check_text(value, f"{where}: {field}")
        for field, value in (("name", spec.name if spec else ""), ("job_type", job.job_type)):
            if len(value) > MAX_NAME_CHARS:
                raise InputError(f"{where}: {field} has {len(value)} characters; at most {MAX_NAME_CHARS}")


def _check_numbers(job: Job, where: str) -> None:
    for field, value in (("total_steps", job.total_steps), ("arrival_s", job.arrival_s),
                         ("priority_weight", job.priority_weight)):
        if not math.isfinite(float(value)):
            raise InputError(f"{where}: {field} must be a finite number, got {value}")
    if job.total_steps > MAX_TOTAL_STEPS:
        raise InputError(f"{where}: total_steps {job.total_steps:g} is more than {MAX_TOTAL_STEPS:g}")
    if job.arrival_s > MAX_ARRIVAL_DELAY_S:
        raise InputError(f"{where}: arrival_s {job.arrival_s:g} is more than {MAX_ARRIVAL_DELAY_S:g} s "
                         "after the submission")
    for field, low, high in BOUNDS:
        value = getattr(job, field)
        if value is not None and not low <= value <= high:
            raise InputError(f"{where}: {field} {value:g} is outside {low:g} .. {high:g}")
    if job.train is not None and job.train.max_failures > MAX_FAILURES:
        raise InputError(f"{where}: max_failures {job.train.max_failures} is more than {MAX_FAILURES}")


def text_problem(value: str) -> str | None:
    """Why ``value`` may not be a name (its first control, format, surrogate or separator character), or None."""
    for i, c in enumerate(value):
        if unicodedata.category(c) in BAD_CATEGORIES:
            label = unicodedata.name(c, "") or ("a surrogate" if 0xD800 <= ord(c) <= 0xDFFF else "a control")
            return f"holds U+{ord(c):04X} ({label.lower()}) at position {i}: no control or format characters"
    return None


def check_text(value: str, what: str) -> None:
    problem = text_problem(value)
    if problem is not None:
        raise InputError(f"{what} {problem}")


def job_name(job: Job) -> str:
    """A short name: the job's ``name`` (a bundled workload's: its alias), else its job type."""
    given = job.train.name if job.train is not None else ""
    return (given or job.job_type)[:MAX_NAME_CHARS]


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
