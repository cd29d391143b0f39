"""Space sharing, packed vs unpacked (issue 18): Gavel's policies next to their `_packed` forms and
Hadar next to Hadar with `share: true`, on the 96-job trace and the static trace (8:16:24) and two
slices of Microsoft's Philly job table (imported as bench/bench_real_traces.py does, seed 0).

Prints one table (avg and p99 JCT, TTD = makespan, utilization, `shared`: the share of leased
GPU-time in which a GPU held two jobs, simulation wall time, and each packed row's avg JCT over
its unpacked one) and writes it as JSON and CSV (`--out PREFIX`:
PREFIX.json, PREFIX.csv). Then, per workload, whether Hadar with sharing beats both Gavel's
packed LAS (`max_min_fairness_packed`) and unpacked Hadar on avg JCT. Default re-solve cadence,
seed 0. `--parallel N` runs the simulations in N local processes (hadar.sweep; the same figures).

    .venv/bin/python bench/bench_packing.py [--only NAME,NAME] [--policies A,B] [--philly FILE]
        [--out PREFIX] [--parallel N | --address ADDR]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from hadar.config import parse_cluster
from hadar.model.throughput import ThroughputTable
from hadar.sim.run import simulate
from hadar.sim.trace import read_jobs, resolve_trace_path
from hadar.sweep import add_args, run_tasks

sys.path.insert(0, str(Path(__file__).parent))
from bench_real_traces import PHILLY_FILE, workload

#: (unpacked, packed) pairs of policy names (registered, or a profile of PROFILES)
PAIRS: tuple[tuple[str, str], ...] = (
    ("max_min_fairness_perf", "max_min_fairness_packed"),
    ("finish_time_fairness_perf", "finish_time_fairness_packed"),
    ("min_total_duration_perf", "min_total_duration_packed"),
    ("fifo_perf", "fifo_packed"),
    ("hadar", "hadar-share"),
)
#: profiles the bench defines (label -> registered policy, parameters)
PROFILES: dict[str, tuple[str, dict[str, Any]]] = {"hadar-share": ("hadar", {"share": True})}
# name, bundled trace (or Philly: virtual cluster, start, jobs), cluster
WORKLOADS: tuple[tuple[str, str | tuple[str, str, int], str], ...] = (
    ("96-job trace", "max_min_fairness", "8:16:24"),
    ("static trace", "minimize_makespan", "8:16:24"),
    ("philly b436b2 oct20", ("b436b2", "2017-10-20", 60), "8:16:24"),
    ("philly 6214e9 nov01", ("6214e9", "2017-11-01", 80), "16:16:16"),
)
COLUMNS = ("avg JCT h", "p99 JCT h", "TTD h", "util", "shared", "wall s", "JCT/unpacked")


def run_task(task: tuple[str, str, str], report: Any) -> dict[str, Any]:
    """One simulation: (policy label, trace path, cluster) -> its summary, plus ``shared``: the share
    of leased GPU-time in which a GPU held two jobs (from the rounds' leases)."""
    label, trace, cluster = task
    policy, params = PROFILES.get(label, (label, {}))
    r = simulate(read_jobs(trace), parse_cluster(cluster), ThroughputTable.load(), policy, policy_kwargs=params,
                 record_events=True)
    leased = shared = 0.0
    for e in r.events:
        if e["event"] == "round":
            held: dict[int, int] = {}
            for lease in e["leases"]:
                for g in lease[2]:
                    held[g] = held.get(g, 0) + 1
            span = e["end"] - e["t"]
            leased += len(held) * span
            shared += sum(1 for n in held.values() if n > 1) * span
    return {**r.summary, "policy": label, "shared": shared / leased if leased > 0 else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated workload names (default: all)")
    ap.add_argument("--policies", default="", help="comma-separated unpacked policies of PAIRS (default: all)")
    ap.add_argument("--philly", type=Path, default=PHILLY_FILE, help="Philly's job table")
    ap.add_argument("--out", type=Path, help="also write PREFIX.json and PREFIX.csv")
    add_args(ap)
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    keep = set(args.policies.split(",")) if args.policies else None
    pairs = [p for p in PAIRS if keep is None or p[0] in keep]
    chosen = [w for w in WORKLOADS if only is None or w[0] in only]
    if not chosen or not pairs:
        print("bench_packing: error: no workload or policy left (--only, --policies)", file=sys.stderr)
        sys.exit(2)
    if any(not isinstance(w[1], str) for w in chosen) and not args.philly.is_file():
        print(f"bench_packing: error: no Philly job table at {args.philly} (--philly FILE; docs/traces.md)",
              file=sys.stderr)
        sys.exit(2)
    with tempfile.TemporaryDirectory() as tmp:
        traces = {name: str(resolve_trace_path(src)) if isinstance(src, str) else str(workload(args.philly, *src,
                                                                                               Path(tmp)))
                  for name, src, _ in chosen}
        tasks = [(p, traces[name], cluster) for name, _, cluster in chosen for pair in pairs for p in pair]
        results = iter(run_tasks(run_task, tasks, workers=args.parallel, address=args.address))
        table = [{"workload": name, **next(results)} for name, _, _ in chosen for _pair in pairs for _p in _pair]
    print_table(table, pairs)
    if args.out is not None:
        write(table, args.out)


def print_table(table: list[dict[str, Any]], pairs: list[tuple[str, str]]) -> None:
    print(f"{'workload':20} {'policy':28} " + " ".join(f"{c:>12}" for c in COLUMNS))
    by = {(r["workload"], r["policy"]): r for r in table}
    unpacked_of = {b: a for a, b in pairs}
    for r in table:
        base = by.get((r["workload"], unpacked_of.get(r["policy"], "")))
        cells = [r["avg_jct_s"] / 3600, r["p99_jct_s"] / 3600, r["makespan_s"] / 3600, r["utilization"], r["shared"],
                 r["wall_s"], r["avg_jct_s"] / base["avg_jct_s"] if base else float("nan")]
        print(f"{r['workload']:20} {r['policy']:28} " + " ".join(f"{c:12.3f}" for c in cells))
    for w in dict.fromkeys(r["workload"] for r in table):
        share, hadar, las = (by.get((w, p)) for p in ("hadar-share", "hadar", "max_min_fairness_packed"))
        if share and hadar and las:
            beats = share["avg_jct_s"] < min(hadar["avg_jct_s"], las["avg_jct_s"])
            print(f"{w}: hadar-share avg JCT {share['avg_jct_s'] / 3600:.3f} h vs hadar {hadar['avg_jct_s'] / 3600:.3f}"
                  f" h, max_min_fairness_packed {las['avg_jct_s'] / 3600:.3f} h: "
                  f"{'beats both' if beats else 'does not beat both'}")


def write(table: list[dict[str, Any]], prefix: Path) -> None:
    keys = ("workload", "policy", "avg_jct_s", "p99_jct_s", "makespan_s", "utilization", "shared", "wall_s")
    prefix.with_suffix(".json").write_text(json.dumps([{k: r[k] for k in keys} for r in table], indent=1) + "\n")
    with prefix.with_suffix(".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows({k: r[k] for k in keys} for r in table)


if __name__ == "__main__":
    main()
