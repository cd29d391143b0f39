"""Real run vs simulation of the same jobs with the throughputs the run measured (prints; no asserts).

Runs the demo job set (6 jobs, 4 families, one 2-GPU job) for real on the
emulated 3-node cluster (2 V100, 1 P100, 1 K80) under a policy, then
simulates the same jobs, cluster, policy and round length with the
whole-run mean steps/s the runtime measured, and prints both average JCTs.
Goal: the simulated average JCT within 15 % of the real one.

Run: ``.venv/bin/python bench/bench_runtime_vs_sim.py [--policy max_min_fairness_perf] [--round-s 10]
[--scale 1.0]`` (about 2 minutes at the defaults on 2 cores).
"""

from __future__ import annotations

import argparse
import time

from hadar.runtime.demo import demo_cluster, demo_jobs
from hadar.runtime.run import run
from hadar.sim.run import simulate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="max_min_fairness_perf")
    ap.add_argument("--round-s", type=float, default=10.0)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every job's steps")
    args = ap.parse_args()
    jobs, cluster = demo_jobs(args.scale), demo_cluster()
    t0 = time.perf_counter()
    real = run(jobs, cluster, args.policy, round_s=args.round_s)
    wall = time.perf_counter() - t0
    sim = simulate(jobs, cluster, real.measured_mean, args.policy, round_s=args.round_s)
    r, s = real.summary, sim.summary
    print(f"policy {args.policy}, round {args.round_s:g} s, {len(jobs)} jobs, cluster {cluster.capacity()}, "
          f"dilation {r['emulation_dilation']:g}; real run took {wall:.0f} s in all")
    print(f"{'':>16} {'real':>9} {'simulated':>10} {'sim/real':>9}")
    for key in ("avg_jct_s", "median_jct_s", "makespan_s", "utilization"):
        a, b = r[key], s[key]
        print(f"{key:>16} {a:9.2f} {b:10.2f} {b / a:9.3f}")
    print(f"{'rounds':>16} {r['rounds']:9d} {s['rounds']:10d}")
    gap = abs(s["avg_jct_s"] - r["avg_jct_s"]) / r["avg_jct_s"]
    print(f"avg JCT gap {100 * gap:.1f} % (goal < 15 %)")
    print("per job JCT (s):  " + "  ".join(f"{a.job_id}: {a.jct_s:.1f}/{b.jct_s:.1f}"
                                           for a, b in zip(real.rows, sim.rows, strict=True)) + "  (real/sim)")


if __name__ == "__main__":
    main()
