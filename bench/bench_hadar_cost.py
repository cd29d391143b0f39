"""What Hadar costs against LAS on Gavel's steady state (issue 19, item 2: at most 3x), measured in
pairs: each pair runs `hadar simulate --generate --jobs-per-hour 2 --multi-gpu --cluster 36:36:36
--seed 0 --window A B --json` under Hadar, then under LAS, as subprocesses with one BLAS thread,
and times each by its own CPU seconds (user + sys, from the operating system's accounting of the
finished child) and its wall time. A pair's two runs see the same load, so their ratio holds when
the machine's speed drifts between pairs; a single run timed against a figure from another hour
does not (a cold start or a busy neighbour reads as a speed-up or a slow-down).

Prints one row per pair and the median ratio, with each run's avg JCT (a check that every pair
ran the same simulation). The full window (4000-5000) takes about 2 minutes a pair on an idle
machine; `--window 1500 1600` about 40 s.

    .venv/bin/python bench/bench_hadar_cost.py [--window A B] [--pairs N] [--policy P] [--baseline B]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

GOAL = 3.0  # issue 19: Hadar's wall time at most 3x LAS's
BLAS_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run(policy: str, window: tuple[int, int]) -> tuple[float, float, dict]:
    """One simulation as a child process: (CPU s, wall s, its JSON summary)."""
    cmd = [sys.executable, "-m", "hadar.cli", "simulate", "--generate", "--jobs-per-hour", "2", "--multi-gpu",
           "--cluster", "36:36:36", "--seed", "0", "--window", str(window[0]), str(window[1]), "--policy", policy,
           "--json", "--no-progress", "-q"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, check=False, stdout=out, stderr=err, env={**os.environ, **BLAS_ENV})
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode(errors="replace")
        err.seek(0)
        tail = err.read().decode(errors="replace")[-800:]
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"bench_hadar_cost: {policy} exited with {proc.returncode}: {tail.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, json.loads(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=int, nargs=2, default=(4000, 5000), metavar=("A", "B"))
    ap.add_argument("--pairs", type=int, default=1, help="pairs of runs, in turn (the median ratio is printed)")
    ap.add_argument("--policy", default="hadar")
    ap.add_argument("--baseline", default="max_min_fairness_perf", help="the policy it is measured against (LAS)")
    args = ap.parse_args()
    if args.pairs < 1:
        print("bench_hadar_cost: --pairs must be at least 1", file=sys.stderr)
        raise SystemExit(2)
    window = (args.window[0], args.window[1])
    print(f"window {window[0]}-{window[1]}, {args.policy} against {args.baseline}, {args.pairs} pair(s), "
          f"load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    print(f"{'pair':>4}  {'CPU s':>8} {'wall s':>8} {'avg JCT h':>10}   {'CPU s':>8} {'wall s':>8} {'avg JCT h':>10}"
          f"   {'CPU ratio':>9} {'wall ratio':>10}")
    cpu_ratios, wall_ratios = [], []
    for k in range(args.pairs):
        a_cpu, a_wall, a = run(args.policy, window)
        b_cpu, b_wall, b = run(args.baseline, window)
        cpu_ratios.append(a_cpu / b_cpu)
        wall_ratios.append(a_wall / b_wall)
        print(f"{k + 1:>4}  {a_cpu:8.1f} {a_wall:8.1f} {a['avg_jct_s'] / 3600:10.3f}   {b_cpu:8.1f} {b_wall:8.1f} "
              f"{b['avg_jct_s'] / 3600:10.3f}   {cpu_ratios[-1]:9.2f} {wall_ratios[-1]:10.2f}", flush=True)
    cpu, wall = statistics.median(cpu_ratios), statistics.median(wall_ratios)
    verdict = "met" if wall <= GOAL else "not met"
    print(f"median: CPU {cpu:.2f}x, wall {wall:.2f}x {args.baseline}'s (goal: wall at most {GOAL:g}x: {verdict}); "
          f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
