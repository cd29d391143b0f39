"""Can any scheduler halve LAS's excess stretch on Gavel's two traces? The JCT floor says.

Issue 3 asks Hadar's excess stretch (avg JCT / JCT bound - 1) to be at most half of LAS's. The
JCT bound counts each job alone on its best GPU type; ``metrics.bound.jct_floor_s`` also counts the
contention (a fluid, time-indexed LP relaxation that every non-forking schedule satisfies). Where
the floor is above ``bound + (LAS - bound) / 2``, halving LAS's excess is impossible on that
workload; where it is below, the goal is open and the floor says how far Hadar could still go.
Finer slots tighten the floor and cost more: by default the 96-job trace uses 360 s slots and the
static trace (longer) 720 s; ``--slot`` sets both, ``--no-tail`` drops the tail constraints (a looser
floor, several times faster). About 5 minutes here.

    .venv/bin/python bench/bench_jct_floor.py [--slot S] [--no-tail]
"""

from __future__ import annotations

import argparse
import time

from hadar.config import parse_cluster
from hadar.metrics.bound import jct_bound_s, jct_floor_s
from hadar.model.throughput import ThroughputTable
from hadar.sim.run import simulate
from hadar.sim.trace import read_jobs

WORKLOADS = (("96-job trace", "max_min_fairness", "8:16:24", 360.0),
             ("static trace", "minimize_makespan", "8:16:24", 720.0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slot", type=float, default=None, help="slot length of the floor's LP (s); default 360 / 720")
    ap.add_argument("--no-tail", action="store_true", help="without the tail constraints (looser, faster)")
    args = ap.parse_args()
    table = ThroughputTable.load(None)
    print(f"{'workload':14} {'bound h':>8} {'floor h':>8} {'LAS h':>7} {'hadar h':>8} {'halving needs h':>16}  verdict"
          f"   (floor LP s)")
    for name, trace, spec, slot in WORKLOADS:
        cluster = parse_cluster(spec)
        jobs = read_jobs(trace)
        t0 = time.perf_counter()
        floor = jct_floor_s(jobs, cluster, table, slot_s=args.slot or slot, tail=not args.no_tail) / 3600
        lp_s = time.perf_counter() - t0
        bound = jct_bound_s(jobs, cluster, table) / 3600
        las = simulate(read_jobs(trace), cluster, table, "max_min_fairness_perf").summary["avg_jct_s"] / 3600
        hadar = simulate(read_jobs(trace), cluster, table, "hadar").summary["avg_jct_s"] / 3600
        target = bound + (las - bound) / 2
        verdict = "impossible" if floor > target else "open"
        print(f"{name:14} {bound:8.3f} {floor:8.3f} {las:7.3f} {hadar:8.3f} {target:16.3f}  {verdict:10} ({lp_s:.1f})",
              flush=True)


if __name__ == "__main__":
    main()
