"""Where the runtime keeps job checkpoints, and how they are written and read (``hadar.job.state``).

A checkpoint is ``{"hadar": META, "state": STATE}`` (STATE: what the job's function saved),
written atomically and read with ``weights_only=True`` (a checkpoint file cannot run code).
A lease saves to ``job-N.next.pt``; the executor commits it (renames it to ``job-N.pt``) when
the lease succeeds, and ``ctx.load_state()`` reads ``job-N.pt``.
"""

from __future__ import annotations

from pathlib import Path

from hadar.job.state import load, meta_of, save_atomic


def checkpoint_path(folder: str | Path, job_id: int) -> Path:
    """The job's committed checkpoint: the state its last successful lease saved."""
    return Path(folder) / f"job-{job_id}.pt"


def pending_path(committed: str | Path) -> Path:
    """Where a lease saves (``job-N.next.pt``); the executor renames it over the committed one only if the
    lease succeeds, so a lease that saves and then fails leaves the last good checkpoint in place."""
    p = Path(committed)
    return p.with_name(f"{p.stem}.next{p.suffix}")


__all__ = ["checkpoint_path", "load", "meta_of", "pending_path", "save_atomic"]
