"""``hadar run``: train real PyTorch jobs on Ray under any registered policy."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hadar.errors import InputError

if TYPE_CHECKING:
    from hadar.runconfig import RunConfig, Training

DEFAULT_POLICY = "max_min_fairness_perf"
MAX_EMULATED_GPUS = 16  # one torch process per GPU on this machine
#: import name -> distribution name, for the modules of the ``runtime`` extra.
RUNTIME_MODULES = {"ray": "ray", "torch": "torch", "sklearn": "scikit-learn"}


def add_fork_efficiency_arg(p: argparse.ArgumentParser) -> None:
    """``--fork-efficiency`` of ``hadar run`` and ``hadar serve`` (read by ``cli_simulate.load_fork_efficiency``)."""
    p.add_argument("--fork-efficiency", metavar="FILE",
                   help="forking policies (hadare): what forked copies are worth, a file of `hadar experiment "
                   "fork-efficiency --out FILE`, 'calibrated' (the bundled one) or 'noise-scale' / "
                   "'noise-scale-split' (the noise-scale model, by which HadarE then prices each copy, docs/hadar.md); "
                   "a job's copies then run as one synchronous gang across nodes, or a copy is dropped, where that is "
                   "worth more (default: every copy worth its steps)")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="train real PyTorch jobs on a Ray cluster under a policy",
                       description="Physical mode: the same scheduler as `simulate` drives real training on Ray. "
                       "With no files: a demo of 6 jobs (4 model families, one 2-GPU job) on an emulated "
                       "3-node cluster (2 V100, 1 P100, 1 K80) on this machine. GPU speeds are EMULATED on "
                       "the CPU unless --address names a cluster with real GPUs.")
    p.add_argument("--cluster", help="cluster file (YAML/JSON nodes) or shorthand (v100=2,k80=1); "
                   "default: the demo cluster; with --address: detected from the Ray nodes")
    p.add_argument("--gpus-per-node", type=int, default=1, help="GPUs per node for the shorthands (default 1)")
    p.add_argument("--jobs", help="job list (.yaml/.json/.csv): your own functions (entrypoint: FILE.py:FUNCTION "
                   "or package.module:FUNCTION; see docs/jobs.md) and/or bundled job types (resnet, lstm, transformer, "
                   "recoder); default: the demo jobs")
    p.add_argument("--policy", default=DEFAULT_POLICY, help="policy name (see `hadar policies`) or a profile name "
                   f"from --profiles (default {DEFAULT_POLICY})")
    from hadar.cli_simulate import add_profiles_arg

    add_profiles_arg(p)
    p.add_argument("--round-s", type=float, default=10.0, help="round length in seconds (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of models, data and planner (default 0)")
    p.add_argument("--throughputs", help="known throughputs (Gavel JSON, e.g. a previous run's throughputs.json); "
                   "default: none: every entry starts as an estimate and is replaced by what the jobs' leases measure")
    p.add_argument("--dilation", type=float, help="emulation only: stretch every step this much more "
                   "(default: GPUs / CPU cores, at least 1, so the workers never need more CPU than there is)")
    p.add_argument("--fork-optimizer", choices=("largest", "average"), default="largest",
                   help="forking policies (hadare): the merged optimizer state of a forked job comes from the copy "
                   "that processed most samples (largest, default) or is the copies' sample-weighted average")
    add_fork_efficiency_arg(p)
    p.add_argument("--pair-workers", choices=("lazy", "eager"), default="lazy",
                   help="space sharing: start every GPU's second worker (the second job of a pair runs there) when "
                   "the first pair is dispatched (lazy, default) or with the others, before the clock starts (eager: "
                   "for policies that pack, e.g. max_min_fairness_packed)")
    p.add_argument("--address", help="join an existing Ray cluster (ray://... or HOST:PORT) instead of starting one")
    p.add_argument("--dashboard", nargs="?", const="127.0.0.1", metavar="HOST",
                   help="start Ray's dashboard (local cluster only), on 127.0.0.1 unless HOST is given")
    p.add_argument("--checkpoint-dir", type=Path, help="where job checkpoints go (shared storage on a multi-node "
                   "cluster); default: DIR/checkpoints with --out, else a temporary folder")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.add_argument("--out", type=Path, help="write summary.json, jobs.csv, events.jsonl, throughputs.json and "
                   "logs/job-ID.log (each job's output, warnings and tracebacks) here")
    p.add_argument("--no-progress", action="store_true", help="no live progress on stderr")
    p.add_argument("--slurm", action="store_true", help="run the jobs on Slurm instead of Ray: the cluster is read "
                   "from sinfo (Slurm found through SLURM_CONF and its commands on PATH), each lease is a Slurm batch "
                   "job (see docs/slurm.md); --checkpoint-dir, else DIR/slurm with --out, holds the leases' folders "
                   "and checkpoints and must be storage every node sees")
    p.add_argument("--partition", help="--slurm: the partition whose GPU nodes hadar schedules and where its jobs "
                   "go (default: every partition's GPU nodes, each lease in its node's first partition)")
    from hadar.runconfig import add_config_arg

    add_config_arg(p)
    p.set_defaults(func=main)


def _inputs(config: RunConfig) -> tuple[Any, Any, Any]:
    """(cluster, jobs, known throughputs) of ``hadar run``'s configuration: the files read and checked."""
    from hadar.config import parse_cluster
    from hadar.model.throughput import ThroughputTable
    from hadar.runtime.demo import demo_cluster, demo_jobs
    from hadar.runtime.run import check_writable, prepare_jobs
    from hadar.sim.trace import read_jobs

    run, train = config.run, _training(config)
    cluster = parse_cluster(run.cluster, run.gpus_per_node) if run.cluster else (
        None if train.address else demo_cluster())
    if cluster is not None and train.address is None and cluster.num_gpus > MAX_EMULATED_GPUS:
        raise InputError(f"an emulated cluster runs one training process per GPU on this machine; "
                         f"{cluster.num_gpus} GPUs is more than {MAX_EMULATED_GPUS}")
    jobs = prepare_jobs(read_jobs(train.jobs) if train.jobs else demo_jobs())
    table = ThroughputTable.load(run.throughputs) if run.throughputs else None
    if run.out is not None:  # last: nothing is created for input that is wrong anyway
        check_writable(run.out, "--out")
        check_writable(run.out / "logs", "--out")
    if train.checkpoint_dir is not None:
        check_writable(train.checkpoint_dir, "--checkpoint-dir")
    return cluster, jobs, table


def _training(config: RunConfig) -> Training:
    assert config.training is not None  # from_training_args made it
    return config.training


class _Progress:
    """One line per round on stderr, overwritten in place: round, jobs running, jobs done (terminals only)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled = total, enabled
        self.done = 0
        self.tty = sys.stderr.isatty()

    def __call__(self, e: dict[str, Any]) -> None:
        if e["event"] in ("finish", "job_failed"):
            self.done += 1
        if not self.enabled:
            return
        if e["event"] == "round":
            line = (f"round {e.get('round', '?'):>3}  t={e['end']:7.1f}s  running {len(e['leases'])}  "
                    f"done {self.done}/{self.total}")
            sys.stderr.write(("\r" + line) if self.tty else line + "\n")
        elif e["event"] == "lease_failed":
            where = f" (traceback in {e['log']})" if e.get("log") else ""
            sys.stderr.write(f"{chr(10) if self.tty else ''}lease of job {e['job']} failed: {e['error']}{where}\n")
        elif e["event"] == "job_failed":
            sys.stderr.write(f"{chr(10) if self.tty else ''}job {e['job']} FAILED: {e['error']}\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write("\n")


def main(args: argparse.Namespace) -> int:
    from hadar.cli import show_progress
    from hadar.cli_simulate import load_fork_efficiency, load_profiles
    from hadar.runconfig import from_training_args
    from hadar.runtime.run import run

    if args.slurm:
        from hadar.slurm.cli import main as slurm_main

        return slurm_main(args)
    config = from_training_args(args)  # flags and --config, checked: bad values are one line, exit 2
    require_runtime_extra("run")
    profiles = load_profiles(args)
    cluster, jobs, table = _inputs(config)
    efficiency = load_fork_efficiency(args)  # a bad file: one line, exit 2, before Ray starts
    progress = _Progress(len(jobs), show_progress(args))
    rounds = [0]

    def on_event(e: dict[str, Any]) -> None:
        if e["event"] == "round":
            rounds[0] += 1
            e = {**e, "round": rounds[0]}
        progress(e)

    run_, train = config.run, _training(config)
    ckpt = train.checkpoint_dir or (run_.out / "checkpoints" if run_.out else None)
    try:
        result = run(jobs, cluster, config.policy.name, round_s=run_.round_s, address=train.address,
                     seed=run_.seed, checkpoint_dir=ckpt, log_dir=run_.out / "logs" if run_.out else None,
                     throughputs=table, dashboard_host=train.dashboard, on_event=on_event, dilation=train.dilation,
                     fork_optimizer=train.fork_optimizer, profiles=profiles, pair_workers=train.pair_workers,
                     fork_efficiency=efficiency)
    finally:
        progress.close()
    return _report(args, config, result, ckpt)


def _report(args: argparse.Namespace, config: RunConfig, result: Any, ckpt: Path | None) -> int:
    """The files (``--out``), and the summary on stdout: one JSON object (``--json``) or a table."""
    from hadar.cli import emit_json
    from hadar.cli_simulate import format_summary
    from hadar.runtime.run import quality_rows, write_outputs

    out, train = config.run.out, _training(config)
    if out is not None:
        write_outputs(result, out)
    quality = quality_rows(result)
    failed = 1 if result.summary.get("jobs_failed") else 0  # the run ended, but a job failed: exit code 1
    if args.json:
        emit_json({**result.summary, "quality": quality})
        return failed
    where = train.address or "local Ray, emulated GPUs"
    print(format_summary(result.summary, cluster=config.run.cluster or ("detected" if train.address else "demo"),
                         workload=train.jobs or "demo", ray=where))
    print()
    print(f"{'job':>4}  {'name':<16} {'status':<8} {'metric':<11} {'first':>10} {'final':>10}  reported")
    for q in quality:
        reported = ", ".join(f"{k} {v:.4g}" for k, v in q["metrics"].items())
        print(f"{q['job_id']:>4}  {q['name'][:16]:<16} {q['status']:<8} {q['metric'] or '-':<11} "
              f"{_num(q['initial']):>10} {_num(q['final']):>10}  {reported}")
    for q in quality:
        if q["error"]:
            print(f"job {q['job_id']} ({q['name']}) failed: {q['error']}")
    if out is not None:
        print(f"wrote {out}/summary.json, jobs.csv, events.jsonl, throughputs.json, logs/; checkpoints in {ckpt}")
    return failed


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def require_runtime_extra(command: str) -> None:
    """Raise ``MissingExtraError`` naming what is missing when the ``runtime`` extra is not installed.

    Looks the modules up without importing them (cheap: input errors stay fast); a module that
    is installed but broken fails loudly later, where it is imported.
    """
    from importlib.util import find_spec

    from hadar.errors import MissingExtraError

    missing = [dist for mod, dist in RUNTIME_MODULES.items() if find_spec(mod) is None]
    if missing:
        raise MissingExtraError(f"`hadar {command}` needs the runtime extra ({', '.join(missing)} not installed): "
                                "pip install 'hadar[runtime]' (in a checkout: pip install -e '.[runtime]')")
