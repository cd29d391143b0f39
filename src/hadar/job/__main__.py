"""``python -m hadar.job ENTRYPOINT``: run leases of a job function in plain processes (no Ray, no scheduler).

For trying a job before submitting it, and for checking the runner on a machine with GPUs:
every lease prints one JSON line (iterations, steps/s, metrics, error); a failed lease's
traceback goes to stderr. ``--gpus W`` > 1 starts W processes (one rank each) with a
process group on loopback (gloo on CPU, NCCL on CUDA); ``--process-group`` sets one up even
for one GPU. Exit code 0 if every lease succeeded, 1 if one failed, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from hadar.errors import InputError
from hadar.job.entrypoint import check
from hadar.job.lease import LeaseOutcome, LeaseSpec
from hadar.job.spec import args_json


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hadar.job", description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("entrypoint", help="FILE.py:FUNCTION or package.module:FUNCTION")
    p.add_argument("--steps", type=int, default=100, help="the job's total_steps (default 100)")
    p.add_argument("--gpus", type=int, default=1, help="ranks (processes) per lease (default 1)")
    p.add_argument("--leases", type=int, default=1, help="run the job in this many leases (default 1)")
    p.add_argument("--lease-s", type=float, default=60.0, help="each lease's deadline in seconds (default 60)")
    p.add_argument("--args", default="{}", help="the job's args, a JSON object")
    p.add_argument("--device", default="auto", help="cpu, cuda, or auto (cuda if available)")
    p.add_argument("--process-group", action="store_true", help="set up torch.distributed even for one rank")
    p.add_argument("--checkpoint", type=Path, help="checkpoint file (default: a temporary one)")
    p.add_argument("--seed", type=int, default=0)
    return p


def _device(name: str, rank: int) -> str:
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return f"cuda:{rank % max(1, torch.cuda.device_count())}" if name == "cuda" else name


def run_rank(spec: LeaseSpec, device: str, queue: Any) -> None:
    """One rank of a gang in its own process (``--gpus W``): its outcome goes to ``queue``."""
    from hadar.job.runner import run_lease

    queue.put((spec.rank, asdict(run_lease(spec, device=_device(device, spec.rank)))))


def _target() -> Any:
    """``run_rank`` as the spawned processes import it (this file runs as ``__main__``)."""
    import importlib

    return importlib.import_module("hadar.job.__main__").run_rank


def _gang(spec: LeaseSpec, device: str) -> LeaseOutcome:
    """Run one lease on ``spec.world`` processes; rank 0's outcome (any rank's error if one failed)."""
    from hadar.job.dist import open_store

    store, port = open_store("127.0.0.1", spec.timeout_s)
    spec = replace(spec, rendezvous=("127.0.0.1", port))
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_target(), args=(replace(spec, rank=r), device, queue)) for r in range(spec.world)]
    for proc in procs:
        proc.start()
    got = dict(queue.get(timeout=spec.budget_s + 10 * spec.timeout_s) for _ in procs)
    for proc in procs:
        proc.join()
    del store
    head = LeaseOutcome(**got[0])
    failed = [LeaseOutcome(**o) for o in got.values() if not o["ok"]]
    if failed and head.ok:
        head.ok, head.error, head.traceback = False, failed[0].error, failed[0].traceback
    return head


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.steps < 1 or args.gpus < 1 or args.leases < 1 or not (math.isfinite(args.lease_s) and args.lease_s > 0):
            raise InputError("--steps, --gpus and --leases must be at least 1, --lease-s a positive number")
        check(args.entrypoint, [str(Path.cwd())])
        params = args_json(json.loads(args.args), "--args")
    except (InputError, json.JSONDecodeError) as e:
        print(f"python -m hadar.job: error: {e}", file=sys.stderr)
        return 2
    ckpt = args.checkpoint or Path(tempfile.mkdtemp(prefix="hadar-job-")) / "job.pt"
    spec = LeaseSpec(job_id=0, entrypoint=args.entrypoint, rank=0, world=args.gpus, max_iterations=0,
                     budget_s=args.lease_s, checkpoint=str(ckpt), name=Path(args.entrypoint).stem, args_json=params,
                     search_path=(str(Path.cwd()),), seed=args.seed, total_steps=float(args.steps), run_id="local",
                     process_group=args.process_group)
    return _leases(spec, args.leases, args.device)


def _leases(spec: LeaseSpec, leases: int, device: str) -> int:
    from hadar.job.runner import run_lease
    from hadar.job.state import StateCache

    cache = StateCache()
    done, iteration, saved = 0.0, 0, None
    for n in range(leases):
        left = spec.total_steps - done
        if left <= 0:
            break
        lease = replace(spec, max_iterations=math.ceil(left / spec.world - 1e-9), start_iteration=iteration,
                        steps_done=done, resume_steps=saved, group=f"lease{n}/")
        out = _gang(lease, device) if spec.world > 1 else run_lease(lease, device=_device(device, 0), cache=cache)
        rate = out.iterations * spec.world / out.train_s if out.train_s > 0 else 0.0
        print(json.dumps({"lease": n, "ok": out.ok, "iterations": out.iterations, "steps_per_s": rate,
                          "train_s": out.train_s, "restored": out.restored, "continued": out.continued,
                          "metrics": out.metrics, "error": out.error, "warnings": out.warnings}), flush=True)
        if out.output:
            sys.stderr.write(out.output)
        if not out.ok:
            sys.stderr.write(out.traceback or out.error + "\n")
            return 1
        done += out.iterations * spec.world
        iteration += out.iterations
        saved = out.saved_steps if out.saved_steps is not None else saved
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
