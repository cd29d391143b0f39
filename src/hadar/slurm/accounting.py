"""GPU-seconds per job and GPU type from Slurm's accounting (``sacct --json``), independent of its billing.

sacct keeps one record per Slurm job; its allocated TRES name the typed GPUs (``gres`` ``gpu:v100``, count
N) when ``AccountingStorageTRES`` lists the typed GRES (``gres/gpu:v100,...``). A lease's GPU-seconds are
its elapsed seconds times that count, per type; a hadar job's are the sum over its leases (the lease
records map Slurm ids to hadar jobs). Without accounting (``AccountingStorageType=accounting_storage/none``)
sacct answers an error: the run's outputs then say why instead of the figures.
"""

from __future__ import annotations

import csv
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from hadar.slurm.commands import Slurm, SlurmError

log = logging.getLogger(__name__)
WAIT_S = 30.0  # how long an ended job's record may take to reach the accounting database
CSV = "accounting.csv"


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One Slurm job as sacct accounts it: its node(s), final state, elapsed seconds and GPU-seconds of each
    GPU type it held."""

    slurm_job: int
    job: int  # hadar's job id (-1: not a lease of this run)
    nodes: str
    state: str
    elapsed_s: float
    gpu_type: str
    gpus: int
    gpu_s: float


def typed_gpus(tres: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """GPU type -> count, from one record's allocated TRES (``gres`` ``gpu:TYPE``; the untyped total is left out)."""
    out: dict[str, int] = {}
    for t in tres:
        name = str(t.get("name") or "")
        if t.get("type") == "gres" and name.startswith("gpu:"):
            out[name.split(":", 1)[1]] = out.get(name.split(":", 1)[1], 0) + int(t.get("count") or 0)
    return out


def parse(rec: Mapping[str, Any], job_of: Mapping[int, int]) -> list[UsageRecord]:
    """The usage of one ``sacct --json`` job record, one row per GPU type it held (none: no typed GPUs)."""
    slurm_job = int(rec["job_id"])
    state = rec.get("state") or {}
    state = str(state.get("current", "")) if isinstance(state, Mapping) else str(state)
    elapsed = float((rec.get("time") or {}).get("elapsed") or 0)
    allocated = (rec.get("tres") or {}).get("allocated") or []
    return [UsageRecord(slurm_job, job_of.get(slurm_job, -1), str(rec.get("nodes", "")), state, elapsed, t, n,
                        elapsed * n) for t, n in sorted(typed_gpus(allocated).items())]


def read(slurm: Slurm, job_of: Mapping[int, int], wait_s: float = WAIT_S) -> list[UsageRecord]:
    """The usage of Slurm jobs ``job_of`` (Slurm id -> hadar job), once sacct has an ended record of each (or
    ``wait_s`` passed); ``SlurmError`` if Slurm keeps no accounting."""
    ids = sorted(job_of)
    if not ids:
        return []
    deadline = time.monotonic() + wait_s
    while True:
        data = slurm.json("sacct", "--jobs=" + ",".join(str(i) for i in ids), "--allusers")
        recs = {int(r["job_id"]): r for r in data.get("jobs") or [] if int(r.get("job_id", -1)) in job_of}
        done = all(int((r.get("time") or {}).get("end") or 0) > 0 for r in recs.values())
        if (len(recs) == len(ids) and done) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    if len(recs) < len(ids):
        log.warning("sacct has no record of %d of %d Slurm jobs", len(ids) - len(recs), len(ids))
    return [u for i in sorted(recs) for u in parse(recs[i], job_of)]


def by_job(usage: Iterable[UsageRecord]) -> dict[str, dict[str, float]]:
    """hadar job id -> GPU type -> GPU-seconds (the jobs of this run only)."""
    out: dict[str, dict[str, float]] = {}
    for u in usage:
        if u.job >= 0:
            types = out.setdefault(str(u.job), {})
            types[u.gpu_type] = types.get(u.gpu_type, 0.0) + u.gpu_s
    return out


def of_leases(slurm: Slurm, leases: Sequence[Mapping[str, Any]]) -> tuple[list[UsageRecord], str]:
    """The usage of a run's leases (their records' ``slurm_job`` and ``job``), and why there is none ("" if there
    is)."""
    job_of = {int(r["slurm_job"]): int(r["job"]) for r in leases if r.get("slurm_job") is not None}
    try:
        return read(slurm, job_of), ""
    except SlurmError as e:
        return [], f"sacct: {e}"


def write_csv(usage: Iterable[UsageRecord], path: Path) -> None:
    with Path(path).open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([fl.name for fl in fields(UsageRecord)])
        for u in usage:
            w.writerow(list(asdict(u).values()))
