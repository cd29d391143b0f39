"""``hadar simulate`` and ``hadar policies``."""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hadar.errors import InputError

if TYPE_CHECKING:
    from hadar.model.job import Job

DEFAULT_TRACE = "max_min_fairness"
DEFAULT_CLUSTER = "8:16:24"
DEFAULT_POLICY = "max_min_fairness_perf"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("simulate", help="simulate a policy on a trace or a generated workload",
                       description="Trace-driven, round-based simulation of a heterogeneous GPU cluster. "
                       f"With no arguments: the bundled {DEFAULT_TRACE}.trace (96 jobs) on {DEFAULT_CLUSTER} "
                       f"(V100:P100:K80) under {DEFAULT_POLICY}.")
    add_workload_args(p)
    p.add_argument("--policy", default=DEFAULT_POLICY, help="policy name (see `hadar policies`) or a profile name "
                   f"from --profiles (default {DEFAULT_POLICY})")
    add_profiles_arg(p)
    p.add_argument("--ftf", action="store_true", help="also run `isolated` on the same workload and report "
                   "finish-time fairness (ftf_mean, ftf_max)")
    add_output_args(p)
    p.set_defaults(func=run_simulate)
    q = sub.add_parser("policies", help="list the registered policies")
    q.set_defaults(func=run_policies)


def add_workload_args(p: argparse.ArgumentParser) -> None:
    """Workload, cluster and mechanism options shared by ``simulate`` and ``compare``."""
    w = p.add_argument_group("workload")
    w.add_argument("--trace", help="Gavel .trace, .csv or .yaml job list, or a bundled trace name "
                   f"(default {DEFAULT_TRACE})")
    w.add_argument("--generate", action="store_true", help="generate jobs (Gavel's generator) instead of a trace")
    w.add_argument("--jobs-per-hour", type=float, help="arrival rate for --generate")
    w.add_argument("--num-jobs", type=int, help="number of jobs to generate")
    w.add_argument("--window", type=int, nargs=2, metavar=("A", "B"),
                   help="measure jobs with id in [A, B) only (steady state); without --num-jobs, jobs keep "
                   "arriving until they all finish")
    w.add_argument("--multi-gpu", action="store_true", help="generated jobs may ask for 2/4/8 GPUs")
    w.add_argument("--multi-priority", action="store_true", help="20%% of generated jobs get priority weight 5")
    c = p.add_argument_group("cluster and mechanism")
    c.add_argument("--cluster", default=DEFAULT_CLUSTER, help="V100:P100:K80 counts (8:16:24), TYPE=N,... "
                   f"or a YAML/JSON node file (default {DEFAULT_CLUSTER})")
    c.add_argument("--gpus-per-node", type=int, default=1, help="GPUs per node for the count shorthands (default 1)")
    c.add_argument("--throughputs", default=None, help="Gavel throughputs JSON (default: the bundled "
                   "simulation table; 'physical' = the bundled physical-cluster table)")
    c.add_argument("--round-s", type=float, default=360.0, help="round length in seconds (default 360)")
    c.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    c.add_argument("--gavel-compat", action="store_true", help="re-solve at most every 1,920 s, as Gavel's "
                   "published simulator (default: at the next round after any arrival or completion); "
                   "charges no restarts")
    c.add_argument("--restart-s", type=float, default=None, metavar="S",
                   help="seconds a job loses each time it starts or moves to other GPUs, for jobs whose file "
                   "gives no restart_s (default 0, as Gavel's simulator)")
    c.add_argument("--tenants", type=Path, metavar="FILE", help="tenants file (YAML: teams with weight, quota per "
                   "GPU type, borrow): a job's entity (a trace's entity column) is its team; quotas hold every "
                   "round, hierarchical policies share by the teams' weights (docs/api.md, Tenants)")
    c.add_argument("--min-run-s", type=float, default=0.0, metavar="S", help="with --tenants: a job running on "
                   "borrowed GPUs keeps them at least this long (default 0)")
    c.add_argument("--fork-efficiency", metavar="FILE", help="the world: what forked copies' steps are worth, per "
                   "job family: a file of `hadar experiment fork-efficiency --out FILE`, or 'calibrated' (the bundled "
                   "measurement; default: ideal, full credit). simulate hands the forking planner the same as its "
                   "estimate; compare runs every policy in this world and each forking policy twice: with its own "
                   "(ideal) estimate, and as NAME-calibrated with this one")
    c.add_argument("--rate-model", choices=("sync", "additive"), default="sync",
                   help="the world: a job on several GPU types runs at its slowest type's pace (sync, the default) or "
                   "each GPU adds its share (additive: local batches in proportion to each GPU's speed)")


def add_profiles_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profiles", type=Path, help="YAML file of policy profiles: {NAME: {policy: REGISTERED, "
                   "PARAM: VALUE, ...}}; each NAME can be used as a policy name (see docs/policies.md)")


def load_profiles(args: argparse.Namespace) -> dict[str, Any] | None:
    from hadar.policies.profiles import load_profiles as load

    return load(args.profiles) if getattr(args, "profiles", None) else None


def load_fork_efficiency(args: argparse.Namespace) -> Any:
    """The ``--fork-efficiency`` file's ``ForkEfficiency`` (None where the option is not given)."""
    from hadar.model.fork_efficiency import ForkEfficiency

    given = getattr(args, "fork_efficiency", None)
    return None if given is None else ForkEfficiency.load(given)


def add_output_args(p: argparse.ArgumentParser) -> None:
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    o.add_argument("--out", type=Path, help="write summary.json, jobs.csv and events.jsonl here")
    o.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def load_inputs(args: argparse.Namespace) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(job source, cluster, table, extra simulate kwargs) from parsed arguments."""
    from hadar.config import parse_cluster
    from hadar.model.throughput import ThroughputTable
    from hadar.sim.generate import JobGenerator
    from hadar.sim.trace import read_jobs

    cluster = parse_cluster(args.cluster, args.gpus_per_node)
    table = ThroughputTable.load(args.throughputs)
    kwargs: dict[str, Any] = {"round_s": args.round_s, "seed": args.seed, "gavel_compat": args.gavel_compat}
    if args.restart_s is not None:
        kwargs["restart_s"] = args.restart_s
    from hadar.model.fork_efficiency import IDEAL
    from hadar.model.world import World

    efficiency = load_fork_efficiency(args)
    kwargs["world"] = World(rate_model=getattr(args, "rate_model", "sync"), fork_efficiency=efficiency or IDEAL)
    if efficiency is not None:
        kwargs["fork_estimate"] = efficiency  # simulate: the planner is told the world's (compare: both ways)
    if getattr(args, "tenants", None) is not None:
        from hadar.service.tenants import load_tenants

        if not 0 <= args.min_run_s < float("inf"):
            raise InputError(f"--min-run-s must be a number of seconds >= 0, got {args.min_run_s}")
        kwargs["tenants"] = load_tenants(args.tenants, set(cluster.listed_types))
        kwargs["min_run_s"] = args.min_run_s
    if args.window is not None:
        a, b = args.window
        if a < 0 or b <= a:
            raise InputError(f"--window A B needs 0 <= A < B, got {a} {b}")
        kwargs["window"] = (a, b)
    if args.generate:
        if args.trace:
            raise InputError("give either --trace or --generate, not both")
        if args.jobs_per_hour is None:
            raise InputError("--generate needs --jobs-per-hour")
        if args.num_jobs is None and args.window is None:
            raise InputError("--generate needs --num-jobs N or --window A B")
        if args.num_jobs is not None:
            if args.num_jobs <= 0:
                raise InputError(f"--num-jobs must be positive, got {args.num_jobs}")
            kwargs["limit"] = args.num_jobs
        generator = JobGenerator(table, args.jobs_per_hour, seed=args.seed, multi_gpu=args.multi_gpu,
                                 multi_priority=args.multi_priority)
        source: Iterator[Job] | list[Job] = iter(generator)
        if args.num_jobs is not None and args.window is None:
            source = list(itertools.islice(source, args.num_jobs))
    else:
        for flag in ("jobs_per_hour", "num_jobs"):
            if getattr(args, flag) is not None:
                raise InputError(f"--{flag.replace('_', '-')} needs --generate")
        source = read_jobs(args.trace or DEFAULT_TRACE)
    return source, cluster, table, kwargs


def progress_bar(total: int | None, desc: str, args: argparse.Namespace) -> Any:
    """A job-count progress bar on stderr, shown only on a terminal (``hadar.cli.show_progress``)."""
    from tqdm import tqdm

    from hadar.cli import show_progress

    return tqdm(total=total, desc=desc, unit="job", file=sys.stderr, delay=2.0, disable=not show_progress(args),
                leave=False)


def run_simulate(args: argparse.Namespace) -> int:
    from hadar.cli import emit_json
    from hadar.metrics.summary import ftf
    from hadar.sim.run import simulate, write_outputs

    profiles = load_profiles(args)
    source, cluster, table, kwargs = load_inputs(args)
    first, last = kwargs.get("window", (0, 0))
    total = len(source) if isinstance(source, list) else last - first
    with progress_bar(total, args.policy, args) as bar:
        result = simulate(source, cluster, table, args.policy, record_events=args.out is not None,
                          progress=bar.update, profiles=profiles, **kwargs)
    if args.ftf:
        src = source if isinstance(source, list) else load_inputs(args)[0]
        with progress_bar(total, "isolated (for FTF)", args) as bar:
            iso = simulate(src, cluster, table, "isolated", progress=bar.update, **kwargs)
        result.summary.update(ftf(result.rows, iso.rows))
    if args.out is not None:
        from hadar.metrics.plots import write_run_plots

        write_outputs(result, args.out)
        write_run_plots(args.out, {result.summary["policy"]: result}, cluster)
    if args.json:
        emit_json(result.summary)
    else:
        print(format_summary(result.summary, cluster=args.cluster, workload=args.trace or
                             ("generated" if args.generate else DEFAULT_TRACE)))
        if args.out is not None:
            print(f"wrote {args.out}/summary.json, jobs.csv, events.jsonl and PNG plots")
    return 0


def _fmt(key: str, v: Any) -> str:
    if v is None:
        return "-"
    if key.endswith("_s") and isinstance(v, float):
        return f"{v:,.1f} s ({v / 3600:.2f} h)" if v >= 60 else f"{v:.4f} s"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def format_summary(summary: dict[str, Any], **context: Any) -> str:
    rows = [(k, str(v)) for k, v in context.items()] + [(k, _fmt(k, v)) for k, v in summary.items()]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def run_policies(args: argparse.Namespace) -> int:
    from hadar.policies import describe

    items = describe()
    if not items:
        print("no policies registered")
        return 0
    width = max(len(n) for n in items)
    for name, text in items.items():
        print(f"{name:<{width}}  {text}")
    return 0
