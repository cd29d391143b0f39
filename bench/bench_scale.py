"""Datacenter scale (issue 19, item 4): wall time and peak memory as the job count grows.

Two workloads, each under LAS (max_min_fairness_perf) and Hadar, at 1k, 10k and 50k jobs:

- generated: Gavel's generator (multi-GPU jobs, seed 0, 180 jobs/h: Gavel's steady-state load of
  2 jobs/h on 108 GPUs scaled to 10,000) on 10,000 GPUs in 8-GPU nodes (v100 3,328, p100 3,336,
  k80 3,336);
- philly: the largest Philly virtual cluster (6214e9, about 41,000 jobs in ../shared/real-traces/)
  imported with `hadar trace import philly`'s rules (seed 0), first N jobs, on a cluster of its size:
  its GPU-time divided by its time span (the GPUs its average load needs), in 8-GPU nodes of the
  three types, rounded up.

Each case runs in a fresh subprocess (peak RSS is that process's own ``ru_maxrss``) with a time
limit (``--timeout``, default 600 s); a case over the limit prints `>limit`.

    .venv/bin/python bench/bench_scale.py [--sizes 1000,10000,50000] [--workloads generated,philly]
        [--policies max_min_fairness_perf,hadar] [--timeout 600]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

PHILLY_FILE = Path(__file__).resolve().parents[2] / "shared" / "real-traces" / "philly.csv"
PHILLY_VC = "6214e9"
GENERATED_CLUSTER = "v100=3328,p100=3336,k80=3336"


def philly_cluster(path: Path, vc: str) -> str:
    """8-GPU nodes of three types, as many GPUs as the virtual cluster's GPU-time over its span."""
    first, last, gpu_s = math.inf, -math.inf, 0.0
    with path.open() as f:
        for r in csv.DictReader(f):
            if r["cluster"] != vc:
                continue
            t = datetime.fromisoformat(r["timestamp"]).timestamp()
            first, last = min(first, t), max(last, t + float(r["duration"]))
            gpu_s += float(r["gpu_time"])
    nodes = math.ceil(gpu_s / (last - first) / 8)
    per = [nodes // 3 + (i < nodes % 3) for i in range(3)]
    return f"v100={8 * per[0]},p100={8 * per[1]},k80={8 * per[2]}"


def one(workload: str, size: int, policy: str, philly: Path) -> dict:
    """Run one case in this process; returns its figures."""
    from hadar.config import parse_cluster
    from hadar.model.throughput import ThroughputTable
    from hadar.sim.generate import JobGenerator
    from hadar.sim.importers import PHILLY, PHILLY_GROUP, Selection, import_trace, write_rows
    from hadar.sim.run import simulate
    from hadar.sim.trace import read_jobs

    table = ThroughputTable.load()
    if workload == "generated":
        spec = GENERATED_CLUSTER
        jobs = list(itertools.islice(JobGenerator(table, 180.0, seed=0, multi_gpu=True), size))
    else:
        spec = philly_cluster(philly, PHILLY_VC)
        rows = import_trace(philly, PHILLY, Selection(where=((PHILLY_GROUP, PHILLY_VC),), jobs=size), table)
        with tempfile.TemporaryDirectory() as tmp:
            write_rows(rows, Path(tmp) / "t.csv")
            jobs = read_jobs(Path(tmp) / "t.csv")
    t0 = time.perf_counter()
    s = simulate(jobs, parse_cluster(spec, 8), table, policy).summary
    return {"wall_s": time.perf_counter() - t0, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "cluster": spec, "jobs": s["jobs_completed"], "rounds": s["rounds"], "avg_jct_h": s["avg_jct_s"] / 3600}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,50000")
    ap.add_argument("--workloads", default="generated,philly")
    ap.add_argument("--policies", default="max_min_fairness_perf,hadar")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--philly", type=Path, default=PHILLY_FILE)
    ap.add_argument("--one", nargs=3, metavar=("WORKLOAD", "SIZE", "POLICY"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.one[2], args.philly)))
        return
    print(f"{'workload':10} {'jobs':>6} {'policy':22} {'wall s':>8} {'peak RSS MB':>12} {'rounds':>7} "
          f"{'avg JCT h':>9}  cluster", flush=True)
    for workload in args.workloads.split(","):
        for asked in (int(s) for s in args.sizes.split(",")):
            size = min(asked, 41226) if workload == "philly" else asked  # 41,226: the whole virtual cluster
            for policy in args.policies.split(","):
                cmd = [sys.executable, __file__, "--one", workload, str(size), policy, "--philly", str(args.philly)]
                try:
                    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=True)
                except subprocess.TimeoutExpired:
                    print(f"{workload:10} {size:>6} {policy:22} {'>limit':>8}", flush=True)
                    continue
                except subprocess.CalledProcessError as e:
                    print(f"{workload:10} {size:>6} {policy:22} failed: {e.stderr.strip().splitlines()[-1:]}")
                    continue
                r = json.loads(out.stdout)
                print(f"{workload:10} {size:>6} {policy:22} {r['wall_s']:8.1f} {r['rss_mb']:12.0f} {r['rounds']:>7} "
                      f"{r['avg_jct_h']:9.2f}  {r['cluster']}", flush=True)


if __name__ == "__main__":
    main()
