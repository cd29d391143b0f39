"""Head to head with Sia (SOSP'23) on its own workloads (issue 20, item 3; docs/sia.md).

Each of Sia's 8 Philly and 10 Saturn (Helios) workloads is imported with `hadar trace import sia`
(rigid jobs at their rows' GPU counts and batches, Sia's restore times as `restart_s`) and run in
hadar's simulator under Gavel's max_sum_throughput_perf, LAS (max_min_fairness_perf), Hadar and
HadarE (and any profile of `--profiles`). Ratios are avg JCT over hadar's own max-sum.

With `--sia-python PY` (a Python that runs Sia's simulator: 3.11, numpy 1.23.5, pandas<2, scipy,
cvxpy with cylp 0.93, ecos, cvxopt, rich, psutil, autograd) the same workloads also run in Sia's
simulator: Gavel's max-sum (interval 360 s), Sia adaptive and Sia rigid (the workload with
`category=rigid`; p=-0.5, lambda_a=0.01, lambda_n=1.1, interval 60 s, as Sia's run_experiment.sh),
with CBC on one thread; ratios are to Sia's own max-sum, and `calib` = hadar's max-sum avg JCT over
Sia's. Sia's runs take minutes each: pick them with `--sia-policies` and `--workloads`.

    python bench/bench_sia.py --sia-dir SIA/sia-simulator [--workloads philly/workload-1,...]
        [--policies max_sum_throughput_perf,max_min_fairness_perf,hadar,hadare] [--profiles FILE]
        [--sia-python PY] [--sia-policies gavel,sia,sia-rigid] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
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
#: run Sia's multi_simulator.py with CBC on one thread and the solver quiet (its own config otherwise)
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
                  "makespan_h": run.summary["makespan_s"] / 3600, "wall_s": time.perf_counter() - t0}
    return out


def sia_run(sia_dir: Path, python: str, workload: Path, policy: str, folder: Path) -> dict[str, Any]:
    """One run of Sia's simulator; avg/p99 JCT and makespan from its log's last record."""
    if policy == "sia-rigid":
        rigid = folder / f"{workload.stem}-rigid.csv"
        with workload.open(newline="") as f, rigid.open("w", newline="") as g:
            rows = list(csv.DictReader(f))
            w = csv.DictWriter(g, fieldnames=[*rows[0], "category"])
            w.writeheader()
            w.writerows({**r, "category": "rigid"} for r in rows)
        workload = rigid
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
    jcts = [j["completion_time"] - j["submission_time"] for j in last["submitted_jobs"]]
    return {"avg_jct_h": float(np.mean(jcts)) / 3600, "p99_jct_h": float(np.percentile(jcts, 99)) / 3600,
            "makespan_h": max(j["completion_time"] for j in last["submitted_jobs"]) / 3600, "wall_s": wall}


def row(name: str, res: dict[str, dict[str, Any]], policies: tuple[str, ...], sia: dict[str, dict[str, Any]],
        sia_policies: tuple[str, ...]) -> str:
    base = res[BASE]["avg_jct_h"]
    cells = [f"{name:<18}", f"{base:8.3f}"] + [f"{res[p]['avg_jct_h'] / base:8.3f}" for p in policies if p != BASE]
    if sia_policies:
        gavel = sia.get("gavel", {}).get("avg_jct_h")
        cells.append(f"{gavel:8.3f}" if gavel else f"{'-':>8}")
        cells += [f"{sia[p]['avg_jct_h'] / gavel:8.3f}" if gavel and p in sia else f"{'-':>8}"
                  for p in sia_policies if p != "gavel"]
        cells.append(f"{base / gavel:8.3f}" if gavel else f"{'-':>8}")
    return " ".join(cells)


def header(policies: tuple[str, ...], sia_policies: tuple[str, ...]) -> str:
    names = [f"{'workload':<18}", f"{'ms h':>8}"] + [f"{p[:8]:>8}" for p in policies if p != BASE]
    if sia_policies:
        names += [f"{'sia:ms h':>8}"] + [f"{p[:8]:>8}" for p in sia_policies if p != "gavel"] + [f"{'calib':>8}"]
    return " ".join(names)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sia-dir", type=Path, required=True, help="Sia's sia-simulator folder")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated SET/workload-N")
    ap.add_argument("--policies", default=",".join(POLICIES), help="hadar policies or profile names")
    ap.add_argument("--profiles", type=Path, help="YAML policy profiles (docs/policies.md)")
    ap.add_argument("--sia-python", help="a Python that runs Sia's simulator (runs it too)")
    ap.add_argument("--sia-policies", default="gavel,sia,sia-rigid", help="of gavel,sia,sia-rigid")
    ap.add_argument("--out", type=Path, help="keep the imported workloads and Sia's logs here")
    args = ap.parse_args()
    policies = tuple(dict.fromkeys((BASE, *args.policies.split(","))))
    sia_policies = tuple(p for p in args.sia_policies.split(",") if p) if args.sia_python else ()
    if any(p not in SIA_ARGS for p in sia_policies):
        print(f"bench_sia: --sia-policies: want some of {', '.join(SIA_ARGS)}", file=sys.stderr)
        return 2
    profiles = load_profiles(args.profiles) if args.profiles else None
    root = args.out or Path(tempfile.mkdtemp(prefix="bench-sia-"))
    print(f"avg JCT: hadar's simulator as a ratio to its max-sum (ms h); Sia's simulator as a ratio to its "
          f"max-sum (sia:ms h); calib = hadar ms / Sia ms. Files: {root}")
    print(header(policies, sia_policies))
    walls: dict[str, float] = {}
    for name in args.workloads.split(","):
        workload = args.sia_dir / "workloads" / f"{name}.csv"
        folder = root / name.replace("/", "-")
        folder.mkdir(parents=True, exist_ok=True)
        write_import(*import_sia(workload, args.sia_dir), folder)
        res = hadar_runs(folder, policies, profiles)
        sia = {p: sia_run(args.sia_dir, args.sia_python, workload, p, folder) for p in sia_policies}
        for p, r in [*res.items(), *((f"sia:{k}", v) for k, v in sia.items())]:
            walls[p] = walls.get(p, 0.0) + r["wall_s"]
        print(row(name, res, policies, sia, sia_policies), flush=True)
        (folder / "results.json").write_text(json.dumps({"hadar": res, "sia": sia}, indent=1) + "\n")
    print("wall s: " + ", ".join(f"{p} {w:.0f}" for p, w in walls.items()))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except HadarError as e:
        print(f"bench_sia: {e}", file=sys.stderr)
        sys.exit(2)
