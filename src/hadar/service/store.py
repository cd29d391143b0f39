"""The service's durable record: one SQLite file (WAL) under the state directory.

What it holds: every submitted job (its spec, status, progress, checkpoint,
the GPUs it holds), the submissions (so a retried request is not stored
twice), the measured throughputs, the scheduler's rounds (and the wall-clock
time each was committed, ``at``) and events, and ``meta`` (schema version, the
run id that checkpoints carry, the service clock), and on Slurm sacct's record of each ended lease
(``slurm_usage``: once per Slurm job and GPU type). With teams: who submitted
each job and for which team (``owners``), the users' API tokens (``tokens``:
SHA-256 digests, never the token), and the audit log (``audit``: admin
actions, submissions, cancellations, token changes). A restarted service
rebuilds its ledger from it.

Writes: one connection, one lock, ``synchronous=FULL``: a submission, a
cancellation or a round's progress is on disk when the call returns, so
whatever the API acknowledged survives ``kill -9``. Reads: a connection per
thread (WAL lets readers run beside the writer).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hadar.errors import InputError

SCHEMA_VERSION = 1
DB_NAME = "hadar.db"
STATUSES = ("queued", "running", "done", "failed", "cancelled")
ENDED = ("done", "failed", "cancelled")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    job_type TEXT NOT NULL,
    scale_factor INTEGER NOT NULL,
    total_steps REAL NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed', 'cancelled')),
    submitted_at REAL NOT NULL,
    submitted_s REAL NOT NULL,
    arrival_s REAL NOT NULL,
    first_start_s REAL,
    finished_s REAL,
    done_steps REAL NOT NULL DEFAULT 0,
    checkpoint_steps REAL NOT NULL DEFAULT 0,
    checkpoint TEXT NOT NULL DEFAULT '',
    attained_gpu_s REAL NOT NULL DEFAULT 0,
    rounds_run INTEGER NOT NULL DEFAULT 0,
    restarts INTEGER NOT NULL DEFAULT 0,
    gpus TEXT NOT NULL DEFAULT '[]',
    steps_by_type TEXT NOT NULL DEFAULT '{}',
    failure TEXT NOT NULL DEFAULT '',
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    submission TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status);
CREATE INDEX IF NOT EXISTS jobs_type ON jobs (job_type);
CREATE TABLE IF NOT EXISTS submissions (request_id TEXT PRIMARY KEY, job_ids TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS throughputs (
    job_type TEXT NOT NULL, k INTEGER NOT NULL, gpu_type TEXT NOT NULL,
    rate REAL NOT NULL, samples INTEGER NOT NULL, steps REAL NOT NULL, seconds REAL NOT NULL,
    PRIMARY KEY (job_type, k, gpu_type)
);
CREATE TABLE IF NOT EXISTS rounds (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    start_s REAL NOT NULL, end_s REAL NOT NULL, leases TEXT NOT NULL, busy_gpus INTEGER NOT NULL,
    up_gpus INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    t REAL NOT NULL, kind TEXT NOT NULL, job_id INTEGER, data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_job ON events (job_id);
CREATE TABLE IF NOT EXISTS slurm_usage (
    slurm_job INTEGER NOT NULL, gpu_type TEXT NOT NULL, job_id INTEGER NOT NULL, nodes TEXT NOT NULL,
    state TEXT NOT NULL, elapsed_s REAL NOT NULL, gpus INTEGER NOT NULL, end_at REAL NOT NULL,
    PRIMARY KEY (slurm_job, gpu_type)
);
CREATE TABLE IF NOT EXISTS owners (job_id INTEGER PRIMARY KEY, user TEXT NOT NULL, team TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (
    id INTEGER PRIMARY KEY AUTOINCREMENT, user TEXT NOT NULL, hash TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL, revoked_at REAL
);
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, user TEXT NOT NULL, action TEXT NOT NULL,
    detail TEXT NOT NULL
);
"""

#: Columns of ``jobs`` a round updates (the ledger's view of each job).
PROGRESS_COLUMNS = ("status", "first_start_s", "finished_s", "done_steps", "checkpoint_steps", "attained_gpu_s",
                    "rounds_run", "restarts", "gpus", "steps_by_type", "failure")


#: A row of ``throughputs`` (a tracker's measured entry): job type, GPU count, GPU type, moving average
#: (steps/s), samples, total steps, total seconds.
ThroughputRow = tuple[str, int, str, float, int, float, float]
#: ``conflict(new job, stored job's id, stored job's spec)``: why they may not share a job type, or None.
Conflict = Callable[["NewJob", int, dict[str, Any]], str | None]


class StoreError(InputError):
    """The state directory's database cannot be used (another schema version, not a database)."""


@dataclass(frozen=True, slots=True)
class NewJob:
    """One job of a submission, validated: ``spec`` rebuilds the ``Job`` (its dataclass fields, no id)."""

    name: str
    job_type: str
    scale_factor: int
    total_steps: float
    spec: dict[str, Any]
    submitted_s: float  # service time of the submission
    arrival_s: float  # service time it may start: submitted_s + the file's arrival_s


@dataclass(frozen=True, slots=True)
class Submitted:
    ids: tuple[int, ...]
    duplicate: bool  # the request id was seen before: these are the ids it got then


class Store:
    """The SQLite file of one state directory (created on first use)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / DB_NAME
        self._lock = threading.Lock()
        self._local = threading.local()
        self._writer = self._connect()
        self.version = 0  # bumps at every commit (readers cache what they built from an older version)
        self._init_schema()

    # ---- connections ---------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        try:
            con = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            con.row_factory = sqlite3.Row
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=FULL")
            con.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: not a usable SQLite database ({e})") from None
        return con

    def _reader(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = self._connect()
            self._local.con = con
        return con

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE ... COMMIT): committed, on disk, when the block ends."""
        with self._lock:
            con = self._writer
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
            self.version += 1

    def _init_schema(self) -> None:
        with self._lock:
            self._writer.executescript(_SCHEMA)  # idempotent (IF NOT EXISTS); runs in its own transaction
        with self.transaction() as con:
            row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                now = time.time()
                con.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [
                    ("schema_version", str(SCHEMA_VERSION)), ("run_id", uuid.uuid4().hex),
                    ("created_at", repr(now)), ("clock_s", "0.0")])
            elif int(row["value"]) != SCHEMA_VERSION:
                raise StoreError(f"{self.path}: schema version {row['value']}, this hadar reads version "
                                 f"{SCHEMA_VERSION}; use another --state directory or the matching hadar version")
            if "at" not in {r["name"] for r in con.execute("PRAGMA table_info(rounds)")}:
                con.execute("ALTER TABLE rounds ADD COLUMN at REAL")  # a store made before rounds kept it

    def close(self) -> None:
        self._writer.close()

    # ---- meta ------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self._reader().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row["value"])

    def set_meta(self, con: sqlite3.Connection, key: str, value: str) -> None:
        con.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    (key, value))

    @property
    def run_id(self) -> str:
        value = self.meta("run_id")
        assert value is not None
        return value

    def clock_s(self) -> float:
        """Where the service clock stood at the last commit (it continues from there after a restart)."""
        row = self._reader().execute("SELECT max(submitted_s) AS a FROM jobs").fetchone()
        return max(float(self.meta("clock_s") or 0.0), float(row["a"] or 0.0))

    # ---- submissions and cancellations ---------------------------------------------------
    def submit(self, jobs: Sequence[NewJob], request_id: str, conflict: Conflict | None = None,
               owner: tuple[str, str] | None = None) -> Submitted:
        """Store every job of one submission, or none; a request id seen before returns its ids again.

        ``conflict(new, stored_id, stored_spec)``: a message if ``new`` may not share its job type (its name,
        the throughput key) with the first stored job of that type; ``InputError`` then, nothing stored.
        ``owner``: (user, team) the jobs belong to ("" team: each job's ``entity``), recorded with them and
        in the audit log."""
        now = time.time()
        with self.transaction() as con:
            seen = con.execute("SELECT job_ids FROM submissions WHERE request_id = ?", (request_id,)).fetchone()
            if seen is not None:
                return Submitted(tuple(json.loads(seen["job_ids"])), duplicate=True)
            if conflict is not None:
                _check_conflicts(con, jobs, conflict)
            ids = []
            for job in jobs:
                cur = con.execute(
                    "INSERT INTO jobs (name, job_type, scale_factor, total_steps, spec, status, submitted_at, "
                    "submitted_s, arrival_s, submission) VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?)",
                    (job.name, job.job_type, job.scale_factor, job.total_steps, json.dumps(job.spec), now,
                     job.submitted_s, job.arrival_s, request_id))
                ids.append(int(cur.lastrowid or 0))
            con.execute("INSERT INTO submissions (request_id, job_ids, at) VALUES (?, ?, ?)",
                        (request_id, json.dumps(ids), now))
            if owner is not None:  # each job's team: the owner's, else the one the job names (an admin's)
                teams = [owner[1] or str(job.spec.get("entity") or "") for job in jobs]
                con.executemany("INSERT INTO owners (job_id, user, team) VALUES (?, ?, ?)",
                                [(i, owner[0], t) for i, t in zip(ids, teams, strict=True)])
                self.add_audit(con, owner[0], "submit", {"jobs": ids, "teams": sorted(set(teams))})
        return Submitted(tuple(ids), duplicate=False)

    def request_cancel(self, job_id: int) -> str | None:
        """Mark a job for cancellation; returns its status (None: no such job). Ended jobs are left alone."""
        with self.transaction() as con:
            row = con.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                return None
            if row["status"] not in ENDED:
                con.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", (job_id,))
            return str(row["status"])

    # ---- what the scheduler writes ---------------------------------------------------------
    def update_jobs(self, con: sqlite3.Connection, rows: Iterable[dict[str, Any]]) -> None:
        """Progress of jobs (``id`` + ``PROGRESS_COLUMNS``), inside the caller's transaction."""
        sets = ", ".join(f"{c} = :{c}" for c in PROGRESS_COLUMNS)
        con.executemany(f"UPDATE jobs SET {sets} WHERE id = :id", list(rows))

    def add_round(self, con: sqlite3.Connection, start_s: float, end_s: float, leases: list[list[Any]],
                  busy: int, up: int) -> None:
        con.execute("INSERT INTO rounds (start_s, end_s, leases, busy_gpus, up_gpus, at) VALUES (?, ?, ?, ?, ?, ?)",
                    (start_s, end_s, json.dumps(leases), busy, up, time.time()))

    def add_events(self, con: sqlite3.Connection, events: Iterable[dict[str, Any]]) -> None:
        con.executemany("INSERT INTO events (t, kind, job_id, data) VALUES (?, ?, ?, ?)",
                        [(float(e.get("t") or 0.0), str(e.get("event", "")), _job_of(e), json.dumps(e, default=str))
                         for e in events])

    def save_throughputs(self, con: sqlite3.Connection, rows: Iterable[ThroughputRow]) -> None:
        con.executemany("INSERT INTO throughputs (job_type, k, gpu_type, rate, samples, steps, seconds) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (job_type, k, gpu_type) DO UPDATE SET "
                        "rate = excluded.rate, samples = excluded.samples, steps = excluded.steps, "
                        "seconds = excluded.seconds", list(rows))

    def add_slurm_usage(self, rows: Iterable[tuple[int, str, int, str, str, float, int, float]], since: float) -> int:
        """sacct's records (Slurm job, GPU type, job, nodes, state, elapsed s, GPUs, end), each (Slurm job, GPU
        type) kept once, and where sacct is read from next (``sacct_since``), in one transaction; how many new."""
        with self.transaction() as con:
            cur = con.executemany("INSERT INTO slurm_usage VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                                  list(rows))
            self.set_meta(con, "sacct_since", repr(since))
            return int(cur.rowcount)

    def slurm_usage(self, since_at: float | None = None) -> list[sqlite3.Row]:
        """sacct's records of the jobs that ended at or after ``since_at`` (None: all), by Slurm job and type."""
        return self._reader().execute("SELECT * FROM slurm_usage WHERE end_at >= ? ORDER BY slurm_job, gpu_type",
                                      (-1.0 if since_at is None else since_at,)).fetchall()

    # ---- reads ----------------------------------------------------------------------------
    def jobs(self, status: Sequence[str] | None = None) -> list[sqlite3.Row]:
        if status:
            marks = ", ".join("?" for _ in status)
            return self._reader().execute(f"SELECT * FROM jobs WHERE status IN ({marks}) ORDER BY id",
                                          tuple(status)).fetchall()
        return self._reader().execute("SELECT * FROM jobs ORDER BY id").fetchall()

    def job(self, job_id: int) -> sqlite3.Row | None:
        return self._reader().execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()

    def cancel_requested(self) -> list[int]:
        rows = self._reader().execute("SELECT id FROM jobs WHERE cancel_requested = 1 AND status NOT IN "
                                      "('done', 'failed', 'cancelled') ORDER BY id").fetchall()
        return [int(r["id"]) for r in rows]

    def throughputs(self) -> list[sqlite3.Row]:
        return self._reader().execute("SELECT * FROM throughputs ORDER BY job_type, k, gpu_type").fetchall()

    def rounds(self, since: int = 0, limit: int = 500) -> list[sqlite3.Row]:
        """Rounds with id > ``since``, the newest ``limit`` of them, oldest first."""
        rows = self._reader().execute("SELECT * FROM rounds WHERE id > ? ORDER BY id DESC LIMIT ?",
                                      (since, limit)).fetchall()
        return rows[::-1]

    def events(self, job_id: int | None = None, limit: int = 1000) -> list[sqlite3.Row]:
        """The newest ``limit`` events (of one job), oldest first."""
        if job_id is None:
            rows = self._reader().execute("SELECT * FROM events ORDER BY seq DESC LIMIT ?", (limit,)).fetchall()
        else:
            rows = self._reader().execute("SELECT * FROM events WHERE job_id = ? ORDER BY seq DESC LIMIT ?",
                                          (job_id, limit)).fetchall()
        return rows[::-1]

    # ---- teams: owners, tokens, audit -------------------------------------------------------
    def owners(self) -> dict[int, tuple[str, str]]:
        """Job id -> (user, team) of every job submitted with an owner."""
        rows = self._reader().execute("SELECT job_id, user, team FROM owners").fetchall()
        return {int(r["job_id"]): (str(r["user"]), str(r["team"])) for r in rows}

    def owner(self, job_id: int) -> tuple[str, str] | None:
        row = self._reader().execute("SELECT user, team FROM owners WHERE job_id = ?", (job_id,)).fetchone()
        return None if row is None else (str(row["user"]), str(row["team"]))

    def add_token(self, user: str, digest: str, by: str) -> None:
        with self.transaction() as con:
            con.execute("INSERT INTO tokens (user, hash, created_at) VALUES (?, ?, ?)", (user, digest, time.time()))
            self.add_audit(con, by, "token create", {"user": user})

    def revoke_tokens(self, user: str, by: str) -> int:
        """Revoke every live token of ``user``; how many there were."""
        with self.transaction() as con:
            cur = con.execute("UPDATE tokens SET revoked_at = ? WHERE user = ? AND revoked_at IS NULL",
                              (time.time(), user))
            self.add_audit(con, by, "token revoke", {"user": user, "revoked": cur.rowcount})
            return int(cur.rowcount)

    def token_user(self, digest: str) -> str | None:
        """The user whose live token has this digest (None: unknown or revoked)."""
        row = self._reader().execute("SELECT user FROM tokens WHERE hash = ? AND revoked_at IS NULL",
                                     (digest,)).fetchone()
        return None if row is None else str(row["user"])

    def add_audit(self, con: sqlite3.Connection, user: str, action: str, detail: dict[str, Any]) -> None:
        con.execute("INSERT INTO audit (at, user, action, detail) VALUES (?, ?, ?, ?)",
                    (time.time(), user, action, json.dumps(detail, default=str)))

    def audit(self, action: str, user: str, detail: dict[str, Any]) -> None:
        """One audit entry in its own transaction."""
        with self.transaction() as con:
            self.add_audit(con, user, action, detail)

    def audit_log(self, limit: int = 1000) -> list[sqlite3.Row]:
        rows = self._reader().execute("SELECT * FROM audit ORDER BY seq DESC LIMIT ?", (limit,)).fetchall()
        return rows[::-1]

    def all_rounds(self, since_at: float | None = None) -> list[sqlite3.Row]:
        """Every round (committed at or after ``since_at``, wall clock), oldest first."""
        if since_at is None:
            return self._reader().execute("SELECT * FROM rounds ORDER BY id").fetchall()
        return self._reader().execute("SELECT * FROM rounds WHERE at >= ? ORDER BY id", (since_at,)).fetchall()

    def counts(self) -> dict[str, int]:
        """Rows per table (tests compare these before and after a rejected request)."""
        con = self._reader()
        return {t: int(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
                for t in ("jobs", "submissions", "events", "rounds", "throughputs")}


def _check_conflicts(con: sqlite3.Connection, jobs: Sequence[NewJob], conflict: Conflict) -> None:
    for job in {j.job_type: j for j in reversed(jobs)}.values():  # the first job of each type
        row = con.execute("SELECT id, spec FROM jobs WHERE job_type = ? ORDER BY id LIMIT 1", (job.job_type,)
                          ).fetchone()
        message = None if row is None else conflict(job, int(row["id"]), json.loads(row["spec"]))
        if message:
            raise InputError(message)


def _job_of(event: dict[str, Any]) -> int | None:
    job = event.get("job")
    return int(job) if isinstance(job, int) else None
