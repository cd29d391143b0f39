"""``hadar simulate`` and ``hadar policies``."""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hadar.model.job import Job
    from hadar.runconfig import RunConfig, Workload

DEFAULT_TRACE = "max_min_fairness"
DEFAULT_CLUSTER = "8:16:24"  # as runconfig.DEFAULT_CLUSTER (tests/unit/test_runconfig.py)
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
    add_config_arg(p)
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
                   "measurement; default: ideal, full credit), or 'noise-scale' / "
                   "'noise-scale-split': k copies averaged every round as data parallelism at their summed "
                   "batch (scale-out) or sharing the job's batch (split), x rho per phase, less a merge time "
                   "(docs/hadar.md). simulate hands the forking planner the same as its "
                   "estimate; compare runs every policy in this world and each forking policy twice: with its own "
                   "(ideal) estimate, and as NAME-calibrated with this one")
    c.add_argument("--rate-model", choices=("sync", "additive"), default="sync",
                   help="the world: a job on several GPU types runs at its slowest type's pace (sync, the default) or "
                   "each GPU adds its share (additive: local batches in proportion to each GPU's speed)")


def add_config_arg(p: argparse.ArgumentParser) -> None:
    from hadar.runconfig import add_config_arg as add

    add(p)


def add_profiles_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profiles", type=Path, help="YAML file of policy profiles: {NAME: {policy: REGISTERED, "
                   "PARAM: VALUE, ...}}; each NAME can be used as a policy name (see docs/policies.md)")


def load_profiles(args: argparse.Namespace) -> dict[str, Any] | None:
    from hadar.policies.profiles import load_profiles as load

    return load(args.profiles) if getattr(args, "profiles", None) else None


def load_fork_efficiency(args: argparse.Namespace) -> Any:
    """The ``--fork-efficiency`` setting: a ``ForkEfficiency`` or the noise-scale ``ForkModel`` (None where the
    option is not given)."""
    from hadar.model import fork_model

    given = getattr(args, "fork_efficiency", None)
    return None if given is None else fork_model.load(given)


def add_output_args(p: argparse.ArgumentParser) -> None:
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    o.add_argument("--out", type=Path, help="write summary.json, jobs.csv and events.jsonl here")
    o.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def load_inputs(args: argparse.Namespace | RunConfig) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(job source, cluster, table, extra simulate kwargs) from parsed arguments or their ``RunConfig``."""
    from hadar.runconfig import RunConfig, from_args

    config = args if isinstance(args, RunConfig) else from_args(args)
    return inputs_of(config)


def inputs_of(config: RunConfig) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(job source, cluster, table, extra simulate kwargs) of a run's configuration: the files read."""
    from hadar.config import parse_cluster
    from hadar.model import fork_model
    from hadar.model.fork_efficiency import IDEAL
    from hadar.model.throughput import ThroughputTable
    from hadar.model.world import World

    run, world = config.run, config.world
    cluster = parse_cluster(run.cluster or DEFAULT_CLUSTER, run.gpus_per_node)
    table = ThroughputTable.load(run.throughputs)
    kwargs: dict[str, Any] = {"round_s": run.round_s, "seed": run.seed, "gavel_compat": run.gavel_compat}
    if world.restart_s is not None:
        kwargs["restart_s"] = world.restart_s
    efficiency = None if world.fork_efficiency is None else fork_model.load(world.fork_efficiency)
    kwargs["world"] = World(rate_model=world.rate_model, fork_efficiency=efficiency or IDEAL)
    if isinstance(efficiency, fork_model.ForkModel):  # the same model, its noise scales from family defaults only
        kwargs["fork_estimate"] = efficiency.for_estimate()
    elif efficiency is not None:
        kwargs["fork_estimate"] = efficiency  # simulate: the planner is told the world's (compare: both ways)
    if run.tenants is not None:
        from hadar.service.tenants import load_tenants

        kwargs["tenants"] = load_tenants(run.tenants, set(cluster.listed_types))
        kwargs["min_run_s"] = run.min_run_s
    if config.policy.params:
        kwargs["policy_kwargs"] = dict(config.policy.params)
    w = run.workload
    if w.window is not None:
        kwargs["window"] = w.window
    return _source(w, table, run.seed, kwargs), cluster, table, kwargs


def _source(w: Workload, table: Any, seed: int, kwargs: dict[str, Any]) -> Iterator[Job] | list[Job]:
    """The workload's jobs: a trace's list, or the generator (a list of ``num_jobs`` without a window)."""
    from hadar.sim.generate import JobGenerator
    from hadar.sim.trace import read_jobs

    if not w.generate:
        return read_jobs(w.trace or DEFAULT_TRACE)
    assert w.jobs_per_hour is not None  # the configuration checked it
    if w.num_jobs is not None:
        kwargs["limit"] = w.num_jobs
    generator = JobGenerator(table, w.jobs_per_hour, seed=seed, multi_gpu=w.multi_gpu, multi_priority=w.multi_priority)
    source: Iterator[Job] | list[Job] = iter(generator)
    if w.num_jobs is not None and w.window is None:
        source = list(itertools.islice(source, w.num_jobs))
    return source


def progress_bar(total: int | None, desc: str, args: argparse.Namespace) -> Any:
    """A job-count progress bar on stderr, shown only on a terminal (``hadar.cli.show_progress``)."""
    from tqdm import tqdm

    from hadar.cli import show_progress

    return tqdm(total=total, desc=desc, unit="job", file=sys.stderr, delay=2.0, disable=not show_progress(args),
                leave=False)


def run_simulate(args: argparse.Namespace) -> int:
    from hadar.cli import emit_json
    from hadar.metrics.summary import ftf
    from hadar.runconfig import from_args
    from hadar.sim.run import simulate, write_outputs

    config = from_args(args)
    profiles = load_profiles(args)
    source, cluster, table, kwargs = inputs_of(config)
    first, last = kwargs.get("window", (0, 0))
    total = len(source) if isinstance(source, list) else last - first
    with progress_bar(total, args.policy, args) as bar:
        result = simulate(source, cluster, table, config.policy.name, record_events=args.out is not None,
                          progress=bar.update, profiles=profiles, **kwargs)
    if args.ftf:
        src = source if isinstance(source, list) else inputs_of(config)[0]
        iso_kwargs = {k: v for k, v in kwargs.items() if k != "policy_kwargs"}  # the policy's own, not isolated's
        with progress_bar(total, "isolated (for FTF)", args) as bar:
            iso = simulate(src, cluster, table, "isolated", progress=bar.update, **iso_kwargs)
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
