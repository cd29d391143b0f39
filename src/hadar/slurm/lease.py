"""``python -m hadar.slurm.lease LEASE.json``: the job side of one lease, as hadar's batch script runs it.

It runs the job's ``train(ctx)`` through the lease runner (``hadar.job.runner.run_lease``) until the
lease's deadline (a wall-clock time: the round's end) or the job's steps are done, and writes
``result.json`` next to the spec (see ``hadar.slurm.script``). SIGTERM (``scontrol requeuehold``,
``scancel``) and SIGUSR1 (``scancel --signal=USR1 --batch``) end the lease after its current step: the
function then saves its checkpoint and returns, and the result says how far it got. A lease of W > 1
GPUs runs W processes (one rank each, forked) with a process group on loopback, as ``python -m hadar.job`` does;
the signal is passed on to every rank. Exit status 0 when the lease succeeded, 1 when it failed.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import os
import signal
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from types import FrameType
from typing import Any

from hadar.job.context import request_stop
from hadar.job.lease import LeaseOutcome, LeaseSpec
from hadar.slurm import script

_children: list[Any] = []


def _on_signal(signum: int, frame: FrameType | None) -> None:
    request_stop()
    for proc in _children:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if proc.pid is not None:
                os.kill(proc.pid, signal.SIGUSR1)


def _install_handlers() -> None:
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(sig, _on_signal)


def _device(name: str, rank: int) -> str:
    if name == "cpu":
        return "cpu"
    import torch

    if name == "auto" and not torch.cuda.is_available():
        return "cpu"
    return f"cuda:{rank % max(1, torch.cuda.device_count())}"


def run_rank(spec: LeaseSpec, device: str, started: float, queue: Any) -> None:
    """One rank of a gang in its own process: its outcome goes to ``queue``."""
    _install_handlers()
    from hadar.job.runner import run_lease

    queue.put((spec.rank, asdict(run_lease(spec, device=_device(device, spec.rank), started=started))))


def _gang(spec: LeaseSpec, device: str, started: float) -> LeaseOutcome:
    """The lease on ``spec.world`` processes; rank 0's outcome (any rank's error if one failed)."""
    import torch.distributed  # noqa: F401  (imported once here: the forked ranks start with it)

    from hadar.job import dist

    dist.PRELOAD_DYNAMO = False  # this process and its ranks end with the lease: no store can outlive it
    store, port = dist.open_store("127.0.0.1", spec.timeout_s)

    spec = replace(spec, rendezvous=("127.0.0.1", port))
    ctx = mp.get_context("fork")  # no second import of torch per rank (seconds on a busy machine)
    queue = ctx.Queue()
    target = importlib.import_module("hadar.slurm.lease").run_rank
    procs = [ctx.Process(target=target, args=(replace(spec, rank=r), device, started, queue))
             for r in range(spec.world)]
    for proc in procs:
        proc.start()
        _children.append(proc)
    got: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + spec.budget_s + 10 * spec.timeout_s
    while len(got) < len(procs) and time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            rank, out = queue.get(timeout=1.0)
            got[rank] = out
        if len(got) < len(procs) and any(p.exitcode not in (None, 0) for p in procs):
            break
    for proc in procs:
        proc.join(timeout=spec.timeout_s)
    del store
    if 0 not in got:
        return LeaseOutcome(error=f"rank 0 of {spec.world} ended without an answer (exit codes "
                            f"{[p.exitcode for p in procs]})")
    head = LeaseOutcome(**got[0])
    failed = [LeaseOutcome(**o) for o in got.values() if not o["ok"]]
    if len(got) < len(procs):
        failed.append(LeaseOutcome(error=f"{len(procs) - len(got)} rank(s) ended without an answer"))
    if failed and head.ok:
        head.ok, head.error, head.traceback = False, failed[0].error, failed[0].traceback
    return head


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m hadar.slurm.lease LEASE.json", file=sys.stderr)
        return 2
    _install_handlers()
    started, start_wall = time.monotonic(), time.time()
    path = Path(args[0])
    spec, deadline, device = script.read_lease(path)
    spec = replace(spec, budget_s=max(0.0, deadline - start_wall))
    if device != "cpu" and _device(device, 0).startswith("cuda"):
        spec = replace(spec, speed=1.0)  # a real GPU: no emulated speed
    if spec.world > 1:
        outcome = _gang(spec, device, started)
    else:
        from hadar.job.runner import run_lease

        outcome = run_lease(spec, device=_device(device, 0), started=started)
    script.write_result(path.parent, outcome, start_wall, time.time())
    for sig in (signal.SIGTERM, signal.SIGUSR1):  # the lease is over: a late stop must not kill its exit
        signal.signal(sig, signal.SIG_IGN)
    if not outcome.ok:
        sys.stderr.write((outcome.traceback or outcome.error) + "\n")
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
