"""Hadar's per-round decision time (allocate) for 128..4096 active jobs on 512 GPUs and 8192 on 4096.

Prints CPU ms per decision (median of a few; CPU time of this process, so that other work on a
shared machine does not count: the decision is single-threaded, so on an idle machine its wall
time is about the same) for the default policy (the full algorithm: the JCT plan
and the TTD keeper at every size; above ``lp_jobs`` = 128 active jobs their LPs see groups of
alike jobs), with the packing of spec section 3 instead of the plan (``plan="pack"``), with neither
plan nor keeper, and with the limits before issue 19 ("old limits": the plan up to 256 active jobs
and the keeper up to 1,024, both skipped above, every LP per job).
Not a test: timings depend on the machine. Goals (issue 19): the full decision under 100 ms at
2,048 jobs on 512 GPUs and under 1 s at 8,192 jobs on 4,096 GPUs.

    .venv/bin/python bench/bench_hadar_decision.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from hadar.config import parse_cluster
from hadar.mechanism.ledger import JobLedger
from hadar.model.throughput import ThroughputTable
from hadar.policies import create
from hadar.sim.generate import JobGenerator

SIZES = ((128, "170:171:171"), (256, "170:171:171"), (512, "170:171:171"), (1024, "170:171:171"),
         (2048, "170:171:171"), (4096, "170:171:171"), (8192, "1365:1365:1366"))
VARIANTS = ({}, {"plan": "pack"}, {"plan": "pack", "keep_slack": None},
            {"plan_max_jobs": 256, "keep_max_jobs": 1024, "lp_jobs": 1 << 30})
GOALS_MS = {2048: 100.0, 8192: 1000.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="decisions timed per cell (median)")
    args = ap.parse_args()
    table = ThroughputTable.load()
    print("CPU ms per decision, median of", args.repeat)
    print(f"{'jobs':>6} {'GPUs':>5} {'full (ms)':>10} {'pack (ms)':>10} {'pack, no keeper (ms)':>21} "
          f"{'old limits (ms)':>17}  goal")
    for m, spec in SIZES:
        cluster = parse_cluster(spec)  # 1 GPU per node (Gavel's simulator)
        gen = iter(JobGenerator(table, 100.0, seed=1, multi_gpu=True))
        ledger = JobLedger(cluster, table, 360.0)
        for _ in range(m):
            ledger.add(next(gen))
        state = ledger.snapshot(3600.0)
        row = []
        for kw in VARIANTS:
            policy = create("hadar", **kw)
            times = []
            for _ in range(args.repeat):
                t0 = time.process_time()
                policy.allocate(state)
                times.append(time.process_time() - t0)
            row.append(statistics.median(times) * 1000)
        goal = GOALS_MS.get(m)
        verdict = "" if goal is None else f"< {goal:.0f} ms: {'met' if row[0] < goal else 'MISSED'}"
        print(f"{m:>6} {cluster.num_gpus:>5} {row[0]:>10.1f} {row[1]:>10.1f} {row[2]:>21.1f} {row[3]:>17.1f}"
              f"  {verdict}", flush=True)


if __name__ == "__main__":
    main()
