"""Every space-sharing policy on every bundled trace and cluster: does it run to completion, and how long.

For each bundled cluster (the count shorthands 4:4:4 and 8:16:24 and the cluster files under
src/hadar/data/clusters) and bundled trace (``hadar simulate --trace NAME``: BUNDLED_TRACES), runs
each packed policy once (seed 0; add --gavel-compat for Gavel's mode) and prints jobs completed,
avg JCT, makespan, utilization and the run's wall time; a workload the cluster cannot hold (a job
needs more GPUs of one type than it has) is printed as rejected with the reason, never run.

    .venv/bin/python bench/bench_packed.py [--gavel-compat] [--only TRACE,...] [--clusters C,...] [--policies P,...]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from hadar.config import parse_cluster
from hadar.errors import InfeasibleError, InputError
from hadar.model.throughput import ThroughputTable
from hadar.sim.run import simulate
from hadar.sim.trace import BUNDLED_TRACES, read_jobs

PACKED = ("max_min_fairness_packed", "min_total_duration_packed", "finish_time_fairness_packed", "fifo_packed",
          "max_min_fairness_water_filling_packed", "gandiva")
DATA = Path(__file__).resolve().parents[1] / "src" / "hadar" / "data"
CLUSTERS = ("4:4:4", "8:16:24", *(str(p) for p in sorted((DATA / "clusters").glob("*.yaml"))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gavel-compat", action="store_true")
    ap.add_argument("--only", default=",".join(BUNDLED_TRACES))
    ap.add_argument("--clusters", default=",".join(CLUSTERS))
    ap.add_argument("--policies", default=",".join(PACKED))
    args = ap.parse_args()
    table = ThroughputTable.load()
    print(f"{'cluster':16} {'trace':20} {'policy':38} {'done':>7} {'avg JCT s':>10} {'makespan s':>11} "
          f"{'util':>6} {'wall s':>7}", flush=True)
    for spec in args.clusters.split(","):
        cluster = parse_cluster(spec)
        for name in args.only.split(","):
            jobs = read_jobs(name)
            for policy in args.policies.split(","):
                where = f"{Path(spec).stem:16} {name:20} {policy:38}"
                t0 = time.perf_counter()
                try:
                    r = simulate(jobs, cluster, table, policy, gavel_compat=args.gavel_compat, seed=0)
                except (InputError, InfeasibleError) as e:
                    print(f"{where} rejected: {e}", flush=True)
                    break
                s = r.summary
                print(f"{where} {s['jobs_completed']:>3}/{s['jobs']:<3} {s['avg_jct_s']:>10.1f} "
                      f"{s['makespan_s']:>11.1f} {s['utilization']:>6.3f} {time.perf_counter() - t0:>7.1f}", flush=True)


if __name__ == "__main__":
    main()
