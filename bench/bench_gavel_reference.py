"""Every Gavel policy on Gavel's four reference workloads, Gavel-compatible mode, next to the
numbers Gavel's own simulator printed (spec/gavel.md section 5). Prints a Markdown table.

    .venv/bin/python bench/bench_gavel_reference.py [--default-mode]
"""

from __future__ import annotations

import argparse
import time

from hadar.config import parse_cluster
from hadar.metrics.gavel_reference import REFERENCE
from hadar.model.throughput import ThroughputTable
from hadar.policies import available
from hadar.sim.run import simulate
from hadar.sim.trace import read_jobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--default-mode", action="store_true", help="our default re-solve cadence instead of Gavel's")
    args = ap.parse_args()
    print("| trace | cluster | policy | avg JCT (s) | Gavel | ratio | makespan (s) | Gavel | ratio | util | Gavel |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    worst = {}
    t0 = time.perf_counter()
    for (trace, cluster, tbl), rows in REFERENCE.items():
        jobs, spec, table = read_jobs(trace), parse_cluster(cluster), ThroughputTable.load(tbl)
        for policy, (jct, mk, util) in rows.items():
            if policy not in available():  # e.g. Gavel's gandiva (space sharing): not implemented here
                print(f"| {trace} | {cluster}{' (physical)' if tbl == 'physical' else ''} | {policy} | "
                      f"not implemented | {jct:.1f} | - | - | {mk:.1f} | - | - | {util:.3f} |")
                continue
            s = simulate(jobs, spec, table, policy, gavel_compat=not args.default_mode, seed=0).summary
            rj, rm = s["avg_jct_s"] / jct, s["makespan_s"] / mk
            kind = "perf" if policy.endswith("_perf") else "agnostic"
            worst[kind] = max(worst.get(kind, 0.0), abs(rj - 1), abs(rm - 1))
            print(f"| {trace} | {cluster}{' (physical)' if tbl == 'physical' else ''} | {policy} | "
                  f"{s['avg_jct_s']:.1f} | {jct:.1f} | {rj:.3f} | {s['makespan_s']:.1f} | {mk:.1f} | {rm:.3f} | "
                  f"{s['utilization']:.3f} | {util:.3f} |")
    print()
    for kind, dev in worst.items():
        print(f"largest deviation from Gavel, {kind} policies: {100 * dev:.1f} %")
    print(f"total wall time: {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
