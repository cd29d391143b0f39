"""Hadar vs Gavel's LAS beyond the listed workloads: Gavel's other traces, the listed traces on
other clusters, and generated workloads of several loads (default re-solve cadence, seed 0).

Prints, per workload, avg JCT, TTD (and TTD / bound) and queuing delay for both, with `ok` where
Hadar's is no worse than LAS's and `XX` where it is. About 4 minutes here, one run after the
other; `--parallel N` runs the 30 simulations in N local processes, `--address ADDR` as tasks on a
Ray cluster (hadar.sweep; the same figures).

    .venv/bin/python bench/bench_hadar_sweep.py [--only NAME,NAME] [--parallel N | --address ADDR]
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import Any

from hadar.config import parse_cluster
from hadar.model.throughput import ThroughputTable
from hadar.sim.generate import JobGenerator
from hadar.sim.run import simulate
from hadar.sim.trace import read_jobs
from hadar.sweep import add_args, run_tasks

DATA = Path(__file__).resolve().parents[1] / "src" / "hadar" / "data"
# name, trace (or None: generated), cluster, throughput table, generator (seed, jobs/h, jobs, window)
WORKLOADS: tuple[tuple[str, str | None, str, str | None, tuple[int, float, int | None, tuple[int, int] | None] | None],
                 ...] = (
    ("96-job trace", "max_min_fairness", "8:16:24", None, None),
    ("static trace", "minimize_makespan", "8:16:24", None, None),
    ("physical 5x1", str(DATA / "traces/hadare_physical.trace"), str(DATA / "clusters/physical_5x1.yaml"), "physical",
     None),
    ("physical 5x4", str(DATA / "traces/hadare_physical.trace"), str(DATA / "clusters/physical_5x4.yaml"), "physical",
     None),
    ("small_test", "small_test", "4:4:4", None, None),
    ("medium_test", "medium_test", "4:4:4", None, None),
    ("artifact 4:4:4", "artifact_evaluation", "4:4:4", None, None),
    ("artifact 2:0:4", "artifact_evaluation", "2:0:4", "physical", None),
    ("96-job on 4:8:12", "max_min_fairness", "4:8:12", None, None),
    ("static on 16:16:16", "minimize_makespan", "16:16:16", None, None),
    ("gen s1 4/h 8:8:8", None, "8:8:8", None, (1, 4.0, 120, None)),
    ("gen s2 8/h 8:8:8", None, "8:8:8", None, (2, 8.0, 120, None)),
    ("gen s3 1.5/h 8:8:8", None, "8:8:8", None, (3, 1.5, 120, None)),
    ("window 1/h", None, "36:36:36", None, (0, 1.0, None, (100, 200))),
    ("window 2.5/h", None, "36:36:36", None, (0, 2.5, None, (100, 200))),
)


def run(policy: str, trace: str | None, cluster: str, table: str | None, gen: Any) -> dict[str, Any]:
    tbl = ThroughputTable.load(table)
    if gen is None:
        return simulate(read_jobs(trace), parse_cluster(cluster), tbl, policy).summary
    seed, rate, count, window = gen
    source: Any = iter(JobGenerator(tbl, rate, seed=seed, multi_gpu=True))
    if count is not None:
        source = list(itertools.islice(source, count))
    return simulate(source, parse_cluster(cluster), tbl, policy, window=window).summary


def run_task(task: tuple[str, str | None, str, str | None, Any], report: Any) -> dict[str, Any]:
    return run(*task)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated workload names")
    add_args(ap)
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    chosen = [w for w in WORKLOADS if only is None or w[0] in only]
    tasks = [(p, *w[1:]) for w in chosen for p in ("hadar", "max_min_fairness_perf")]
    out = iter(run_tasks(run_task, tasks, workers=args.parallel, address=args.address))
    print(f"{'workload':20} {'avg JCT h: hadar / LAS':>26} {'TTD h: hadar / LAS':>24} {'(bound x)':>9} "
          f"{'queue h: hadar / LAS':>24}")
    worse = 0
    for name, *_ in chosen:
        h, las = next(out), next(out)
        cells = []
        for key, scale, fmt in (("avg_jct_s", 3600, "8.3f"), ("makespan_s", 3600, "8.2f"),
                                ("avg_queuing_delay_s", 3600, "6.3f")):
            mark = "ok" if h[key] <= las[key] * (1 + 1e-9) else "XX"
            worse += mark == "XX"
            cells.append(f"{h[key] / scale:{fmt}} / {las[key] / scale:{fmt}} {mark}")
        print(f"{name:20} {cells[0]:>26} {cells[1]:>24} {h['makespan_s'] / h['ttd_bound_s']:8.3f}x {cells[2]:>24}",
              flush=True)
    print(f"metrics where Hadar is worse than LAS: {worse}")


if __name__ == "__main__":
    main()
