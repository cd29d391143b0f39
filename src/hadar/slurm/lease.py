"""``python -m hadar.slurm.lease LEASE.json``: the job side of one lease, as hadar's batch script runs it.

It runs the job's ``train(ctx)`` through the lease runner (``hadar.job.runner.run_lease``) until the
lease's deadline (a wall-clock time: the round's end) or the job's steps are done, and writes
``result.json`` next to the spec (see ``hadar.slurm.script``). SIGTERM (``scontrol requeuehold``,
``scancel``) and SIGUSR1 (``scancel --signal=USR1``) end the lease after its current step: the
function then saves its checkpoint and returns, and the result says how far it got. Exit status 0 when
the lease succeeded, 1 when it failed.

A lease of W > 1 GPUs (a gang) on K nodes, k GPUs each, is K copies of this process started by ``srun``
in the batch script, one task per node. Each takes its node's place from Slurm's environment
(``SLURM_PROCID`` of ``SLURM_NTASKS``) and the rendezvous from ``MASTER_ADDR``/``MASTER_PORT``, which the
script derived from Slurm's (the job's first node, a port from the job id); it imports torch once and forks
its k ranks (rank ``SLURM_PROCID * k + i``, local rank i: torch is imported once per node, not once per GPU,
seconds of CPU each on a busy node). Global rank 0's task opens the store there, the other ranks join it.
Each rank gets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` (and ``MASTER_ADDR``/``PORT``) in its environment for
the job's own code, as torch's launchers set them. Rank 0 alone saves the checkpoint; the first node's task
writes ``result.json`` (rank 0's steps, reported once), another node's ``rank-<r>.json`` (r: its first rank),
which fails the lease only if one of its ranks failed. A stop is passed on to every rank.

The module is imported for every lease (a new process each time), so it imports little: torch only when a
gang or a CUDA device needs it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from types import FrameType
from typing import Any

from hadar.job.context import request_stop
from hadar.job.lease import LeaseOutcome, LeaseSpec
from hadar.slurm import script

_children: list[Any] = []  # a gang's forked ranks: a stop is passed on to them


def _on_signal(signum: int, frame: FrameType | None) -> None:
    request_stop()
    for proc in _children:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if proc.pid is not None:
                os.kill(proc.pid, signal.SIGUSR1)


def _install_handlers() -> None:
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(sig, _on_signal)


def _device(name: str, local_rank: int) -> str:
    if name == "cpu":
        return "cpu"
    import torch

    if name == "auto" and not torch.cuda.is_available():
        return "cpu"
    return f"cuda:{local_rank % max(1, torch.cuda.device_count())}"


def gang_place(spec: LeaseSpec, env: Mapping[str, str]) -> tuple[int, int, tuple[str, int]]:
    """(this task's node index, the ranks per node, the rendezvous) of a gang's task, from Slurm's environment
    ``env``; ``ValueError`` if it is not a task of an srun of ``spec.world`` GPUs."""
    try:
        node, nodes = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
        addr, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
    except (KeyError, ValueError) as e:
        raise ValueError(f"not a task of an srun gang (environment: {e})") from None
    if nodes < 1 or spec.world % nodes or not 0 <= node < nodes:
        raise ValueError(f"srun started task {node} of {nodes} for a gang of {spec.world} GPUs")
    return node, spec.world // nodes, (addr, port)


def run_rank(spec: LeaseSpec, device: str, local: int, started: float, queue: Any) -> None:
    """One rank of a gang in its own (forked) process: its outcome goes to ``queue``."""
    _install_handlers()
    from hadar.job.runner import run_lease

    os.environ.update(RANK=str(spec.rank), WORLD_SIZE=str(spec.world), LOCAL_RANK=str(local))
    queue.put((spec.rank, asdict(run_lease(spec, device=_device(device, local), started=started))))


def _gang(spec: LeaseSpec, device: str, started: float, node: int, per_node: int) -> LeaseOutcome:
    """This node's ``per_node`` ranks of the gang, forked; the first one's outcome (any one's error if one failed)."""
    import multiprocessing as mp

    import torch.distributed  # noqa: F401  (imported once here: the forked ranks start with it)

    from hadar.job import dist

    assert spec.rendezvous is not None
    dist.PRELOAD_DYNAMO = False  # this process and its ranks end with the lease: no store can outlive it
    store = None
    if node == 0:
        host, port = spec.rendezvous
        try:
            store, _ = dist.open_store(host, spec.timeout_s, port=port)
        except OSError as e:
            return LeaseOutcome(error=f"rank 0 cannot listen on {host}:{port}: {e}")
    ctx = mp.get_context("fork")  # no second import of torch per rank (seconds on a busy machine)
    queue = ctx.Queue()
    target = importlib.import_module("hadar.slurm.lease").run_rank
    first = node * per_node
    procs = [ctx.Process(target=target, args=(replace(spec, rank=first + i), device, i, started, queue))
             for i in range(per_node)]
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
    return _merge(got, first, len(procs))


def _merge(got: dict[int, dict[str, Any]], first: int, count: int) -> LeaseOutcome:
    """Rank ``first``'s outcome, failed with another rank's error if one of the ``count`` failed or never answered."""
    if first not in got:
        return LeaseOutcome(error=f"rank {first} ended without an answer")
    head = LeaseOutcome(**got[first])
    failed = [LeaseOutcome(**o) for o in got.values() if not o["ok"]]
    if len(got) < count:
        failed.append(LeaseOutcome(error=f"{count - len(got)} rank(s) ended without an answer"))
    if failed and head.ok:
        head.ok, head.error, head.traceback = False, failed[0].error, failed[0].traceback
    return head


def _run(spec: LeaseSpec, device: str, started: float) -> LeaseOutcome:
    """The lease: alone, or this node's ranks of a gang (placed by Slurm's environment)."""
    node = per_node = 0
    if spec.world > 1:
        try:
            node, per_node, rendezvous = gang_place(spec, os.environ)
        except ValueError as e:
            return LeaseOutcome(error=str(e))
        spec = replace(spec, rank=node * per_node, rendezvous=rendezvous)
    if device != "cpu" and _device(device, 0).startswith("cuda"):
        spec = replace(spec, speed=1.0)  # a real GPU: no emulated speed
    if spec.world > 1:
        return _gang(spec, device, started, node, per_node)
    from hadar.job.runner import run_lease

    return run_lease(spec, device=_device(device, 0), started=started)


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
    outcome = _run(spec, device, started)
    rank = int(os.environ.get("SLURM_PROCID", "0")) * (spec.world // max(1, int(os.environ.get("SLURM_NTASKS", "1"))))
    script.write_result(path.parent, outcome, start_wall, time.time(), rank=rank if spec.world > 1 else 0)
    for sig in (signal.SIGTERM, signal.SIGUSR1):  # the lease is over: a late stop must not kill its exit
        signal.signal(sig, signal.SIG_IGN)
    if not outcome.ok:
        sys.stderr.write((outcome.traceback or outcome.error) + "\n")
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the result is written: no interpreter teardown (torch's and gloo's take seconds on a busy node)
