"""``hadar compare``: several policies on the identical workload, side by side.

Prints one table (avg and p99 JCT, TTD, utilization, queuing delay, FTF
mean/max, stretch and TTD over their physical limits, and each policy's
ratios to the baseline); with ``--fork-efficiency FILE`` each forking policy
(HadarE) gets a second row, ``NAME-calibrated``, its copies credited as the file
says next to the ideal row; ``--json`` prints one object whose ``results``
list holds, per policy, the same keys as ``simulate --json`` plus the
ratios; ``--out DIR`` also writes each run's files and the plots (JCT CDF,
utilization over time, placement timelines for small runs).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hadar.errors import HadarError, InputError

if TYPE_CHECKING:
    from hadar.runconfig import RunConfig

DEFAULT_POLICIES = "hadar,max_min_fairness_perf,yarn_cs"
CALIBRATED = "-calibrated"  # suffix of a forking policy's row run with --fork-efficiency
RATIO_KEYS = {"avg_jct_s": "jct_vs_baseline", "makespan_s": "ttd_vs_baseline",
              "avg_queuing_delay_s": "queuing_vs_baseline", "ftf_mean": "ftf_mean_vs_baseline"}


def add_parser(sub: Any) -> None:
    from hadar.cli_simulate import add_output_args, add_workload_args

    p = sub.add_parser("compare", help="run several policies on the same workload and compare them",
                       description="Run every policy on the identical workload and cluster; print one table "
                       "with the physical limits (spec/hadar.md section 5) and ratios to the baseline.")
    add_workload_args(p)
    p.add_argument("--policies", default=DEFAULT_POLICIES,
                   help=f"comma-separated policy or profile names (default {DEFAULT_POLICIES})")
    from hadar.cli_simulate import add_profiles_arg

    add_profiles_arg(p)
    p.add_argument("--baseline", help="policy the ratios are taken against (default: max_min_fairness_perf if "
                   "listed, else the first policy)")
    p.add_argument("--no-ftf", action="store_true", help="skip the `isolated` run that finish-time fairness needs")
    add_output_args(p)
    from hadar.cli_simulate import add_config_arg

    add_config_arg(p)
    from hadar.sweep import add_args as add_parallel_args

    add_parallel_args(p)
    p.set_defaults(func=run_compare)


def _policies(config: RunConfig, profiles: dict[str, Any] | None = None) -> tuple[list[str], str]:
    from hadar.policies.profiles import resolve

    names = list(config.policy.names)
    for n in names:
        resolve(n, profiles)  # unknown names: one line naming the known policies and profiles
    baseline = config.policy.baseline or ("max_min_fairness_perf" if "max_min_fairness_perf" in names else names[0])
    return names, baseline


def compare(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    """Run every policy; returns (summaries with ratios, per-policy SimResults, the baseline's name).

    The runs are independent (each loads its own, identical workload), so ``--parallel N`` and
    ``--address`` run them side by side (``hadar.sweep``) with the same results as one after the other.
    """
    from hadar.cli_simulate import inputs_of, load_profiles
    from hadar.metrics.summary import ftf
    from hadar.runconfig import from_args

    config = from_args(args)
    profiles = load_profiles(args)
    names, baseline = _policies(config, profiles)
    want_ftf = not args.no_ftf
    source, _, _, kwargs = inputs_of(config)  # bad input fails here, before any run starts
    eff = kwargs.get("fork_estimate")
    total = len(source) if isinstance(source, list) else (kwargs["window"][1] - kwargs["window"][0])
    order = names + (["isolated"] if want_ftf and "isolated" not in names else [])
    record = args.out is not None
    tasks = [(config, name, profiles, name == "isolated" and "isolated" not in names, False, record) for name in order]
    runs = dict(zip(order, _run_all(tasks, total, args), strict=True))
    rows = list(names)
    forking = [n for n in names if runs[n].summary.get("ttd_forking_bound_s") is not None] if eff is not None else []
    if forking:  # each forking policy again, its planner told what the world's copies are worth
        again = _run_all([(config, n, profiles, False, True, record) for n in forking], total, args)
        for name, res in zip(forking, again, strict=True):
            label = name + CALIBRATED
            res.summary["policy"] = label
            runs[label] = res
            rows.insert(rows.index(name) + 1, label)
    results = []
    for name in rows:
        s = dict(runs[name].summary)
        s.update(ftf(runs[name].rows, runs["isolated"].rows) if want_ftf else {"ftf_mean": None, "ftf_max": None})
        results.append(s)
    base = next(r for r in results if r["policy"] == baseline)
    for r in results:
        for key, ratio in RATIO_KEYS.items():
            r[ratio] = r[key] / base[key] if r.get(key) is not None and base.get(key) else None
    return results, runs, baseline


def _run_all(tasks: list[Any], total: int, args: argparse.Namespace) -> list[Any]:
    """``tasks`` through ``hadar.sweep`` (in order), one progress bar over all of them."""
    from hadar.cli_simulate import progress_bar
    from hadar.sweep import run_tasks

    with progress_bar(total * len(tasks), f"{len(tasks)} runs", args) as bar:
        finished: list[int] = []

        def done(i: int) -> None:
            finished.append(i)
            bar.set_description(f"{len(finished)}/{len(tasks)} runs")

        return run_tasks(_run_one, tasks, workers=getattr(args, "parallel", 1), address=getattr(args, "address", None),
                         on_progress=lambda i, n: bar.update(n), on_done=done)


def _run_one(task: tuple[RunConfig, str, Any, bool, bool, bool], report: Any) -> Any:
    """One policy's run of ``compare`` (module level: ``hadar.sweep`` may run it in another process);
    ``calibrated``: the forking planner's estimate is the world's fork efficiency (``--fork-efficiency``),
    else the policy's own (ideal); every run is in the same world."""
    from hadar.cli_simulate import inputs_of
    from hadar.sim.run import simulate

    config, name, profiles, for_ftf, calibrated, record = task
    source, cluster, table, kwargs = inputs_of(config)  # a fresh, identical workload per policy
    if not calibrated:
        kwargs.pop("fork_estimate", None)
    try:
        return simulate(source, cluster, table, name, record_events=record, progress=report,
                        profiles=profiles, **kwargs)
    except HadarError as e:
        if not for_ftf:
            raise
        raise InputError(f"finish-time fairness needs each job run alone (the `isolated` policy), which "
                         f"failed: {e} (--no-ftf skips it)") from None


def run_compare(args: argparse.Namespace) -> int:
    from hadar.cli import emit_json
    from hadar.config import parse_cluster

    results, runs, baseline = compare(args)
    workload = args.trace or ("generated" if args.generate else "max_min_fairness")
    written: list[Path] = []
    if args.out is not None:
        written = write_compare_outputs(args.out, results, runs, parse_cluster(args.cluster, args.gpus_per_node))
    if args.json:
        emit_json({"workload": workload, "cluster": args.cluster, "baseline": baseline,
                   "gavel_compat": args.gavel_compat, "results": results,
                   "outputs": [str(p) for p in written]})
        return 0
    print(f"workload {workload} on {args.cluster}, {'--gavel-compat' if args.gavel_compat else 'default'} "
          f"re-solve cadence, baseline {baseline}")
    print(format_table(results))
    b = results[0]
    print(f"limits: JCT bound {b['jct_bound_s'] / 3600:.2f} h, TTD bound {b['ttd_bound_s'] / 3600:.2f} h")
    for r in results:
        if r.get("ttd_forking_bound_s") is not None:
            print(f"{r['policy']} forks jobs: its TTD/bound is against the forking TTD bound "
                  f"{r['ttd_forking_bound_s'] / 3600:.2f} h")
    world = b.get("world") or {}
    if world.get("fork_model"):
        m = world["fork_model"]
        print(f"world: {m['mode']} forks credited as data parallelism at the copies' summed batch x rho "
              f"{m['rho']} less {m['merge_s']} s per round to merge (the bound stays ideal); NAME-calibrated "
              f"rows' planner holds the same model, its noise scales from family defaults")
    elif world.get("fork_efficiency", "ideal") != "ideal":
        print(f"world: forked copies' steps credited x e^log2(copies), e per job family from "
              f"{world['fork_efficiency']} (the bound stays ideal); NAME-calibrated rows' planner is told so")
    if world.get("rate_model", "sync") != "sync":
        print(f"world: a job on several GPU types runs {world['rate_model']}")
    for p in written:
        print(f"wrote {p}")
    return 0


COLUMNS = (("policy", "policy", None), ("avg JCT h", "avg_jct_s", 3600), ("p99 JCT h", "p99_jct_s", 3600),
           ("TTD h", "makespan_s", 3600), ("util", "utilization", 1), ("queue h", "avg_queuing_delay_s", 3600),
           ("FTF mean", "ftf_mean", 1), ("FTF max", "ftf_max", 1), ("stretch", "stretch", 1),
           ("TTD/bound", "ttd_over_bound", 1), ("JCT/base", "jct_vs_baseline", 1),
           ("TTD/base", "ttd_vs_baseline", 1), ("queue/base", "queuing_vs_baseline", 1), ("wall s", "wall_s", 1))


def format_table(results: list[dict[str, Any]]) -> str:
    """A fixed-width text table, one row per policy."""
    head = [c[0] for c in COLUMNS]
    rows = []
    for r in results:
        row = []
        for _, key, div in COLUMNS:
            v = r.get(key)
            row.append(str(v) if div is None else ("-" if v is None else f"{v / div:.3f}"))
        rows.append(row)
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(head, widths, strict=True)))]
    for row in rows:
        cells = enumerate(zip(row, widths, strict=True))
        lines.append("  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in cells))
    return "\n".join(lines)


def write_compare_outputs(out: Path, results: list[dict[str, Any]], runs: dict[str, Any], cluster: Any) -> list[Path]:
    """Per policy: DIR/<policy>/{summary.json,jobs.csv,events.jsonl}; plots and compare.json in DIR."""
    import json

    from hadar.metrics import plots
    from hadar.sim.run import write_outputs

    out.mkdir(parents=True, exist_ok=True)
    names = [r["policy"] for r in results]
    for name in names:
        write_outputs(runs[name], out / name)
    (out / "compare.json").write_text(json.dumps({"results": results}, indent=2) + "\n")
    written = [out / "compare.json"]
    written.extend(plots.write_run_plots(out, {n: runs[n] for n in names}, cluster))
    return written
