"""``hadar experiment hadare``: Gavel vs Hadar vs HadarE on real training, side by side.

The same real job set (5 jobs, 4 model families, one job much longer than
the rest, as in HadarE's physical evaluation where a few long jobs decide
the makespan) on the same emulated 5-node heterogeneous cluster (2 V100,
2 P100, 1 K80; one GPU per node), under ``max_min_fairness_perf`` (Gavel),
``hadar`` and ``hadare``, for several seeds. Every job trains exactly its
``total_steps`` (the same sample budget under every policy; HadarE's copies
split it). Reported per policy: TTD (makespan), average JCT, GPU
utilization and each job's final held-out quality, as mean and spread
(standard deviation, min..max) over the seeds.

One local Ray instance serves every run; each run starts its own workers.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hadar.errors import InputError
from hadar.model.cluster import Cluster, Node
from hadar.model.job import Job
from hadar.runtime.tables import write_table

POLICIES = ("max_min_fairness_perf", "hadar", "hadare")
LABELS = {"max_min_fairness_perf": "Gavel", "hadar": "Hadar", "hadare": "HadarE"}
#: (job type, steps): 5 jobs, 4 families; the long LSTM job decides the makespan
JOBS = (("resnet", 260), ("lstm", 1500), ("transformer", 220), ("recoder", 1100), ("lstm", 260))
#: every emulated step stretched this much: 5 workers x 1/5 core leave the driver and Ray a core of 2
#: (at the default GPUs / cores = 2.5, a busy cluster ran each worker at half the speed of an idle one)
DILATION = 5.0


def experiment_cluster() -> Cluster:
    """5 nodes with one GPU each: 2 x V100, 2 x P100, 1 x K80 (``physical_5x1.yaml``'s layout)."""
    return Cluster(tuple(Node(n, t, 1) for n, t in (("v100-0", "v100"), ("v100-1", "v100"), ("p100-0", "p100"),
                                                    ("p100-1", "p100"), ("k80", "k80"))))


def experiment_jobs(scale: float = 1.0) -> list[Job]:
    return [Job(job_id=i, job_type=jt, scale_factor=1, total_steps=max(1, round(steps * scale)),
                origin=f"experiment job {i}") for i, (jt, steps) in enumerate(JOBS)]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("experiment", help="real-training experiments on the emulated cluster",
                       description="Real-training experiments (local Ray, emulated GPU speeds).")
    esub = p.add_subparsers(dest="experiment", required=True)
    h = esub.add_parser("hadare", help="Gavel vs Hadar vs HadarE: TTD, JCT, utilization and model quality",
                        description=__doc__.split("\n\n")[1].replace("\n", " "))
    h.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    h.add_argument("--policies", default=",".join(POLICIES), help=f"comma-separated (default {','.join(POLICIES)})")
    h.add_argument("--scale", type=float, default=1.0, help="multiply every job's steps (default 1)")
    h.add_argument("--round-s", type=float, default=3.0, help="round length in seconds (default 3)")
    h.add_argument("--dilation", type=float, default=DILATION,
                   help=f"emulation: stretch every step this much (default {DILATION:g}; see `hadar run --dilation`)")
    h.add_argument("--fork-optimizer", choices=("largest", "average"), default="largest",
                   help="HadarE's merged optimizer state (default largest)")
    h.add_argument("--out", type=Path, help="write experiment.json, runs.csv, quality.csv and one run "
                   "folder per policy and seed (summary.json, jobs.csv, events.jsonl) here")
    h.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    h.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    h.set_defaults(func=main)
    add_fork_efficiency_parser(esub)
    add_fork_scan_parser(esub)
    from hadar.runtime import ttt

    ttt.add_parser(esub)


def add_fork_efficiency_parser(esub: Any) -> None:
    from hadar.runtime.calibrate import BUDGETS, LOCAL_STEPS

    budgets = ",".join(f"{k}={v}" for k, v in BUDGETS.items())
    f = esub.add_parser("fork-efficiency", help="calibrate the simulator's fork efficiency on real training",
                        description="Train each bundled workload unforked and forked k ways for the same samples "
                        "(weights averaged every round, as the runtime's job tracker does; no Ray), convert the "
                        "quality each reaches into an efficiency (the share of the samples unforked training "
                        "needs to reach the forked run's quality) and fit eff(k) = e^log2(k) per family. "
                        "--out FILE is what `hadar simulate/compare --fork-efficiency FILE` read.")
    f.add_argument("--workloads", default=",".join(BUDGETS), help=f"comma-separated (default {','.join(BUDGETS)})")
    f.add_argument("--copies", default="2,4", help="forked ways k, comma-separated (default 2,4)")
    f.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    f.add_argument("--steps", help=f"samples budget per workload, NAME=STEPS,... (default {budgets})")
    f.add_argument("--local-steps", type=int, default=LOCAL_STEPS,
                   help=f"iterations each copy trains between averages (default {LOCAL_STEPS})")
    f.add_argument("--basis", choices=("metric", "loss"), default="loss",
                   help="quality the fit uses: the held-out loss or the workload's own metric (default loss)")
    _fork_tail(f, "write the calibration file (JSON) here")
    f.set_defaults(func=main_fork_efficiency)


def _fork_tail(f: Any, out: str) -> None:
    """The options both fork experiments end with."""
    f.add_argument("--fork-optimizer", choices=("largest", "average"), default="largest",
                   help="the merged optimizer state, as in `hadar run` (default largest)")
    f.add_argument("--out", type=Path, help=out)
    f.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    f.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")


def add_fork_scan_parser(esub: Any) -> None:
    from hadar.runtime.forkscan import LOCAL_STEPS

    ls = ",".join(map(str, LOCAL_STEPS))
    f = esub.add_parser("fork-scan", help="measure the gradient noise scale and the drift rho of forked training",
                        description="Early and late in training, measure the gradient noise scale Bn and eff(k) of "
                        "k copies averaged every L local steps against the noise-scale model's (Bn + B) / (Bn + kB) "
                        "and their ratio rho (src/hadar/runtime/forkscan.py).")
    f.add_argument("--workloads", default="recoder,lstm", help="comma-separated (default recoder,lstm)")
    f.add_argument("--copies", default="2", help="forked ways k, comma-separated (default 2)")
    f.add_argument("--local-steps", default=ls, help=f"iterations per copy between averages (default {ls})")
    f.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    f.add_argument("--warm", help="samples trained unforked before the fork, comma-separated (default 0 and the "
                   "workload's `fork-efficiency` budget: early and late)")
    f.add_argument("--samples", type=int, default=3072,
                   help="samples (per-worker batches) each run trains from the fork point (default 3072)")
    f.add_argument("--outer", type=float, default=1.0,
                   help="the merge moves the model by this times the copies' mean move (default 1: their average)")
    f.add_argument("--basis", choices=("train", "heldout"), default="train",
                   help="the loss eff is read on: fixed training batches or the held-out set (default train)")
    _fork_tail(f, "write scan.json, scan.csv and scan.png here")
    f.set_defaults(func=main_fork_scan)


def main_fork_scan(args: argparse.Namespace) -> int:
    import time
    from dataclasses import asdict

    from hadar.cli import emit_json
    from hadar.runtime import forkscan, workloads
    from hadar.runtime.calibrate import BUDGETS
    from hadar.runtime.cli import require_runtime_extra

    require_runtime_extra("experiment")
    names = [workloads.get(workloads.ALIASES.get(w.strip().lower(), w.strip())).alias
             for w in args.workloads.split(",") if w.strip()]
    if not names:
        raise InputError("--workloads names no workload")
    if args.samples < 1 or not 0 < args.outer <= 16:
        raise InputError(f"--samples must be at least 1 and --outer in (0, 16], got {args.samples}, {args.outer}")
    given = _ints(args.warm, "--warm", 0) if args.warm else None
    plan = forkscan.Scan(names, _ints(args.copies, "--copies", 2), _ints(args.local_steps, "--local-steps", 1),
                         _ints(args.seeds, "--seeds", 0), {n: given or [0, BUDGETS[n]] for n in names},
                         dict.fromkeys(names, args.samples), args.fork_optimizer, args.outer, args.basis)
    t0 = time.monotonic()

    def progress(text: str) -> None:
        if not args.no_progress:
            sys.stderr.write(f"{text} ({time.monotonic() - t0:.0f} s)\n")

    points = forkscan.scan(plan, progress)
    settings = {**asdict(plan), "wall_s": time.monotonic() - t0}
    written = forkscan.write(points, settings, args.out) if args.out is not None else []
    if args.json:
        emit_json({"settings": settings, "points": [{**asdict(p), "rho": p.rho} for p in points]})
        return 0
    print(forkscan.format_table(points))
    for path in written:
        print(f"wrote {path}")
    return 0


def _ints(text: str, flag: str, low: int) -> list[int]:
    try:
        out = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise InputError(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not out or any(v < low for v in out):
        raise InputError(f"{flag} needs integers of at least {low}, got {text!r}")
    return out


def _fork_args(args: argparse.Namespace) -> tuple[list[str], list[int], list[int], dict[str, int]]:
    from hadar.runtime import workloads
    from hadar.runtime.calibrate import BUDGETS

    names = [workloads.ALIASES.get(w.strip().lower(), w.strip()) for w in args.workloads.split(",") if w.strip()]
    alias = {workloads.get(n).alias for n in names}  # unknown names: one line naming the known ones
    steps = {a: v for a, v in BUDGETS.items() if a in alias}
    for item in (args.steps or "").split(","):
        if item.strip():
            key, _, value = item.partition("=")
            key = workloads.get(key.strip()).alias
            steps[key] = _ints(value, f"--steps {key}", 1)[0]
    copies = _ints(args.copies, "--copies", 2)
    if args.local_steps < 1:
        raise InputError(f"--local-steps must be at least 1, got {args.local_steps}")
    return sorted(alias, key=list(BUDGETS).index), copies, _ints(args.seeds, "--seeds", 0), steps


def main_fork_efficiency(args: argparse.Namespace) -> int:
    import time

    from hadar.cli import emit_json
    from hadar.runtime import calibrate
    from hadar.runtime.cli import require_runtime_extra

    require_runtime_extra("experiment")
    names, copies, seeds, steps = _fork_args(args)
    t0 = time.monotonic()

    def progress(c: calibrate.Curve) -> None:
        if not args.no_progress:
            sys.stderr.write(f"{c.workload} seed {c.seed} k={c.copies}: {c.samples[-1]:.0f} samples, metric "
                             f"{c.metric[-1]:.4f}, loss {c.loss[-1]:.4f} ({time.monotonic() - t0:.0f} s)\n")

    curves = calibrate.measure(names, copies, seeds, steps=steps, local_steps=args.local_steps,
                               optimizer=args.fork_optimizer, progress=progress)
    summary = calibrate.summarize(curves, args.basis)
    settings = {"workloads": names, "copies": copies, "seeds": seeds, "steps": steps, "local_steps": args.local_steps,
                "basis": args.basis, "fork_optimizer": args.fork_optimizer, "wall_s": time.monotonic() - t0}
    result = calibrate.calibration_file(summary, settings, curves)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    if args.json:
        emit_json(result)
        return 0
    print(f"seeds {','.join(map(str, seeds))}, {args.local_steps} local steps per copy per round, basis {args.basis}")
    print(calibrate.format_table(summary))
    if args.out is not None:
        print(f"\nwrote {args.out} (hadar simulate/compare --fork-efficiency {args.out})")
    return 0


def _args(args: argparse.Namespace) -> tuple[list[int], list[str]]:
    from hadar.policies import available

    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise InputError(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in available()]
    if not seeds or not policies or unknown:
        raise InputError(f"need at least one seed and known policies; unknown: {', '.join(unknown) or '-'}")
    if args.scale <= 0 or args.round_s <= 0 or args.dilation < 1:
        raise InputError("--scale and --round-s must be positive, --dilation at least 1")
    return seeds, policies


def main(args: argparse.Namespace) -> int:
    from hadar.cli import emit_json
    from hadar.runtime.cli import require_runtime_extra

    require_runtime_extra("experiment")
    seeds, policies = _args(args)
    runs = run_experiment(policies, seeds, ExperimentOptions(
        scale=args.scale, round_s=args.round_s, out=args.out, fork_optimizer=args.fork_optimizer,
        progress=not args.no_progress, dilation=args.dilation))
    result = aggregate_runs(runs)
    if args.out is not None:
        write_experiment(result, args.out)
    if args.json:
        emit_json(result)
    else:
        print(format_table(result))
        if args.out is not None:
            print(f"\nwrote {args.out}/experiment.json, runs.csv, quality.csv and per-run folders")
    return 0


@dataclass(frozen=True, slots=True)
class ExperimentOptions:
    """How ``run_experiment`` runs: the workload's ``scale`` (its jobs' steps), the round length, where
    each run's folder goes (None: temporary folders), HadarE's fork optimizer, a line per run on stderr
    (``progress``), the cluster and jobs (None: the experiment's own) and the emulation's dilation."""

    scale: float = 1.0
    round_s: float = 3.0
    out: Path | None = None
    fork_optimizer: str = "largest"
    progress: bool = True
    cluster: Cluster | None = None
    jobs: tuple[Job, ...] | None = None
    dilation: float | None = DILATION


def run_experiment(policies: list[str], seeds: list[int], options: ExperimentOptions = ExperimentOptions()
                   ) -> list[dict[str, Any]]:
    """One run per (seed, policy), seeds outer; returns one record per run (summary + per-job quality)."""
    o = options
    import tempfile

    import ray

    from hadar.runtime import session
    from hadar.runtime.run import quality_rows, run, write_outputs

    cluster = o.cluster or experiment_cluster()
    jobs = list(o.jobs) if o.jobs else experiment_jobs(o.scale)
    started = not ray.is_initialized()
    session.start_local(cluster)
    records = []
    try:
        for seed in seeds:
            for pol in policies:
                where = o.out / f"{pol}-seed{seed}" if o.out is not None else Path(
                    tempfile.mkdtemp(prefix="hadar-exp-"))
                res = run(jobs, cluster, pol, round_s=o.round_s, seed=seed, checkpoint_dir=where / "checkpoints",
                          fork_optimizer=o.fork_optimizer, dilation=o.dilation)
                if o.out is not None:
                    write_outputs(res, where)
                s = res.summary
                if o.progress:
                    sys.stderr.write(f"{LABELS.get(pol, pol):>7} seed {seed}: TTD {s['makespan_s']:.1f} s, avg JCT "
                                     f"{s['avg_jct_s']:.1f} s, utilization {s['utilization']:.2f}\n")
                records.append({"policy": pol, "seed": seed, "summary": s, "quality": quality_rows(res),
                                "dir": str(where) if o.out is not None else None})
    finally:
        if started and ray.is_initialized():
            ray.shutdown()
    return records


def _spread(values: list[float]) -> dict[str, float]:
    v = [x for x in values if x is not None and not math.isnan(x)]
    if not v:
        return {"mean": float("nan"), "std": float("nan"), "min": float("nan"), "max": float("nan"), "n": 0}
    return {"mean": statistics.fmean(v), "std": statistics.stdev(v) if len(v) > 1 else 0.0,
            "min": min(v), "max": max(v), "n": len(v)}


def aggregate_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per policy: mean/std/min/max over seeds of TTD, avg JCT, utilization and each job's final quality;
    the Done-when ratios (HadarE TTD / Gavel TTD, HadarE utilization / Hadar utilization) per seed."""
    policies = list(dict.fromkeys(r["policy"] for r in runs))
    table: dict[str, Any] = {}
    for pol in policies:
        mine = [r for r in runs if r["policy"] == pol]
        jobs: dict[int, dict[str, Any]] = {}
        for r in mine:
            for q in r["quality"]:
                j = jobs.setdefault(q["job_id"], {"job_type": q["job_type"], "metric": q["metric"], "values": []})
                j["values"].append(q["final"])
        table[pol] = {"ttd_s": _spread([r["summary"]["makespan_s"] for r in mine]),
                      "avg_jct_s": _spread([r["summary"]["avg_jct_s"] for r in mine]),
                      "utilization": _spread([r["summary"]["utilization"] for r in mine]),
                      "quality": {str(k): {**v, **_spread(v["values"])} for k, v in sorted(jobs.items())}}
    ratios: dict[str, Any] = {}
    by = {(r["policy"], r["seed"]): r["summary"] for r in runs}
    seeds = sorted({r["seed"] for r in runs})

    def per_seed(a: str, b: str, key: str) -> list[float]:
        return [by[(a, s)][key] / by[(b, s)][key] for s in seeds if (a, s) in by and (b, s) in by and by[(b, s)][key]]

    if "hadare" in table and "max_min_fairness_perf" in table:
        ratios["hadare_ttd_over_gavel"] = _spread(per_seed("hadare", "max_min_fairness_perf", "makespan_s"))
    if "hadare" in table and "hadar" in table:
        ratios["hadare_util_over_hadar"] = _spread(per_seed("hadare", "hadar", "utilization"))
    return {"policies": policies, "seeds": seeds, "table": table, "ratios": ratios,
            "runs": [dict(r.items()) for r in runs]}


def _pm(s: dict[str, float], fmt: str = ".1f") -> str:
    if not s.get("n"):
        return "-"
    return f"{s['mean']:{fmt}} ± {s['std']:{fmt}}"


def format_table(result: dict[str, Any]) -> str:
    """The side-by-side table (mean ± std over seeds), then per-job quality, then the ratios."""
    pols = result["policies"]
    t = result["table"]
    head = f"{'':<24}" + "".join(f"{LABELS.get(p, p):>20}" for p in pols)
    lines = [f"seeds {','.join(map(str, result['seeds']))} (mean ± std)", head]
    for key, name, fmt in (("ttd_s", "TTD (s)", ".1f"), ("avg_jct_s", "avg JCT (s)", ".1f"),
                           ("utilization", "GPU utilization", ".3f")):
        lines.append(f"{name:<24}" + "".join(f"{_pm(t[p][key], fmt):>20}" for p in pols))
    first = t[pols[0]]["quality"]
    for jid, q in first.items():
        name = f"job {jid} {q['job_type'].split(' ')[0]} {q['metric']}"
        lines.append(f"{name[:24]:<24}" + "".join(f"{_pm(t[p]['quality'].get(jid, {}), '.3f'):>20}" for p in pols))
    for key, label in (("hadare_ttd_over_gavel", "HadarE TTD / Gavel TTD (goal <= 0.5)"),
                       ("hadare_util_over_hadar", "HadarE util / Hadar util (goal >= 1.45)")):
        if key in result["ratios"]:
            r = result["ratios"][key]
            lines.append(f"{label}: {r['mean']:.2f} (per seed {r['min']:.2f}..{r['max']:.2f})")
    return "\n".join(lines)


def write_experiment(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "experiment.json").write_text(json.dumps(result, indent=2) + "\n")
    write_table(out / "runs.csv",
                ["policy", "seed", "ttd_s", "avg_jct_s", "utilization", "rounds", "failed_leases", "dir"],
                ([r["policy"], r["seed"], r["summary"]["makespan_s"], r["summary"]["avg_jct_s"],
                  r["summary"]["utilization"], r["summary"]["rounds"], r["summary"].get("failed_leases", 0),
                  r["dir"] or ""] for r in result["runs"]))
    write_table(out / "quality.csv", ["policy", "seed", "job_id", "job_type", "metric", "initial", "final"],
                ([r["policy"], r["seed"], q["job_id"], q["job_type"], q["metric"], q["initial"], q["final"]]
                 for r in result["runs"] for q in r["quality"]))
