"""The lease runner: runs one lease of a job's ``train(ctx)`` on one worker; no Ray needed.

``run_lease(spec, device=..., cache=...)`` sets up the gang's process group (if any), imports
the entrypoint, builds ``ctx``, calls the function with what it prints captured, and returns a
``LeaseOutcome``: iterations done, save and restore times, reported metrics, and on failure the
error and its full traceback. Nothing it does escapes as an exception: user code that raises
fails the lease, not the worker. The Ray worker actor calls it; so can a plain process
(``python -m hadar.job``).
"""

from __future__ import annotations

import io
import re
import time
import traceback
from contextlib import ExitStack, redirect_stderr, redirect_stdout
from typing import Any

from hadar.job.context import Context
from hadar.job.entrypoint import load
from hadar.job.lease import LeaseOutcome, LeaseSpec
from hadar.job.state import StateCache

OUTPUT_LIMIT = 64 * 1024  # characters of a lease's printed output kept for the job's log
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour and cursor codes."""
    return _ANSI.sub("", text)


class _Tail(io.StringIO):
    """A text sink that keeps only its last ``OUTPUT_LIMIT`` characters."""

    def write(self, s: str) -> int:
        n = super().write(s)
        if self.tell() > 2 * OUTPUT_LIMIT:
            keep = self.getvalue()[-OUTPUT_LIMIT:]
            self.seek(0)
            self.truncate()
            super().write(keep)
        return n

    def text(self) -> str:
        return self.getvalue()[-OUTPUT_LIMIT:]


def run_lease(spec: LeaseSpec, *, device: str = "cpu", cache: StateCache | None = None, store: Any = None,
              started: float | None = None) -> LeaseOutcome:
    """Run one lease; never raises. ``cache``: this worker's in-memory state (lease extension);
    ``store``: rank 0's rendezvous store, if the caller opened it; ``started``: when the lease began
    (``time.monotonic()``; the deadline counts from it)."""
    started = time.monotonic() if started is None else started
    cache = cache if cache is not None else StateCache()
    out = LeaseOutcome()
    if cache.entry is not None and cache.entry.job_id != spec.job_id:
        cache.drop()  # another job's state: free its memory before this job allocates its own
    if spec.mode == "profile":
        cache.drop()
    tail = _Tail()
    try:
        with ExitStack() as stack:
            if spec.world > 1 or spec.process_group:
                from hadar.job.dist import process_group

                stack.enter_context(process_group(spec, device, store))
            fn = load(spec.entrypoint, spec.search_path)
            ctx = Context(spec, device, cache, out, started)
            with redirect_stdout(tail), redirect_stderr(tail):
                fn(ctx)
            why = ctx._verdict()
        if why:
            out.error = why
        else:
            out.ok = True
    except BaseException as e:  # user code may raise anything, SystemExit included: it fails the lease
        if isinstance(e, KeyboardInterrupt):
            raise
        out.error = strip_ansi(type(e).__name__ + (f": {e}" if str(e) else ""))
        out.traceback = strip_ansi(traceback.format_exc())
    if not out.ok:
        out.metrics.clear()
        cache.drop(spec.job_id)  # memory may hold a half-updated state: never resume from it
    out.output = strip_ansi(tail.text())
    return out
