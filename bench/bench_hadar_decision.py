"""Hadar's per-round decision time (allocate + GPU ids) for 128..4096 active jobs on 512 GPUs.

Prints ms per round (median of a few rounds) for the default policy (the JCT
plan runs up to ``plan_max_jobs`` = 256 active jobs, the TTD keeper up to
``keep_max_jobs`` = 1024; both are skipped above), with the packing of spec
section 3 instead of the plan (``plan="pack"``), with neither plan nor keeper,
and with the keeper forced on at every size (its LPs are what the cap avoids).
Not a test: timings depend on the machine. Goal: < 50 ms at 2048 jobs.
"""

from __future__ import annotations

import statistics
import time

from hadar.config import parse_cluster
from hadar.mechanism.ledger import JobLedger
from hadar.model.throughput import ThroughputTable
from hadar.policies import create
from hadar.sim.generate import JobGenerator


def main() -> None:
    table = ThroughputTable.load()
    cluster = parse_cluster("170:171:171")  # 512 GPUs, 1 per node (Gavel's simulator)
    variants = ({}, {"plan": "pack"}, {"plan": "pack", "keep_slack": None}, {"plan": "pack", "keep_max_jobs": 1 << 30})
    print(f"{'jobs':>6} {'default (ms)':>13} {'pack (ms)':>10} {'pack, no keeper (ms)':>21} "
          f"{'pack, keeper forced (ms)':>25}")
    for m in (128, 256, 512, 1024, 2048, 4096):
        gen = iter(JobGenerator(table, 100.0, seed=1, multi_gpu=True))
        ledger = JobLedger(cluster, table, 360.0)
        for _ in range(m):
            ledger.add(next(gen))
        state = ledger.snapshot(3600.0)
        row = []
        for kw in variants:
            policy = create("hadar", **kw)
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                policy.allocate(state)
                times.append(time.perf_counter() - t0)
            row.append(statistics.median(times) * 1000)
        print(f"{m:>6} {row[0]:>13.1f} {row[1]:>10.1f} {row[2]:>21.1f} {row[3]:>25.1f}", flush=True)


if __name__ == "__main__":
    main()
