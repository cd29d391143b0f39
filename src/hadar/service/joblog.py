"""Per-job logs: one file per job, ``STATE/logs/job-<id>.log``, the one log ``hadar logs`` shows.

The runtime writes to it what each lease printed, warnings and the full traceback of every
failed lease (``runtime.progress.JobProgress.write_log``); the service adds one line per
scheduler event of the job once the event is committed to the store (arrival, lease,
merge, resume after a restart, finish, failure, cancellation), with its service time.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hadar.runtime.progress import log_path

log = logging.getLogger(__name__)
MAX_READ_BYTES = 1 << 20  # ``read`` looks at most at a log's last MiB

#: Event kinds written to a job's log, and how (a failed lease's error and traceback are the runtime's).
FORMATS = {
    "arrival": "arrived ({job_type}, {scale_factor} GPU(s))",
    "resumed": "resumed after a restart from its checkpoint at {progress:g} steps",
    "lease": "lease on GPUs {gpus}: {iterations} iterations, progress {progress_from:g} -> {progress_to:g} steps"
             "{restored_text}",
    "merge": "copies {copies} merged: progress {progress_to:g} steps",
    "finish": "finished",
    "job_failed": "failed: {error}",
    "cancelled": "cancelled",
}


def line(event: dict[str, Any]) -> str | None:
    """The log line of one event (None: not a job event the log shows)."""
    fmt = FORMATS.get(str(event.get("event", "")))
    if fmt is None:
        return None
    data = {**event, "restored_text": " (restored from checkpoint)" if event.get("restored") else ""}
    try:
        text = fmt.format(**data)
    except (KeyError, ValueError, IndexError):
        text = f"{event.get('event')} {json.dumps(event, sort_keys=True, default=str)}"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    return f"=== {stamp} [{float(event.get('t') or 0.0):.1f} s] {text}\n"


def append(folder: Path, events: Iterable[dict[str, Any]]) -> None:
    """Add the lines of ``events`` (committed already) to their jobs' logs. A log that cannot be written
    is reported, never fatal: the store stays the record."""
    by_job: dict[int, list[str]] = {}
    for e in events:
        job, text = e.get("job"), line(e)
        if isinstance(job, int) and text is not None:
            by_job.setdefault(job, []).append(text)
    for job, lines in by_job.items():
        path = log_path(folder, job)
        assert path is not None
        try:
            with path.open("a") as f:
                f.write("".join(lines))
        except OSError as e:
            log.warning("cannot write the log of job %d (%s): %s", job, path, e)


def read(folder: Path, job_id: int, limit: int = 1000) -> list[str]:
    """The last ``limit`` lines of the job's log ([] before it has one)."""
    path = log_path(folder, job_id)
    assert path is not None
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - MAX_READ_BYTES))
            data = f.read()
    except FileNotFoundError:
        return []
    lines = data.decode(errors="replace").splitlines()
    if size > MAX_READ_BYTES:
        lines = lines[1:]  # the first one is cut
    return lines[-limit:]
