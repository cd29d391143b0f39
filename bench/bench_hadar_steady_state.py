"""Hadar vs Gavel's LAS at steady state (36:36:36, multi-GPU jobs, seed 0), and what each of
Hadar's additions does there: the JCT plan (default; `plan="pack"` is spec section 3's packing
instead), the TTD keeper (default on; `keep_slack=None` turns it off), the first-round rule
(`first_round=False` turns it off), and the packing alone without the keeper. Each row also
prints its wall time over LAS's (issue 19's goal for the default Hadar: at most 3x).

    .venv/bin/python bench/bench_hadar_steady_state.py [--rate 2] [--window 1500 1800]
"""

from __future__ import annotations

import argparse
import time

from hadar.config import parse_cluster
from hadar.model.throughput import ThroughputTable
from hadar.policies import create
from hadar.sim.generate import JobGenerator
from hadar.sim.run import simulate

VARIANTS = (("max_min_fairness_perf", {}), ("hadar", {}), ("hadar", {"plan": "pack"}), ("hadar", {"keep_slack": None}),
            ("hadar", {"first_round": False}), ("hadar", {"plan": "pack", "keep_slack": None}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=2.0, help="jobs per hour")
    ap.add_argument("--window", type=int, nargs=2, default=(1500, 1800))
    args = ap.parse_args()
    table, cluster = ThroughputTable.load(), parse_cluster("36:36:36")
    print(f"36:36:36, {args.rate:g} jobs/h, multi-GPU, seed 0, jobs {args.window[0]}-{args.window[1]} measured, "
          "default re-solve cadence")
    print(f"{'policy':48}{'avg JCT h':>10}{'stretch':>9}{'TTD h':>9}{'queue h':>9}{'util':>7}{'wall s':>8}")
    base = base_wall = None
    for name, kw in VARIANTS:
        t0 = time.perf_counter()
        s = simulate(iter(JobGenerator(table, args.rate, seed=0, multi_gpu=True)), cluster, table,
                     create(name, **kw), window=tuple(args.window)).summary
        label = name + (" (" + ", ".join(f"{k}={v}" for k, v in kw.items()) + ")" if kw else "")
        wall = time.perf_counter() - t0
        base, base_wall = base or s["avg_jct_s"], base_wall or wall
        print(f"{label:48}{s['avg_jct_s'] / 3600:10.3f}{s['stretch']:9.3f}{s['makespan_s'] / 3600:9.1f}"
              f"{s['avg_queuing_delay_s'] / 3600:9.3f}"
              f"{s['utilization']:7.3f}{wall:8.1f}   JCT/LAS {s['avg_jct_s'] / base:.3f}"
              f"  wall/LAS {wall / base_wall:.2f}", flush=True)


if __name__ == "__main__":
    main()
