"""Head to head with Sia (SOSP'23) on its own workloads (issue 20, item 3; docs/sia.md).

Each of Sia's 8 Philly and 10 Saturn (Helios) workloads is imported with `hadar trace import sia`
(rigid jobs at their rows' GPU counts and batches, Sia's restore times as `restart_s`) and run in
hadar's simulator under Gavel's max_sum_throughput_perf, LAS (max_min_fairness_perf), Hadar and
HadarE (and any profile of `--profiles`). Ratios are avg JCT over hadar's own max-sum. With `--jobs
rigid,scale-gpus,adaptive` each workload is imported once per kind (`hadar trace import sia --jobs KIND`)
and every policy but the baseline runs on each (columns `POLICY:KIND`; the baseline stays max-sum on the
rigid import).

With `--sia-python PY` (a Python that runs Sia's simulator: 3.11, numpy 1.23.5, pandas<2, scipy,
cvxpy with cylp 0.93, ecos, cvxopt, rich, psutil, autograd) the same workloads also run in Sia's
simulator: Gavel's max-sum (interval 360 s), Sia adaptive and Sia rigid (the workload with
`category=rigid`; p=-0.5, lambda_a=0.01, lambda_n=1.1, interval 60 s, as Sia's run_experiment.sh),
with CBC on one thread; ratios are to Sia's own max-sum, and `calib` = hadar's max-sum avg JCT over
Sia's. Sia's runs take minutes each: pick them with `--sia-policies` and `--workloads`.

With `--sia-results FILE.json` Sia's results are stored: each run of Sia's simulator is written into
FILE as soon as it ends (keyed by workload and Sia policy, with its arguments, wall time and date),
and a (workload, Sia policy) already in FILE is read from it rather than run again (`--sia-rerun`
runs it anyway). Without `--sia-python` Sia's columns come from FILE alone: hadar's side re-runs in
seconds per workload and the table shows both.

    python bench/bench_sia.py --sia-dir SIA/sia-simulator [--workloads philly/workload-1,...]
        [--policies max_sum_throughput_perf,max_min_fairness_perf,hadar,hadare] [--profiles FILE]
        [--jobs rigid,scale-gpus,adaptive]
        [--sia-python PY] [--sia-policies gavel,sia,sia-rigid,sia-scale-gpus] [--sia-results FILE.json]
        [--sia-rerun]
        [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from hadar.config import parse_cluster
from hadar.errors import HadarError
from hadar.model.throughput import ThroughputTable
from hadar.policies.profiles import load_profiles
from hadar.sim.run import simulate
from hadar.sim.sia_import import import_sia, write_import
from hadar.sim.trace import read_jobs

WORKLOADS = tuple(f"philly/workload-{i}" for i in range(1, 9)) + tuple(f"saturn/workload-{i}" for i in range(1, 11))
POLICIES = ("max_sum_throughput_perf", "max_min_fairness_perf", "hadar", "hadare")
BASE = "max_sum_throughput_perf"
SIA_ARGS = {
    "gavel": ["--policy=gavel", "--interval=360"],
    "sia": ["--policy=sia", "--policy_p_val=-0.5", "--mip_lambda_a=0.01", "--mip_lambda_n=1.1", "--interval=60",
            "--project_throughputs", "--share_max_replicas"],
}
SIA_ARGS["sia-rigid"] = SIA_ARGS["sia"]
SIA_ARGS["sia-scale-gpus"] = SIA_ARGS["sia"]
#: Sia's runs on the workload with every job of one category (Sia's meaning: rigid keeps its GPU count and
#: batch, scale-gpus adapts the count at a fixed batch); plain ``sia`` leaves the workload as it is (adaptive)
CATEGORY = {"sia-rigid": "rigid", "sia-scale-gpus": "scale-gpus"}
#: run Sia's multi_simulator.py with CBC on one thread and the solver quiet (its own config otherwise)
#: the artifact the runs stored here came from (the Sia folder is not a git checkout: its code is hashed too)
SIA_SOURCE = "siasosp23/artifacts aaf7a0d, sia-simulator/"
SIA_DRIVER = ("import runpy, sys; import simulator_config as c; c.sia_solver_num_threads = 1; "
              "c.sia_solver_verbose = False; sys.argv = ['multi_simulator.py'] + sys.argv[1:]; "
              "runpy.run_path('multi_simulator.py', run_name='__main__')")


def hadar_runs(folder: Path, policies: tuple[str, ...], profiles: Any) -> dict[str, dict[str, Any]]:
    table = ThroughputTable.load(folder / "throughputs.json")
    out = {}
    for p in policies:
        t0 = time.perf_counter()
        run = simulate(read_jobs(folder / "trace.csv"), parse_cluster(str(folder / "cluster.yaml")), table, p,
                       profiles=profiles)
        out[p] = {"avg_jct_h": run.summary["avg_jct_s"] / 3600, "p99_jct_h": run.summary["p99_jct_s"] / 3600,
                  "makespan_h": run.summary["makespan_s"] / 3600, "restarts": run.summary.get("restarts"),
                  "wall_s": time.perf_counter() - t0}
    return out


def sia_run(sia_dir: Path, python: str, workload: Path, policy: str, folder: Path) -> dict[str, Any]:
    """One run of Sia's simulator; avg/p99 JCT and makespan from its log's last record, and how it ran."""
    args = [str(workload.relative_to(sia_dir) if workload.is_relative_to(sia_dir) else workload), *SIA_ARGS[policy]]
    if policy in CATEGORY:
        category = CATEGORY[policy]
        marked = folder / f"{workload.stem}-{category}.csv"
        with workload.open(newline="") as f, marked.open("w", newline="") as g:
            rows = list(csv.DictReader(f))
            w = csv.DictWriter(g, fieldnames=[*rows[0], "category"])
            w.writeheader()
            w.writerows({**r, "category": category} for r in rows)
        workload = marked
        args[0] += f" with a category column of {category}"
    log = folder / f"sia-{policy}.log"
    t0 = time.perf_counter()
    done = subprocess.run([python, "-c", SIA_DRIVER, str(workload.resolve()), *SIA_ARGS[policy],
                           f"--output={log.resolve()}"], cwd=sia_dir, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    wall = time.perf_counter() - t0
    if done.returncode != 0 or not log.is_file():
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise HadarError(f"Sia's simulator failed on {workload.name} ({policy}): {tail[0]}")
    with log.open() as f:
        last = json.loads(f.readlines()[-1])
    jobs = last["submitted_jobs"]
    jcts = [j["completion_time"] - j["submission_time"] for j in jobs]
    return {"avg_jct_h": float(np.mean(jcts)) / 3600, "p99_jct_h": float(np.percentile(jcts, 99)) / 3600,
            "makespan_h": max(j["completion_time"] for j in jobs) / 3600,
            "restarts": sum(j["num_restarts"] or 0 for j in jobs), "wall_s": round(wall, 1),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "args": args,
            "sia": SIA_SOURCE, "sia_code_sha256": sia_code_hash(sia_dir)}


def sia_code_hash(sia_dir: Path) -> str:
    """sha256 over the top-level *.py files of Sia's folder (by name, then content): which code ran."""
    h = hashlib.sha256()
    for path in sorted(sia_dir.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def load_sia_results(path: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """Stored runs of Sia's simulator, {workload: {Sia policy: record}}; a missing file is empty."""
    if not path.exists():
        return {}
    try:
        runs = json.loads(path.read_text())["runs"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise HadarError(f"--sia-results {path}: not a file of stored Sia runs ({e})") from None
    ok = isinstance(runs, dict) and all(
        isinstance(by, dict) and all(p in SIA_ARGS and isinstance(r, dict) and isinstance(r.get("avg_jct_h"), float)
                                     for p, r in by.items()) for by in runs.values())
    if not ok:
        raise HadarError(f"--sia-results {path}: want {{'runs': {{workload: {{policy: {{'avg_jct_h': h, ...}}}}}}}} "
                         f"with policies of {', '.join(SIA_ARGS)}")
    return runs


def store_sia_result(path: Path, workload: str, policy: str, record: dict[str, Any]) -> None:
    """Adds (or replaces) one run in the stored file, written whole and then renamed into place."""
    runs = load_sia_results(path)
    runs.setdefault(workload, {})[policy] = record
    ordered = {w: dict(sorted(runs[w].items())) for w in sorted(runs, key=workload_order)}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"about": STORE_ABOUT, "runs": ordered}, indent=1) + "\n")
    os.replace(tmp, path)


def workload_order(name: str) -> tuple[str, int, str]:
    """philly/workload-2 before philly/workload-10 (by set, then number)."""
    head, _, num = name.rpartition("-")
    return (head, int(num), name) if num.isdigit() else (name, 0, name)


STORE_ABOUT = ("Runs of Sia's simulator by bench/bench_sia.py --sia-results (docs/sia.md): per workload and Sia "
               "policy, avg/p99 JCT and makespan in hours, restarts, wall seconds, date (UTC), Sia's arguments.")


def sia_side(name: str, sia_policies: tuple[str, ...], args: argparse.Namespace,
             folder: Path) -> dict[str, dict[str, Any]]:
    """Sia's results on one workload: stored ones unless --sia-rerun, the rest run (with --sia-python)."""
    stored = load_sia_results(args.sia_results).get(name, {}) if args.sia_results else {}
    out: dict[str, dict[str, Any]] = {}
    for p in sia_policies:
        if p in stored and not args.sia_rerun:
            out[p] = {**stored[p], "stored": True}
        elif args.sia_python:
            out[p] = sia_run(args.sia_dir, args.sia_python, args.sia_dir / "workloads" / f"{name}.csv", p, folder)
            if args.sia_results:
                store_sia_result(args.sia_results, name, p, out[p])
    return out


def row(name: str, res: dict[str, dict[str, Any]], policies: tuple[str, ...], sia: dict[str, dict[str, Any]],
        sia_policies: tuple[str, ...]) -> str:
    base = res[BASE]["avg_jct_h"]
    cells = [f"{name:<18}", f"{base:8.3f}"] + [f"{res[p]['avg_jct_h'] / base:8.3f}" for p in policies if p != BASE]
    cells += [f"{r['avg_jct_h'] / base:8.3f}" for p, r in res.items() if ":" in p]
    if sia_policies:
        gavel = sia.get("gavel", {}).get("avg_jct_h")
        cells.append(f"{gavel:8.3f}" if gavel else f"{'-':>8}")
        cells += [f"{sia[p]['avg_jct_h'] / gavel:8.3f}" if gavel and p in sia else f"{'-':>8}"
                  for p in sia_policies if p != "gavel"]
        cells.append(f"{base / gavel:8.3f}" if gavel else f"{'-':>8}")
    return " ".join(cells)


def header(policies: tuple[str, ...], sia_policies: tuple[str, ...], kinds: tuple[str, ...] = ("rigid",)) -> str:
    names = [f"{'workload':<18}", f"{'ms h':>8}"] + [f"{p[:8]:>8}" for p in policies if p != BASE]
    names += [f"{_short(p, k):>8}" for k in kinds if k != "rigid" for p in policies if p != BASE]
    if sia_policies:
        names += [f"{'sia:ms h':>8}"] + [f"{p[:8]:>8}" for p in sia_policies if p != "gavel"] + [f"{'calib':>8}"]
    return " ".join(names)


def _short(policy: str, kind: str) -> str:
    """A column name of at most 8 characters: ``hadar:sg``, ``hadar:ad``."""
    return f"{policy[:5]}:{'sg' if kind == 'scale-gpus' else kind[:2]}"


def kind_runs(root: Path, name: str, args: argparse.Namespace, kinds: tuple[str, ...], policies: tuple[str, ...],
              profiles: Any) -> dict[str, dict[str, Any]]:
    """hadar's runs of one workload: every policy on the rigid import, every policy but the baseline on each
    other kind's import (keyed ``POLICY:KIND``)."""
    out: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        folder = root / name.replace("/", "-") / ("" if kind == "rigid" else kind)
        folder.mkdir(parents=True, exist_ok=True)
        write_import(*import_sia(args.sia_dir / "workloads" / f"{name}.csv", args.sia_dir, jobs=kind), folder)
        ran = hadar_runs(folder, policies if kind == "rigid" else tuple(p for p in policies if p != BASE), profiles)
        out.update(ran if kind == "rigid" else {f"{p}:{kind}": r for p, r in ran.items()})
    return out


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sia-dir", type=Path, required=True, help="Sia's sia-simulator folder")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated SET/workload-N")
    ap.add_argument("--policies", default=",".join(POLICIES), help="hadar policies or profile names")
    ap.add_argument("--profiles", type=Path, help="YAML policy profiles (docs/policies.md)")
    ap.add_argument("--jobs", default="rigid", help="comma-separated kinds of `hadar trace import sia --jobs`: "
                    "rigid (always, the baseline's), scale-gpus, adaptive")
    ap.add_argument("--sia-python", help="a Python that runs Sia's simulator (runs it too)")
    ap.add_argument("--sia-policies", default="gavel,sia,sia-rigid", help="of gavel,sia,sia-rigid,sia-scale-gpus")
    ap.add_argument("--sia-results", type=Path, help="JSON file of Sia's runs: read, and written after each run")
    ap.add_argument("--sia-rerun", action="store_true", help="run Sia even where --sia-results has the run")
    ap.add_argument("--out", type=Path, help="keep the imported workloads and Sia's logs here")
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    policies = tuple(dict.fromkeys((BASE, *args.policies.split(","))))
    use_sia = args.sia_python or args.sia_results
    sia_policies = tuple(p for p in args.sia_policies.split(",") if p) if use_sia else ()
    if any(p not in SIA_ARGS for p in sia_policies):
        print(f"bench_sia: --sia-policies: want some of {', '.join(SIA_ARGS)}", file=sys.stderr)
        return 2
    if args.sia_results and not args.sia_results.parent.is_dir():
        print(f"bench_sia: --sia-results {args.sia_results}: its folder does not exist", file=sys.stderr)
        return 2
    kinds = tuple(dict.fromkeys(("rigid", *(k for k in args.jobs.split(",") if k))))
    if any(k not in ("rigid", "scale-gpus", "adaptive") for k in kinds):
        print("bench_sia: --jobs: want some of rigid,scale-gpus,adaptive", file=sys.stderr)
        return 2
    profiles = load_profiles(args.profiles) if args.profiles else None
    root = args.out or Path(tempfile.mkdtemp(prefix="bench-sia-"))
    print(f"avg JCT: hadar's simulator as a ratio to its max-sum (ms h); Sia's simulator as a ratio to its "
          f"max-sum (sia:ms h); calib = hadar ms / Sia ms. Files: {root}")
    print(header(policies, sia_policies, kinds))
    walls: dict[str, float] = {}
    for name in args.workloads.split(","):
        folder = root / name.replace("/", "-")
        res = kind_runs(root, name, args, kinds, policies, profiles)
        sia = sia_side(name, sia_policies, args, folder)
        ran = [(f"sia:{k}", v) for k, v in sia.items() if not v.get("stored")]
        for p, r in [*res.items(), *ran]:
            walls[p] = walls.get(p, 0.0) + r["wall_s"]
        print(row(name, res, policies, sia, sia_policies), flush=True)
        (folder / "results.json").write_text(json.dumps({"hadar": res, "sia": sia}, indent=1) + "\n")
    print("wall s (Sia's stored runs not counted): " + ", ".join(f"{p} {w:.0f}" for p, w in walls.items()))
    return 0


def cli() -> int:
    try:
        return main()
    except HadarError as e:
        print(f"bench_sia: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli())
