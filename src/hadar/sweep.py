"""Independent simulations side by side: in this process, in local processes, or on a Ray cluster.

``run_tasks(fn, tasks, workers=N, address=A)`` calls ``fn(task, report)`` for every task and
returns the results in the tasks' order, whatever order they finish in:

- ``workers=1`` (the default) and no ``address``: one after the other, in this process;
- ``workers=N > 1``: in up to N local processes, started with ``spawn`` (no state inherited from
  the caller, the same on every OS);
- ``address``: as Ray tasks (one CPU each) on the existing Ray cluster at that address (the
  runtime extra; every node must have hadar installed). A driver already connected to Ray (a
  library caller, a test session) uses its connection and keeps it.

A simulation reads nothing but its task, so a result does not depend on where it ran: parallel and
serial runs give the same results (``tests/unit/test_sweep.py``); only the wall-clock fields differ.
``fn`` must be a module-level function, tasks and results picklable. ``report(n)`` tells the caller's
``on_progress(index, n)`` that n more jobs of task ``index`` finished (local processes send it through
a queue; Ray tasks do not report jobs, only ``on_done``). When a task raises, the tasks not started
are cancelled, the running ones stopped, and the error is raised here as the task raised it (a
``HadarError`` stays one line on stderr and exit code 2 in the CLI).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue as queue_mod
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from hadar.errors import HadarError, InputError, MissingExtraError

T = TypeVar("T")
R = TypeVar("R")
Report = Callable[[int], None]
Progress = Callable[[int, int], None]
Done = Callable[[int], None]

#: a worker process's progress queue, under "queue" (set by its initializer)
_WORKER: dict[str, Any] = {}


class WorkerDied(HadarError):
    """A worker process ended without a result (killed, out of memory)."""


def workers_count(text: str) -> int:
    """``--parallel``'s value: N >= 1, or 0 for one process per CPU core."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--parallel needs a whole number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"--parallel must be >= 0 (0: one per CPU core), got {n}")
    return n if n else (os.cpu_count() or 1)


def add_args(p: argparse.ArgumentParser) -> None:
    """``--parallel N`` and ``--address ADDR``, for ``hadar compare`` and the benches."""
    g = p.add_argument_group("parallel runs")
    g.add_argument("--parallel", type=workers_count, default=1, metavar="N",
                   help="run the independent simulations in N local processes (0: one per CPU core; default 1: "
                   "one after the other in this process); the results are the same")
    g.add_argument("--address", metavar="ADDR", help="run them as tasks on the existing Ray cluster at ADDR "
                   "(host:port; needs the runtime extra on this machine and hadar on every node)")


def run_tasks(fn: Callable[[T, Report], R], tasks: Sequence[T], *, workers: int = 1, address: str | None = None,
              on_progress: Progress | None = None, on_done: Done | None = None) -> list[R]:
    """``[fn(task, report) for task in tasks]``, run as the module docstring says."""
    if workers < 1:
        raise InputError(f"the number of worker processes must be >= 1, got {workers}")
    if address is not None:
        return _on_ray(fn, tasks, address, on_done)
    if workers == 1 or len(tasks) <= 1:
        return _serial(fn, tasks, on_progress, on_done)
    return _local(fn, tasks, min(workers, len(tasks)), on_progress, on_done)


def _serial(fn: Callable[[T, Report], R], tasks: Sequence[T], on_progress: Progress | None,
            on_done: Done | None) -> list[R]:
    out = []
    for i, task in enumerate(tasks):
        out.append(fn(task, _reporter(i, on_progress)))
        if on_done is not None:
            on_done(i)
    return out


def _reporter(index: int, on_progress: Progress | None) -> Report:
    if on_progress is None:
        return _ignore
    return lambda n: on_progress(index, n)


def _ignore(n: int) -> None:
    return None


# -- local processes -------------------------------------------------------------
def _init_worker(q: Any) -> None:
    _WORKER["queue"] = q


def _in_worker(fn: Callable[[T, Report], R], index: int, task: T) -> R:
    q = _WORKER.get("queue")
    return fn(task, _ignore if q is None else (lambda n: q.put((index, n))))


def _local(fn: Callable[[T, Report], R], tasks: Sequence[T], workers: int, on_progress: Progress | None,
           on_done: Done | None) -> list[R]:
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue() if on_progress is not None else None
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(q,))
    results: dict[int, R] = {}
    try:
        futures: dict[Future[R], int] = {pool.submit(_in_worker, fn, i, t): i for i, t in enumerate(tasks)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            _drain(q, on_progress)
            for f in sorted(done, key=futures.__getitem__):
                results[futures[f]] = _result(f)
                if on_done is not None:
                    on_done(futures[f])
    except BaseException:
        _stop(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if q is not None:
            _drain(q, on_progress)
            q.close()
    return [results[i] for i in range(len(tasks))]


def _result(f: Future[R]) -> R:
    try:
        return f.result()
    except BrokenProcessPool:
        raise WorkerDied("a worker process ended without a result (killed, or out of memory?); "
                         "fewer --parallel processes need less memory") from None


def _drain(q: Any, on_progress: Progress | None) -> None:
    if q is None or on_progress is None:
        return
    while True:
        try:
            index, n = q.get_nowait()
        except (queue_mod.Empty, OSError, ValueError):
            return
        on_progress(index, n)


def _stop(pool: ProcessPoolExecutor) -> None:
    """End the pool's processes now (an error or Ctrl-C: their runs are no longer wanted)."""
    for f in getattr(pool, "_pending_work_items", {}).values():
        f.future.cancel()
    for p in list(getattr(pool, "_processes", {}).values()):  # no public way before Python 3.14
        p.terminate()


# -- Ray -------------------------------------------------------------------------
def _on_ray(fn: Callable[[T, Report], R], tasks: Sequence[T], address: str, on_done: Done | None) -> list[R]:
    try:
        import ray
    except ImportError:
        raise MissingExtraError("--address runs the simulations on a Ray cluster, which needs the runtime extra: "
                                "pip install 'hadar[runtime]' (in a checkout: pip install -e '.[runtime]')") from None
    from hadar.runtime import session

    owned = not ray.is_initialized()
    if owned:
        session.join(address)
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(_in_worker)
        refs = [remote.remote(fn, i, t) for i, t in enumerate(tasks)]
        index = {ref: i for i, ref in enumerate(refs)}
        results: dict[int, R] = {}
        pending = list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    results[index[ref]] = _ray_result(ray, ref)
                    if on_done is not None:
                        on_done(index[ref])
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        return [results[i] for i in range(len(tasks))]
    finally:
        if owned:
            ray.shutdown()


def _ray_result(ray: Any, ref: Any) -> Any:
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, BaseException):
            raise cause from None
        raise
    except ray.exceptions.WorkerCrashedError:
        raise WorkerDied("a Ray worker ended without a result (killed, or out of memory?)") from None
