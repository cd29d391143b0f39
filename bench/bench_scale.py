"""Datacenter scale (issue 19, item 4): wall time and peak memory as the job count grows.

Two workloads, each under LAS (max_min_fairness_perf) and Hadar, at 1k, 10k and 50k jobs:

- generated: Gavel's generator (multi-GPU jobs, seed 0, 180 jobs/h: Gavel's steady-state load of
  2 jobs/h on 108 GPUs scaled to 10,000) on 10,000 GPUs in 8-GPU nodes (v100 3,328, p100 3,336,
  k80 3,336);
- philly: the largest Philly virtual cluster (6214e9, 41,226 jobs in ../shared/real-traces/)
  imported with `hadar trace import philly`'s rules (seed 0), first N jobs (its 50k row is the
  whole trace), on a cluster of its size: the most GPUs its jobs held at once when each runs
  from its submission for its logged duration on its logged GPU count (596, at its peak), in
  8-GPU nodes of the three types, rounded up (600: 200 of each). Why the peak and not the
  average load (GPU-time over span, 38 GPUs): the peak is what the real cluster had to hold
  for its jobs to run as logged; 40 GPUs would queue the trace for months and measure a
  backlog, not a cluster of its size.

Each case runs in a fresh subprocess (peak RSS is that process's own ``ru_maxrss``) with a time
limit (``--timeout``, default 600 s); a case over the limit prints `>limit` and how far it got.
Progress (jobs done, seconds, RSS) goes to stderr as each case runs; ``--out DIR`` also writes
``scale.json`` and ``scale.csv``.

    .venv/bin/python bench/bench_scale.py [--sizes 1000,10000,50000] [--workloads generated,philly]
        [--policies max_min_fairness_perf,hadar] [--timeout 600] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

PHILLY_FILE = Path(__file__).resolve().parents[2] / "shared" / "real-traces" / "philly.csv"
PHILLY_VC = "6214e9"
GENERATED_CLUSTER = "v100=3328,p100=3336,k80=3336"
PHILLY_JOBS = 41226  # the whole virtual cluster


def philly_cluster(path: Path, vc: str) -> str:
    """8-GPU nodes of three types (as even as can be), as many GPUs as the virtual cluster's jobs held
    at once at their peak, each running from its submission for its logged duration on its logged
    GPU count (a job ending frees its GPUs before one starting at the same second takes them)."""
    deltas: list[tuple[float, int]] = []
    with path.open() as f:
        for r in csv.DictReader(f):
            if r["cluster"] != vc:
                continue
            t, g = datetime.fromisoformat(r["timestamp"]).timestamp(), int(float(r["num_gpus"]))
            deltas += [(t, g), (t + float(r["duration"]), -g)]
    held = peak = 0
    for _, g in sorted(deltas):
        held += g
        peak = max(peak, held)
    nodes = math.ceil(peak / 8)
    per = [nodes // 3 + (i < nodes % 3) for i in range(3)]
    return f"v100={8 * per[0]},p100={8 * per[1]},k80={8 * per[2]}"


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one(workload: str, size: int, policy: str, philly: Path) -> dict:
    """Run one case in this process; returns its figures. Progress lines go to stderr."""
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
    done, step = [0], max(1, size // 10)

    def progress(n: int) -> None:
        before = done[0] // step
        done[0] += n
        if done[0] // step > before or done[0] == len(jobs):
            print(f"  {workload} {size} {policy}: {done[0]} jobs done, {time.perf_counter() - t0:.1f} s, "
                  f"{_rss_mb():.0f} MB", file=sys.stderr, flush=True)

    s = simulate(jobs, parse_cluster(spec, 8), table, policy, progress=progress).summary
    return {"workload": workload, "jobs": s["jobs_completed"], "policy": policy,
            "wall_s": time.perf_counter() - t0, "peak_mb": _rss_mb(), "rounds": s["rounds"],
            "avg_jct_h": s["avg_jct_s"] / 3600, "cluster": spec}


def run_case(workload: str, size: int, policy: str, philly: Path, timeout: float) -> dict:
    """One case in a fresh process (its progress echoed to stderr); on timeout, how far it got."""
    cmd = [sys.executable, __file__, "--one", workload, str(size), policy, "--philly", str(philly)]
    row: dict = {"workload": workload, "jobs": size, "policy": policy}
    last = ""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.append(proc.stdout.read() if proc.stdout else ""))
        reader.start()
        timer = threading.Timer(timeout, proc.kill)  # the limit holds while the case prints nothing
        timer.start()
        for line in proc.stderr or ():
            print(line, end="", file=sys.stderr, flush=True)
            last = line.strip() or last
        proc.wait()
        timer.cancel()
        reader.join()
    if proc.returncode == -signal.SIGKILL:
        return row | {"status": ">limit", "reached": last}
    if proc.returncode != 0:
        return row | {"status": "failed", "reached": last}
    return row | json.loads(out[0]) | {"status": "ok"}


def _bad_args(workloads: list[str], sizes: list[str], philly: Path) -> str | None:
    """What is wrong with the command line, in one line (None: nothing), before any case starts."""
    unknown = [w for w in workloads if w not in ("generated", "philly")]
    if unknown:
        return f"unknown workload {unknown[0]!r} (generated or philly)"
    if not all(s.strip().isdigit() and int(s) > 0 for s in sizes):
        return f"--sizes must be positive whole job counts, got {','.join(sizes)!r}"
    if "philly" in workloads and not philly.is_file():
        return f"Philly's job table not found at {philly} (give it with --philly FILE)"
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,50000")
    ap.add_argument("--workloads", default="generated,philly")
    ap.add_argument("--policies", default="max_min_fairness_perf,hadar")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--philly", type=Path, default=PHILLY_FILE)
    ap.add_argument("--out", type=Path, help="write scale.json and scale.csv here")
    ap.add_argument("--one", nargs=3, metavar=("WORKLOAD", "SIZE", "POLICY"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.one[2], args.philly)))
        return
    problem = _bad_args(args.workloads.split(","), args.sizes.split(","), args.philly)
    if problem:
        print(f"bench_scale.py: {problem}", file=sys.stderr)
        raise SystemExit(2)
    print(f"{'workload':10} {'jobs':>6} {'policy':22} {'wall s':>8} {'peak MB':>8} {'rounds':>7} "
          f"{'avg JCT h':>9}  cluster", flush=True)
    rows = []
    for workload in args.workloads.split(","):
        for asked in (int(s) for s in args.sizes.split(",")):
            size = min(asked, PHILLY_JOBS) if workload == "philly" else asked
            for policy in args.policies.split(","):
                r = run_case(workload, size, policy, args.philly, args.timeout)
                rows.append(r)
                if r["status"] != "ok":
                    print(f"{workload:10} {size:>6} {policy:22} {r['status']:>8}  (last: {r['reached']})", flush=True)
                    continue
                print(f"{workload:10} {r['jobs']:>6} {policy:22} {r['wall_s']:8.1f} {r['peak_mb']:8.0f} "
                      f"{r['rounds']:>7} {r['avg_jct_h']:9.2f}  {r['cluster']}", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "scale.json").write_text(json.dumps(rows, indent=2) + "\n")
        keys = ["workload", "jobs", "policy", "status", "wall_s", "peak_mb", "rounds", "avg_jct_h", "cluster",
                "reached"]
        with (args.out / "scale.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, keys, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
