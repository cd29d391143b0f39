"""``hadar trace import sia``: a Sia workload (SOSP'23 artifact) as a hadar trace, throughput table and cluster.

A Sia workload is a CSV ``name,time,application,num_replicas,batch_size`` (Sia's ``workloads/philly`` and
``workloads/saturn``). Each row becomes one rigid job (docs/sia.md):

- ``job_type`` ``"MODEL (batch size B)"``, ``scale_factor`` the row's GPU count, ``arrival_s`` its time;
- steps/s per GPU type from Sia's profiles on the tightest placement of that type (``sia_profiles``);
- ``total_steps`` the iterations Sia's progress model needs on the reference type (the first of the
  cluster that can run the job); another type's rate is scaled so that its time to finish is its own
  iterations at its own seconds per iteration (the batch a type really runs can differ by rounding);
- ``restart_s`` the model's restore time in Sia's simulator.

With ``efficiency`` (and for ``scale-gpus`` jobs) each job carries its efficiency profile instead
(``model/efficiency.py``): ``total_steps`` the model's final progress in reference steps (Sia's smallest
validated batch), ``noise_scale`` its ``Bn`` per epoch at the batch the reference type runs, the world
crediting the gain per step. ``scale-gpus`` jobs (Sia's meaning: the GPU count varies from 1 to the row's,
the batch stays) give ``min_gpus``/``max_gpus`` and rates for every count of that range (ncf stays rigid,
as in Sia). ``adaptive`` jobs (Sia's meaning: count and batch both adapt) have a batch range too
(``min_batch``/``max_batch``: the model's smallest and largest validated batch, ``lr_rule`` ``adascale``, as
Sia's jobs scale the learning rate; ``batch`` the row's own), and their GPU count is bounded as Sia's
simulator bounds an adaptive job's, not by the row's count: on each type at most the model's largest
validated batch over its smallest profiled per-GPU batch there, the type's GPUs and 64 (``adaptive_caps``;
``max_gpus`` the most over the types, at least the row's own). Sia grows that bound by doubling the count it
has profiled; hadar's policies read the table, so the bound holds from the start. The table holds every
validated batch ``B`` of the model (and the row's own) at every count ``n`` of the job's range as ``MODEL
(batch size B)``: per type the iterations Sia's progress model needs at ``B`` over the seconds the run of
``B`` on ``n`` GPUs takes there (the real batch can differ by rounding, as for a rigid job; 0 where the
profiles do not cover it or above the type's bound), so that each entry is a property of the model, batch,
count and type alone.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hadar.errors import InputError
from hadar.model.efficiency import format_points
from hadar.sim.sia_profiles import CLUSTER, MODELS, GpuKind, RigidRun, SiaProfile, rigid_run

WORKLOAD_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
TRACE_COLUMNS = ("job_type", "scale_factor", "total_steps", "arrival_s", "restart_s", "sia_name", "application",
                 "batch_size")
#: the columns a job with an efficiency profile adds, and an elastic one's GPU range
EFFICIENCY_COLUMNS = ("noise_scale", "ref_batch", "batch")
ELASTIC_COLUMNS = ("min_gpus", "max_gpus")
ADAPTIVE_COLUMNS = ("min_batch", "max_batch", "lr_rule")
JOB_KINDS = ("rigid", "scale-gpus", "adaptive")
#: Sia's simulator never gives a job more GPUs ("simulator can't handle more", its cluster.py)
ADAPTIVE_MAX_GPUS = 64


@dataclass(frozen=True, slots=True)
class SiaJob:
    """One workload row: its name, arrival (s), model, GPUs and global batch."""

    line: int
    name: str
    time_s: float
    model: str
    gpus: int
    batch: int

    @property
    def job_type(self) -> str:
        return f"{self.model} (batch size {self.batch})"


def read_workload(path: Path) -> list[SiaJob]:
    """The rows of a Sia workload CSV, in file order; a malformed row raises ``InputError`` naming it."""
    if not path.is_file():
        raise InputError(f"Sia workload not found: {path}")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        lacking = [c for c in WORKLOAD_COLUMNS if c not in (reader.fieldnames or [])]
        if lacking:
            raise InputError(f"{path.name}: no column {lacking[0]!r} (a Sia workload has "
                             f"{','.join(WORKLOAD_COLUMNS)})")
        jobs = [_job(rec, f"{path.name}:{line}", line) for line, rec in enumerate(reader, start=2)]
    if not jobs:
        raise InputError(f"{path.name}: no jobs")
    return jobs


def _job(rec: Mapping[str, str | None], where: str, line: int) -> SiaJob:
    if None in rec or any(v is None for v in rec.values()):
        raise InputError(f"{where}: wrong number of cells")
    model = str(rec["application"]).strip()
    if model not in MODELS:
        raise InputError(f"{where}: unknown application {model!r} (known: {', '.join(sorted(MODELS))})")
    try:
        time_s = float(str(rec["time"]))
        gpus_f, batch_f = float(str(rec["num_replicas"])), float(str(rec["batch_size"]))
    except ValueError:
        raise InputError(f"{where}: time, num_replicas and batch_size must be numbers") from None
    if not (time_s >= 0 and time_s < float("inf")):
        raise InputError(f"{where}: time must be a finite number >= 0, got {rec['time']!r}")
    for name, v in (("num_replicas", gpus_f), ("batch_size", batch_f)):
        if v != int(v) or v < 1:
            raise InputError(f"{where}: {name} must be a positive integer, got {rec[name]!r}")
    return SiaJob(line, str(rec["name"]).strip(), time_s, model, int(gpus_f), int(batch_f))


def _runs(job: SiaJob, profile: SiaProfile, kinds: Sequence[GpuKind], gpus: int) -> dict[str, RigidRun | None]:
    return {k.name: rigid_run(profile, k, gpus, job.batch) for k in kinds if gpus <= k.per_node * k.nodes}


def reference_run(job: SiaJob, profile: SiaProfile, kinds: Sequence[GpuKind]) -> RigidRun:
    """The job at its own GPU count on the first type of the cluster that can run it (its steps' unit)."""
    able = [r for r in _runs(job, profile, kinds, job.gpus).values() if r is not None]
    if not able:
        raise InputError(f"line {job.line}: {job.model} on {job.gpus} GPU(s) at batch {job.batch} "
                         "has no profile on any GPU type of the cluster")
    return able[0]


def job_rates(job: SiaJob, profile: SiaProfile, kinds: Sequence[GpuKind],
              gpus: int | None = None) -> tuple[float, dict[str, float]]:
    """(total steps, steps/s per GPU type) of one job on ``gpus`` GPUs (default: its own count); steps are
    the reference run's iterations, whatever the count."""
    steps = reference_run(job, profile, kinds).iterations
    runs = _runs(job, profile, kinds, job.gpus if gpus is None else gpus)
    rates = {k.name: 0.0 if runs.get(k.name) is None else steps / runs[k.name].seconds  # type: ignore[union-attr]
             for k in kinds}
    return steps, rates


def import_sia(workload: Path, sia_dir: Path, kinds: Sequence[GpuKind] = CLUSTER, *, jobs: str = "rigid",
               efficiency: bool = False) -> tuple[list[dict[str, str]], dict[str, dict[str, dict[str, float]]]]:
    """(trace rows in arrival order, Gavel-format throughput table) of a Sia workload; ``jobs``: every job
    ``rigid``, ``scale-gpus`` or ``adaptive``; ``efficiency``: rows carry efficiency profiles (implied by
    ``scale-gpus`` and ``adaptive``)."""
    if jobs not in JOB_KINDS:
        raise InputError(f"--jobs: unknown kind {jobs!r} (known: {', '.join(JOB_KINDS)})")
    traces = sia_dir / "traces"
    if not traces.is_dir():
        raise InputError(f"--sia-dir: no traces/ folder in {sia_dir} (want Sia's sia-simulator folder)")
    ordered = sorted(read_workload(workload), key=lambda j: (j.time_s, j.line))
    profiles: dict[str, SiaProfile] = {}
    bounds: dict[str, dict[str, int]] = {}  # model -> its adaptive jobs' GPU bound per type
    table: dict[str, dict[str, dict[str, float]]] = {k.name: {} for k in kinds}
    rows = []
    for job in ordered:
        if job.model not in profiles:
            profiles[job.model] = SiaProfile(traces / job.model, job.model)
        profile = profiles[job.model]
        elastic = jobs != "rigid" and job.model != "ncf"  # Sia keeps ncf at one GPU count
        if jobs == "adaptive" and elastic:
            if job.model not in bounds:
                bounds[job.model] = adaptive_caps(profile, kinds)
            caps = bounds[job.model]
        else:
            caps = {k.name: min(job.gpus, k.per_node * k.nodes) for k in kinds}
        top = max(job.gpus, *caps.values())
        counts = range(1, top + 1) if elastic else (job.gpus,)
        if jobs == "adaptive":
            _batch_entries(job, profile, kinds, counts, caps, table)
            steps = profile.curve.progress[-1]  # (in reference steps: the efficiency columns below)
        for n in counts if jobs != "adaptive" else ():
            steps, rates = job_rates(job, profile, kinds, n)
            for name, rate in rates.items():
                table[name][f"('{job.job_type}', {n})"] = {"null": rate}
        row = {"job_type": job.job_type, "scale_factor": str(job.gpus), "total_steps": repr(steps),
               "arrival_s": repr(job.time_s), "restart_s": repr(MODELS[job.model].restart_s),
               "sia_name": job.name, "application": job.model, "batch_size": str(job.batch)}
        if efficiency or jobs != "rigid":
            ref = reference_run(job, profile, kinds)
            row.update(total_steps=repr(profile.curve.progress[-1]), noise_scale=format_points(
                profile.noise_points(ref.batch)), ref_batch=str(profile.curve.batches[0]), batch=str(ref.batch))
        if elastic:
            row.update(min_gpus="1", max_gpus=str(top))
        if jobs == "adaptive":
            bs = profile.curve.batches
            row.update(noise_scale=format_points(profile.noise_points(job.batch)), batch=str(job.batch),
                       min_batch=str(bs[0]), max_batch=str(bs[-1]), lr_rule="adascale")
        rows.append(row)
    return rows, table


def adaptive_caps(profile: SiaProfile, kinds: Sequence[GpuKind]) -> dict[str, int]:
    """GPU type -> the most GPUs of it an adaptive job of the model may get, as Sia's simulator bounds it: the
    fewest of ``ADAPTIVE_MAX_GPUS``, the type's GPUs and the model's largest validated batch over its smallest
    profiled per-GPU batch there."""
    return {k.name: min(ADAPTIVE_MAX_GPUS, k.per_node * k.nodes,
                        int(profile.curve.batches[-1] // profile.min_local_bsz(k.suffix))) for k in kinds}


def _batch_entries(job: SiaJob, profile: SiaProfile, kinds: Sequence[GpuKind], counts: Sequence[int],
                   caps: Mapping[str, int], table: dict[str, dict[str, dict[str, float]]]) -> None:
    """An adaptive job's table entries: every validated batch of its model and the row's own at every count
    of ``counts`` (0 above a type's ``caps``, at most its GPUs; module docstring); entries already written (by
    a job of the same model) are kept: they are equal."""
    for b in sorted({*profile.curve.batches, job.batch}):  # the row's own batch too (a rigid policy runs it)
        key = f"{job.model} (batch size {b})"
        for n in counts:
            name = f"('{key}', {n})"
            if name in table[kinds[0].name]:
                continue
            steps = profile.iterations(b)
            for k in kinds:
                run = rigid_run(profile, k, n, b) if n <= caps[k.name] else None
                table[k.name][name] = {"null": 0.0 if run is None else steps / run.seconds}


def cluster_yaml(kinds: Sequence[GpuKind] = CLUSTER) -> str:
    """Sia's cluster as a hadar cluster file."""
    lines = ["# Sia's simulated cluster (its simulator config; docs/sia.md)", "nodes:"]
    lines += [f"  - {{name: {k.name}, gpu_type: {k.name}, gpus: {k.per_node}, count: {k.nodes}}}  # Sia: {k.suffix}"
              for k in kinds]
    return "\n".join(lines) + "\n"


def write_import(rows: Sequence[Mapping[str, str]], table: Mapping[str, object], out_dir: Path) -> None:
    """OUT/trace.csv, OUT/throughputs.json and OUT/cluster.yaml."""
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"--out-dir: not a folder: {out_dir}")
    if not out_dir.parent.is_dir():
        raise InputError(f"--out-dir: folder not found: {out_dir.parent}")
    out_dir.mkdir(exist_ok=True)
    with (out_dir / "trace.csv").open("w", newline="") as f:
        names = list(TRACE_COLUMNS) + [c for c in EFFICIENCY_COLUMNS + ELASTIC_COLUMNS + ADAPTIVE_COLUMNS
                                       if any(c in r for r in rows)]  # a column any row has
        w = csv.DictWriter(f, fieldnames=names)
        w.writeheader()
        w.writerows(rows)
    (out_dir / "throughputs.json").write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    (out_dir / "cluster.yaml").write_text(cluster_yaml())
