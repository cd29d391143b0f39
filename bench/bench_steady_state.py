"""Gavel's steady-state experiment, timed: 36:36:36, multi-GPU jobs, 2 jobs/hour, seed 0,
measured window jobs [4000, 5000), max_min_fairness_perf, Gavel-compatible re-solve cadence.

Gavel's own simulator (cvxpy + ECOS) took 534 s on this machine for this run and reported an
average JCT of 20.3 h for the window. Goal: at most a tenth of that wall time. Then the solve
times of LAS, makespan and FTF at 32-2048 jobs (bench_policies.py) against Gavel's.

    .venv/bin/python bench/bench_steady_state.py [--window A B] [--policy NAME] [--default-mode]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hadar.config import parse_cluster
from hadar.model.throughput import ThroughputTable
from hadar.sim.generate import JobGenerator
from hadar.sim.run import simulate

sys.path.insert(0, str(Path(__file__).parent))
import bench_policies

GAVEL_WALL_S = 534.0
GAVEL_AVG_JCT_H = 20.3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=int, nargs=2, default=(4000, 5000))
    ap.add_argument("--policy", default="max_min_fairness_perf")
    ap.add_argument("--default-mode", action="store_true",
                    help="re-solve every round with a change (not Gavel's cadence)")
    ap.add_argument("--no-solve-times", action="store_true", help="skip the policy solve-time table")
    args = ap.parse_args()
    table = ThroughputTable.load()
    t0 = time.perf_counter()
    result = simulate(iter(JobGenerator(table, 2.0, seed=0, multi_gpu=True)), parse_cluster("36:36:36"), table,
                      args.policy, gavel_compat=not args.default_mode, window=tuple(args.window), seed=0)
    wall = time.perf_counter() - t0
    s = result.summary
    print(f"steady state 36:36:36, 2 jobs/h, multi-GPU, window {args.window[0]}-{args.window[1]}, "
          f"{args.policy}, {'default' if args.default_mode else 'gavel-compat'} mode")
    print(f"{'':24}{'hadar':>12}{'Gavel':>12}{'ratio':>10}")
    print(f"{'wall time (s)':24}{wall:12.1f}{GAVEL_WALL_S:12.1f}{GAVEL_WALL_S / wall:9.1f}x faster")
    print(f"{'avg JCT of window (h)':24}{s['avg_jct_s'] / 3600:12.2f}{GAVEL_AVG_JCT_H:12.2f}"
          f"{s['avg_jct_s'] / 3600 / GAVEL_AVG_JCT_H:10.3f}")
    print(f"rounds {s['rounds']}, re-solves {s['resolves']}, solver time {s['solve_s_total']:.1f} s, "
          f"utilization {s['utilization']:.3f}, jobs completed {s['jobs_completed']}/{s['jobs']}")
    if not args.no_solve_times:
        print("\npolicy solve time, n jobs on n/4 GPUs of each type (bench/bench_policies.py):")
        sys.argv = [sys.argv[0], "--policies",
                    "max_min_fairness_perf,min_total_duration_perf,finish_time_fairness_perf"]
        bench_policies.main()


if __name__ == "__main__":
    main()
