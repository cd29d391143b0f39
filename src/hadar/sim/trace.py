"""Reading and writing workloads: Gavel's 10-column traces and our CSV/YAML job lists."""

from __future__ import annotations

import csv
import math
from dataclasses import replace
from importlib import resources
from pathlib import Path

import yaml

from hadar.errors import InputError
from hadar.job.spec import TRAIN_FIELDS, job_fields
from hadar.model.efficiency import Efficiency, default_efficiency, family_of, parse_points
from hadar.model.job import Job

GAVEL_COLUMNS = 10
BUNDLED_TRACES = ("small_test", "medium_test", "artifact_evaluation", "debug", "debug_v2",
                  "highmem_test", "max_min_fairness", "minimize_makespan")


def resolve_trace_path(name: str) -> Path | None:
    """A bundled trace by name (``small_test`` or ``small_test.trace``), else None."""
    stem = name.removesuffix(".trace")
    if stem in BUNDLED_TRACES and not Path(name).exists():
        return Path(str(resources.files("hadar.data").joinpath("traces", f"{stem}.trace")))
    return None


def read_jobs(path: str | Path) -> list[Job]:
    """Read a workload by extension: ``.trace`` (Gavel), ``.csv``, ``.yaml``/``.yml``/``.json``."""
    p = resolve_trace_path(str(path)) or Path(path)
    if not p.is_file():
        raise InputError(f"trace file not found: {p}")
    suffix = p.suffix.lower()
    if suffix in (".csv",):
        jobs = _read_csv(p)
    elif suffix in (".yaml", ".yml", ".json"):
        jobs = _read_yaml(p)
    else:
        jobs = read_trace(p)
    if not jobs:
        raise InputError(f"{p}: no jobs in file")
    return jobs


def read_trace(path: str | Path) -> list[Job]:
    """Parse Gavel's format; job ids are 0.. in file order. Errors name file and line."""
    p = Path(path)
    jobs: list[Job] = []
    last_arrival = 0.0
    try:
        text = p.read_text()
    except UnicodeDecodeError:
        raise InputError(f"{p}: not a text file") from None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{p.name}:{lineno}"
        fields = line.split("\t")
        if len(fields) != GAVEL_COLUMNS:
            raise InputError(f"{where}: expected {GAVEL_COLUMNS} tab-separated fields, got {len(fields)}")
        jt, command, workdir, steps_arg, needs_data, steps, sf, weight, slo, arrival = fields
        if not jt.strip():
            raise InputError(f"{where}: empty job type")
        total_steps = _number(steps, "total_steps", where, integer=True)
        scale = _number(sf, "scale_factor", where, integer=True)
        arrival_s = _number(arrival, "arrival time", where)
        if arrival_s < last_arrival:
            raise InputError(f"{where}: arrival time {arrival_s} is earlier than the previous line's {last_arrival}")
        last_arrival = arrival_s
        slo_v = _number(slo, "SLO", where)
        weight_v = _number(weight, "priority_weight", where)
        jobs.append(_job(len(jobs), jt.strip(), scale, total_steps, arrival_s, weight_v,
                         where, slo=None if slo_v < 0 else slo_v, command=command, working_directory=workdir,
                         num_steps_arg=steps_arg, needs_data_dir=_number(needs_data, "needs_data_dir", where) != 0))
    return jobs


def write_trace(jobs: list[Job], path: str | Path) -> None:
    """Write Gavel's 10-column format (round-trips ``read_trace``)."""
    lines = []
    for j in sorted(jobs, key=lambda j: (j.arrival_s, j.job_id)):
        lines.append("\t".join([
            j.job_type, j.command, j.working_directory, j.num_steps_arg, str(int(j.needs_data_dir)),
            str(round(j.total_steps)), str(j.scale_factor), f"{j.priority_weight:g}",
            f"{-1.0 if j.slo is None else j.slo:f}", f"{j.arrival_s:g}",
        ]))
    Path(path).write_text("\n".join(lines) + "\n")


def _number(text: str, name: str, where: str, integer: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{where}: {name} must be a number, got {text.strip()!r}") from None
    if not math.isfinite(value):
        raise InputError(f"{where}: {name} must be a finite number, got {text.strip()!r}")
    if integer and value != int(value):
        raise InputError(f"{where}: {name} must be an integer, got {text.strip()!r}")
    return int(value) if integer else value


def _job(job_id: int, job_type: str, sf: float, steps: float, arrival: float, weight: float, where: str,
         **extra: object) -> Job:
    if sf <= 0:
        raise InputError(f"{where}: scale factor must be positive, got {sf:g}")
    if steps <= 0:
        raise InputError(f"{where}: total steps must be positive, got {steps:g}")
    return Job(job_id=job_id, job_type=job_type, scale_factor=int(sf), total_steps=steps, arrival_s=arrival,
               priority_weight=weight, origin=where, **extra)  # type: ignore[arg-type]


_FIELDS = ("job_type", "scale_factor", "total_steps", "arrival_s", "priority_weight", "restart_s", "slo", "entity",
           "noise_scale", "ref_batch", "batch", "min_gpus", "max_gpus", "min_batch", "max_batch", "lr_rule")


def _from_record(rec: dict, where: str, job_id: int, folder: Path | None = None, *, carry: bool = False) -> Job:
    """One job of a CSV/YAML list: a ``job_type`` or an ``entrypoint`` (user function) job (``hadar.job.spec``).

    Fields it does not know are an error, unless ``carry`` (a CSV's extra columns): then they are
    kept, as strings in record order, in ``Job.extra``.
    """
    if not isinstance(rec, dict):
        raise InputError(f"{where}: each job must be a mapping with keys {', '.join(_FIELDS)}")
    unknown = set(rec) - set(_FIELDS) - set(TRAIN_FIELDS)
    if unknown and not carry:
        raise InputError(f"{where}: unknown job field(s): {', '.join(sorted(unknown))}")
    extra = tuple((k, str(v)) for k, v in rec.items() if k in unknown)
    if rec.get("total_steps") in (None, ""):
        raise InputError(f"{where}: missing total_steps")
    job_type, scale, train = job_fields(rec, where, job_id, folder)
    num = {k: _number(str(rec.get(k, d)), k, where) for k, d in
           (("total_steps", 0), ("arrival_s", 0), ("priority_weight", 1))}
    num["scale_factor"] = _number(str(scale), "gpus" if "gpus" in rec else "scale_factor", where)
    if num["scale_factor"] != int(num["scale_factor"]):
        raise InputError(f"{where}: scale_factor must be an integer")
    restart = rec.get("restart_s")
    restart_s = None if restart in (None, "") else _number(str(restart), "restart_s", where)
    slo = rec.get("slo")
    slo_v = None if slo in (None, "") else _number(str(slo), "slo", where)
    entity = rec.get("entity")
    efficiency = efficiency_of(rec, job_type, where)
    return _job(job_id, job_type, num["scale_factor"], num["total_steps"], num["arrival_s"],
                num["priority_weight"], where, train=train, extra=extra, restart_s=restart_s,
                slo=None if slo_v is None or slo_v < 0 else slo_v, entity="" if entity is None else str(entity).strip(),
                efficiency=efficiency, gpu_range=gpu_range_of(rec, int(num["scale_factor"]), where),
                batch_range=batch_range_of(rec, efficiency, where))


def gpu_range_of(rec: dict, scale: int, where: str) -> tuple[int, int] | None:
    """An elastic job's ``(min_gpus, max_gpus)`` (a missing end: 1, or the job's ``scale_factor``); None
    where it gives neither."""
    lo, hi = (rec.get(k) for k in ("min_gpus", "max_gpus"))
    if lo in (None, "") and hi in (None, ""):
        return None
    ends = [1 if lo in (None, "") else _number(str(lo), "min_gpus", where, integer=True),
            scale if hi in (None, "") else _number(str(hi), "max_gpus", where, integer=True)]
    return int(ends[0]), int(ends[1])


def batch_range_of(rec: dict, efficiency: Efficiency | None, where: str) -> tuple[float, float] | None:
    """An adaptive job's ``(min_batch, max_batch)`` (a missing end: the job's own batch); None where it
    gives neither."""
    lo, hi = (rec.get(k) for k in ("min_batch", "max_batch"))
    if lo in (None, "") and hi in (None, ""):
        return None
    if efficiency is None:
        raise InputError(f"{where}: min_batch/max_batch need an efficiency profile (noise_scale)")
    return (efficiency.batch if lo in (None, "") else _number(str(lo), "min_batch", where),
            efficiency.batch if hi in (None, "") else _number(str(hi), "max_batch", where))


def efficiency_of(rec: dict, job_type: str, where: str) -> Efficiency | None:
    """A job's efficiency profile from its ``noise_scale`` (``default``: its family's; else ``BN`` or
    ``FRACTION:BN`` pairs), ``ref_batch`` (M0) and ``batch`` (default: the job type's, else M0); None
    without ``noise_scale``."""
    text = str(rec.get("noise_scale") or "").strip()
    given = [k for k in ("ref_batch", "batch", "lr_rule") if rec.get(k) not in (None, "")]
    if not text:
        if given:
            raise InputError(f"{where}: {given[0]} without noise_scale")
        return None
    batch = None if rec.get("batch") in (None, "") else _number(str(rec["batch"]), "batch", where)
    rule = str(rec.get("lr_rule") or "adascale").strip()
    try:
        if text == "default":
            return replace(default_efficiency(job_type, where, batch), lr_rule=rule)
        if rec.get("ref_batch") in (None, ""):
            raise InputError("noise_scale needs ref_batch (the batch its steps are counted at)")
        ref = _number(str(rec["ref_batch"]), "ref_batch", where)
        return Efficiency(ref, (family_of(job_type)[1] or ref) if batch is None else batch, parse_points(text, where),
                          rule)
    except InputError as e:
        msg = str(e)
        raise InputError(msg if msg.startswith(where) else f"{where}: {msg}") from None


def with_restart_s(job: Job, default_s: float) -> Job:
    """The job with ``restart_s`` = ``default_s`` where it gives none (the run's ``--restart-s``)."""
    return job if job.restart_s is not None else replace(job, restart_s=default_s)


def _sorted(jobs: list[Job]) -> list[Job]:
    """Order by arrival (stable) and renumber 0.. so ids follow arrival order."""
    ordered = sorted(jobs, key=lambda j: j.arrival_s)
    return [Job(**{**{f: getattr(j, f) for f in Job.__slots__}, "job_id": i}) for i, j in enumerate(ordered)]


def _read_csv(p: Path) -> list[Job]:
    """A CSV job list; columns besides the job fields are carried in ``Job.extra`` (empty cells as "")."""
    with p.open(newline="") as f:
        reader = csv.DictReader(f)
        names = reader.fieldnames
        if names is None or not {"job_type", "entrypoint"} & set(names):
            raise InputError(f"{p.name}: CSV needs a header with at least job_type (or entrypoint),total_steps")
        if len(set(names)) != len(names) or any(not n.strip() for n in names):
            raise InputError(f"{p.name}: CSV header has an empty or repeated column name")
        known = set(_FIELDS) | set(TRAIN_FIELDS)
        jobs = []
        for n, row in enumerate(reader, start=2):
            if None in row:
                raise InputError(f"{p.name}:{n}: more cells than the header has columns")
            if any(v is None for v in row.values()):  # an empty cell reads as "", a missing one as None
                raise InputError(f"{p.name}:{n}: {sum(v is not None for v in row.values())} cells where the header "
                                 f"has {len(names)} columns (a truncated line?)")
            rec = {k: v for k, v in row.items() if (v not in (None, "") or k not in known)}
            jobs.append(_from_record({k: "" if v is None else v for k, v in rec.items()}, f"{p.name}:{n}", n - 2,
                                     p.parent, carry=True))
    return _sorted(jobs)


def _read_yaml(p: Path) -> list[Job]:
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise InputError(f"{p.name}: not valid YAML/JSON ({str(e).splitlines()[0]})") from None
    if isinstance(data, dict):
        data = data.get("jobs")
    if not isinstance(data, list):
        raise InputError(f"{p.name}: expected a list of jobs (or a mapping with a 'jobs' list)")
    return _sorted([_from_record(rec, f"{p.name}: job {i}", i, p.parent) for i, rec in enumerate(data)])
