"""``hadar run --slurm``: the job file's jobs on a Slurm cluster (the arguments are ``hadar run``'s)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from hadar.errors import InputError


def _work_dir(args: argparse.Namespace) -> Path:
    if args.checkpoint_dir is not None:
        return Path(args.checkpoint_dir)
    if args.out is not None:
        return Path(args.out) / "slurm"
    return Path(tempfile.mkdtemp(prefix=".hadar-slurm-", dir=Path.cwd()))  # the current folder: likely shared


def _check(args: argparse.Namespace) -> None:
    for flag, given in (("--address", args.address), ("--cluster", args.cluster), ("--dashboard", args.dashboard),
                        ("--dilation", args.dilation)):
        if given:
            raise InputError(f"{flag} does not apply to --slurm (the cluster is Slurm's: sinfo says what it is)")
    if not args.jobs:
        raise InputError("--slurm needs --jobs FILE")


def main(args: argparse.Namespace) -> int:
    from hadar.cli import emit_json, show_progress
    from hadar.cli_simulate import format_summary, load_profiles
    from hadar.model.throughput import ThroughputTable
    from hadar.runtime.cli import _Progress
    from hadar.runtime.run import check_writable
    from hadar.sim.trace import read_jobs
    from hadar.slurm.run import SlurmRun, run_on_slurm, write_outputs

    _check(args)
    profiles = load_profiles(args)
    jobs = read_jobs(args.jobs)
    table = ThroughputTable.load(args.throughputs) if args.throughputs else None
    if args.out is not None:
        check_writable(args.out, "--out")
    progress = _Progress(len(jobs), show_progress(args))
    rounds = [0]

    def on_event(e: dict[str, Any]) -> None:
        if e["event"] == "round":
            rounds[0] += 1
            e = {**e, "round": rounds[0]}
        progress(e)

    try:
        run = SlurmRun(_work_dir(args), partition=args.partition, round_s=args.round_s, seed=args.seed,
                       throughputs=table)
        res = run_on_slurm(jobs, args.policy, run, on_event=on_event, profiles=profiles)
    finally:
        progress.close()
    if args.out is not None:
        write_outputs(res, args.out)
    summary = res.result.summary
    failed = 1 if summary.get("jobs_failed") else 0
    if args.json:
        emit_json(summary)
        return failed
    print(format_summary(summary, cluster="slurm" + (f" partition {args.partition}" if args.partition else ""),
                         workload=args.jobs, ray="none (Slurm)"))
    for job, by_type in sorted(summary["gpu_seconds"].items(), key=lambda kv: int(kv[0])):
        used = ", ".join(f"{t} {s:.1f}" for t, s in sorted(by_type.items()))
        print(f"job {job}: GPU-seconds {used}")
    if args.out is not None:
        print(f"wrote {args.out}/summary.json, jobs.csv, events.jsonl, throughputs.json, leases.jsonl")
    sys.stdout.flush()
    return failed
