"""Turning a public cluster trace (Philly, Helios, Alibaba PAI, ...) into a hadar CSV job list.

A real trace gives when each job was submitted, how many GPUs it asked for and how long it
ran, but not which model it trained nor on which GPU type. The import keeps the first three and
fills in the rest by fixed, documented rules (docs/traces.md):

- arrivals: seconds after the first selected submission (so the first job arrives at 0);
- GPUs: the count the throughput table has nearest to the trace's (ties: the larger), capped at
  the largest count the table has;
- job type: ``sha256(f"{seed}:{source_row}")`` modulo the number of job types the table has for
  that GPU count (sorted by name): the same row of the same file gets the same type in every
  window, and another ``--seed`` draws another assignment;
- steps: the real duration times the job's throughput on its best GPU type, so its best-type
  time alone on the cluster equals its real duration.

The source's own fields and its row number (``source_row``, the line in the file) are kept as
extra columns, which ``read_jobs`` carries and ``jobs.csv`` writes back.
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from hadar.errors import InputError
from hadar.job.spec import TRAIN_FIELDS
from hadar.model.throughput import ThroughputTable

#: the columns every imported list starts with (then source_row and the source's own columns)
JOB_COLUMNS = ("job_type", "scale_factor", "total_steps", "arrival_s")
RESERVED = frozenset(JOB_COLUMNS) | {"priority_weight", "source_row"} | set(TRAIN_FIELDS)
#: what ``--map`` may name: the trace's column for each
MAP_KEYS = ("arrival", "gpus", "duration", "job_type")


@dataclass(frozen=True, slots=True)
class ColumnMap:
    """Which column of the source holds each input: submission time (seconds or an ISO date and
    time), GPUs asked for, seconds run, and optionally the job type (a name in the table)."""

    arrival: str
    gpus: str
    duration: str
    job_type: str = ""


PHILLY = ColumnMap(arrival="timestamp", gpus="num_gpus", duration="duration")
PHILLY_GROUP = "cluster"  # the virtual cluster's hash


@dataclass(frozen=True, slots=True)
class Selection:
    """Which jobs: rows whose ``where`` columns equal the values, submitted at or after ``start``
    (default: the first submission) and within ``days`` of it, or the first ``jobs`` of them."""

    where: tuple[tuple[str, str], ...] = ()
    start: str = ""
    days: float | None = None
    jobs: int | None = None


@dataclass(frozen=True, slots=True)
class _Row:
    line: int
    when: float  # seconds on the trace's own time axis
    fields: Mapping[str, str]


def parse_map(text: str) -> ColumnMap:
    """``arrival=COL,gpus=COL,duration=COL[,job_type=COL]`` (``--map``)."""
    pairs: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, col = part.partition("=")
        if not sep or not col.strip() or key.strip() not in MAP_KEYS:
            raise InputError(f"--map: expected KEY=COLUMN with KEY one of {', '.join(MAP_KEYS)}, got {part!r}")
        pairs[key.strip()] = col.strip()
    missing = [k for k in MAP_KEYS[:3] if k not in pairs]
    if missing:
        raise InputError(f"--map: missing {', '.join(missing)} (the trace's column for each)")
    return ColumnMap(**pairs)


def parse_where(items: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """``COL=VALUE`` filters (``--where``)."""
    out = []
    for item in items:
        col, sep, value = item.partition("=")
        if not sep or not col.strip():
            raise InputError(f"--where: expected COLUMN=VALUE, got {item!r}")
        out.append((col.strip(), value.strip()))
    return tuple(out)


def import_trace(path: str | Path, columns: ColumnMap, selection: Selection, table: ThroughputTable,
                 seed: int = 0) -> list[dict[str, str]]:
    """The selected jobs of a CSV trace as rows of a hadar CSV job list (``write_rows``), in arrival order."""
    p = Path(path)
    rows = _select(_read(p, columns, selection.where), selection, p.name)
    if not rows:
        raise InputError(f"{p.name}: no jobs in the selected window")
    origin = rows[0].when
    counts = sorted({k for _, k in table.rates})
    return [_convert(r, r.when - origin, columns, table, counts, seed, p.name) for r in rows]


def write_rows(rows: Sequence[Mapping[str, str]], out: str | Path) -> None:
    """Write a CSV job list: the job columns, then ``source_row`` and the source's columns (renamed
    ``src_NAME`` where a name is one hadar reads)."""
    header = list(dict.fromkeys(k for r in rows for k in r))
    with Path(out).open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerows(rows)


def _read(p: Path, columns: ColumnMap, where: Sequence[tuple[str, str]]) -> Iterator[_Row]:
    if not p.is_file():
        raise InputError(f"trace file not found: {p}")
    try:
        with p.open(newline="") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            wanted = [c for c in (columns.arrival, columns.gpus, columns.duration, columns.job_type) if c]
            lacking = [c for c in wanted + [c for c, _ in where] if c not in header]
            if lacking:
                raise InputError(f"{p.name}: no column {lacking[0]!r} (columns: {', '.join(header) or 'none'})")
            for line, rec in enumerate(reader, start=2):
                if None in rec or any(v is None for v in rec.values()):
                    raise InputError(f"{p.name}:{line}: expected {len(header)} cells")
                if all(rec[c].strip() == v for c, v in where):
                    yield _Row(line, _time(rec[columns.arrival], f"{p.name}:{line}", columns.arrival), rec)
    except UnicodeDecodeError:
        raise InputError(f"{p.name}: not a text file") from None


def _time(text: str, where: str, name: str) -> float:
    """Seconds: a number as is, an ISO date/time as seconds since 1970 (naive times taken as they are)."""
    text = text.strip()
    try:
        return _finite(float(text), where, name)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InputError(f"{where}: {name} must be seconds or an ISO date and time, got {text!r}") from None
    return (when.replace(tzinfo=None) - datetime(1970, 1, 1)) / timedelta(seconds=1)


def _finite(value: float, where: str, name: str) -> float:
    if value != value or value in (float("inf"), float("-inf")):
        raise InputError(f"{where}: {name} must be a finite number, got {value}")
    return value


def _select(rows: Iterable[_Row], sel: Selection, name: str) -> list[_Row]:
    if sel.days is not None and not sel.days > 0:
        raise InputError(f"--days must be positive, got {sel.days:g}")
    if sel.jobs is not None and sel.jobs < 1:
        raise InputError(f"--jobs must be at least 1, got {sel.jobs}")
    ordered = sorted(rows, key=lambda r: (r.when, r.line))
    if not ordered:
        what = " and ".join(f"{c}={v}" for c, v in sel.where)
        raise InputError(f"{name}: no jobs" + (f" with {what}" if what else ""))
    start = _time(sel.start, "--start", "the start") if sel.start else ordered[0].when
    chosen = [r for r in ordered if r.when >= start]
    if sel.days is not None:
        chosen = [r for r in chosen if r.when < start + sel.days * 86400.0]
    return chosen[:sel.jobs] if sel.jobs is not None else chosen


def _convert(row: _Row, arrival_s: float, columns: ColumnMap, table: ThroughputTable, counts: Sequence[int],
             seed: int, name: str) -> dict[str, str]:
    where = f"{name}:{row.line}"
    gpus = _number(row.fields[columns.gpus], where, columns.gpus)
    duration = _number(row.fields[columns.duration], where, columns.duration)
    k = nearest_count(gpus, counts)
    job_type = row.fields[columns.job_type].strip() if columns.job_type else assign_type(table, k, seed, row.line)
    if not table.has(job_type, k):
        raise InputError(f"{where}: job type {job_type!r} on {k} GPU(s) is not in {table.source or 'the table'}")
    best = max(table.get(job_type, k, t) for t in table.gpu_types)
    if best <= 0:
        raise InputError(f"{where}: job type {job_type!r} on {k} GPU(s) runs on no GPU type of the table")
    out = {"job_type": job_type, "scale_factor": str(k), "total_steps": repr(duration * best),
           "arrival_s": repr(arrival_s), "source_row": str(row.line)}
    for col, value in row.fields.items():
        out[f"src_{col}" if col in RESERVED else col] = value
    return out


def _number(text: str, where: str, name: str) -> float:
    try:
        value = _finite(float(text), where, name)
    except ValueError:
        raise InputError(f"{where}: {name} must be a number, got {text.strip()!r}") from None
    if value <= 0:
        raise InputError(f"{where}: {name} must be positive, got {text.strip()!r}")
    return value


def nearest_count(gpus: float, counts: Sequence[int]) -> int:
    """The count in ``counts`` nearest to ``gpus`` (ties: the larger), capped at the largest."""
    return min(counts, key=lambda c: (abs(c - gpus), -c))


def assign_type(table: ThroughputTable, k: int, seed: int, source_row: int) -> str:
    """The documented, seeded job type of a trace row: a hash of (seed, row) picks one of the
    table's job types that have a ``k``-GPU entry, sorted by name."""
    eligible = sorted(jt for jt, c in table.rates if c == k)
    digest = hashlib.sha256(f"{seed}:{source_row}".encode()).digest()
    return eligible[int.from_bytes(digest[:8], "big") % len(eligible)]
