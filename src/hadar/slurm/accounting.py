"""GPU-seconds per job and GPU type from Slurm's accounting (``sacct --json``), independent of its billing.

sacct keeps one record per Slurm job; its allocated TRES name the typed GPUs (``gres`` ``gpu:v100``, count
N) when ``AccountingStorageTRES`` lists the typed GRES (``gres/gpu:v100,...``). A lease's GPU-seconds are
its elapsed seconds times that count, per type; a hadar job's are the sum over its leases (the lease
records map Slurm ids to hadar jobs). Without accounting (``AccountingStorageType=accounting_storage/none``)
sacct answers an error: the run's outputs then say why instead of the figures.

``SacctFeed`` is ``hadar serve --slurm``'s side: at round boundaries it reads the ended records of the service's
own Slurm jobs (their names carry its run id) from a window that starts where its last read left off, and hands
them to the service's store, which keeps each (Slurm job, GPU type) once, so a restarted service reading the
same records again counts nothing twice.
"""

from __future__ import annotations

import csv
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from hadar.slurm.commands import Slurm, SlurmError

log = logging.getLogger(__name__)
WAIT_S = 30.0  # how long an ended job's record may take to reach the accounting database
CSV = "accounting.csv"
POLL_S = 5.0  # the service reads sacct at most this often (its idle engine's boundaries come every 0.5 s)
MARGIN_S = 120.0  # each read's window starts this long before the last read (records reach the database late)
_NAME = re.compile(r"^hadar-(?P<run>[0-9a-f]{8})-j(?P<job>\d+)-c(?P<copy>\d+)-r(?P<round>\d+)$")
_LIVE = ("PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED")


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


@dataclass(frozen=True, slots=True)
class Accounted:
    """One ended Slurm job of a service, one row per GPU type: sacct's usage and when it ended (Unix seconds)."""

    usage: UsageRecord
    end_at: float


def own_records(data: Mapping[str, Any], run_id: str) -> tuple[list[Accounted], set[int], set[int]]:
    """The rows of ``run_id``'s ended Slurm jobs in one ``sacct --json`` answer, the ids of those ended jobs
    (with or without typed GPUs: a lease cancelled before it started has none) and of those not ended yet."""
    rows: list[Accounted] = []
    ended: set[int] = set()
    live: set[int] = set()
    for rec in data.get("jobs") or []:
        m = _NAME.match(str(rec.get("name", "")))
        if m is None or m["run"] != run_id[:8]:
            continue
        end = float((rec.get("time") or {}).get("end") or 0)
        usage = parse(rec, {int(rec["job_id"]): int(m["job"])})
        state = usage[0].state if usage else str((rec.get("state") or {}).get("current", ""))
        if end <= 0 or state in _LIVE:
            live.add(int(rec["job_id"]))
            continue
        ended.add(int(rec["job_id"]))
        rows.extend(Accounted(u, end) for u in usage)
    return rows, ended, live


def local_time(t: float) -> str:
    """A Unix time as Slurm's commands read a time (local, to the second)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


class SacctFeed:
    """Reads the ended records of ``run_id``'s Slurm jobs from sacct and hands the new ones to ``keep(rows,
    since)``, which stores them with the window's next start (``since``, Unix seconds) in one transaction.

    It reads at most every ``POLL_S`` seconds, and only while something is to be read: at its first call, while
    a job it saw is not ended, or when ``poll`` is given Slurm ids it has no ended record of. Without accounting
    (sacct answers an error) it stops reading and ``off`` says why."""

    def __init__(self, slurm: Slurm, run_id: str, since: float, keep: Callable[[list[Accounted], float], None],
                 poll_s: float = POLL_S) -> None:
        self.slurm, self.run_id, self.since, self.keep, self.poll_s = slurm, run_id, since, keep, poll_s
        self.ended: set[int] = set()
        self.live: set[int] | None = None  # None: not read yet
        self.last, self.off = -math.inf, ""

    def poll(self, submitted: Iterable[int] = ()) -> int:
        """Read sacct if due (see the class docstring); how many rows were handed on."""
        waiting = set(submitted) - self.ended
        due = self.live is None or bool(self.live) or bool(waiting)
        if self.off or not due or time.monotonic() - self.last < self.poll_s:
            return 0
        self.last, read_at = time.monotonic(), time.time()
        data = self._read()
        if data is None:
            return 0
        rows, ended, self.live = own_records(data, self.run_id)
        new = [r for r in rows if r.usage.slurm_job not in self.ended]
        self.ended |= ended
        self.since = read_at
        self.keep(new, read_at)
        return len(new)

    def _read(self) -> Mapping[str, Any] | None:
        """sacct's records of the window (None: it failed; without accounting, ``off`` says why)."""
        try:
            return self.slurm.json("sacct", "--allusers", f"--starttime={local_time(self.since - MARGIN_S)}")
        except SlurmError as e:
            if "nothing found" in str(e).lower():  # sacct's answer to a window without jobs
                return {"jobs": []}
            if self.live is None:  # no accounting: the service counts its rounds instead
                self.off = str(e)
                log.warning("no usage from sacct (%s): usage comes from the recorded rounds", e)
            else:
                log.warning("reading sacct failed: %s", e)
            return None
