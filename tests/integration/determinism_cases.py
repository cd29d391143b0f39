"""Runs a fixed set of simulations and prints one JSON object: per case, the summary (timings
left out) and a hash of the whole schedule (every round's leases, every finish).

Run in a subprocess by test_determinism.py under several OpenBLAS kernels, NumPy dispatch
settings and hash seeds; every run must print the same bytes for the cases it shares with another.
With case names as arguments (``name(...)``'s form) it runs those, in that order; without, all of them.
"""

from __future__ import annotations

import hashlib
import json
import sys

from hadar.config import parse_cluster
from hadar.metrics.gavel_reference import REFERENCE
from hadar.model.throughput import ThroughputTable
from hadar.policies import available
from hadar.sim.run import simulate
from hadar.sim.trace import read_jobs

TIMING = {"wall_s", "decision_s_per_round", "solve_s_total"}
#: Default-mode workloads: every registered policy runs on each.
DEFAULT_WORKLOADS = (("small_test", "4:4:4", "simulation"), ("medium_test", "4:4:4", "simulation"),
                     ("artifact_evaluation", "2:0:4", "physical"))


def cases() -> list[tuple[str, str, str, str, bool]]:
    """(trace, cluster, table, policy, gavel_compat): the Gavel reference rows, then every policy in default mode."""
    out = [(trace, cluster, tbl, policy, True) for (trace, cluster, tbl), rows in REFERENCE.items()
           for policy in rows if policy in available()]
    out += [(trace, cluster, tbl, policy, False) for trace, cluster, tbl in DEFAULT_WORKLOADS for policy in available()]
    return out


def name(trace: str, cluster: str, tbl: str, policy: str, compat: bool) -> str:
    return f"{trace}|{cluster}|{tbl}|{policy}|{'compat' if compat else 'default'}"


def cover() -> list[str]:
    """Every policy once, each on the smallest workload, in both modes where it has both (default mode:
    every registered policy; Gavel-compatible mode: those with a Gavel reference row)."""
    small = DEFAULT_WORKLOADS[0]
    return [name(*c) for c in cases() if c[:3] == small]


def run_case(trace: str, cluster: str, tbl: str, policy: str, compat: bool) -> dict:
    result = simulate(read_jobs(trace), parse_cluster(cluster), ThroughputTable.load(tbl), policy,
                      gavel_compat=compat, seed=0, record_events=True)
    schedule = hashlib.sha256(json.dumps(result.events, sort_keys=True).encode()).hexdigest()
    summary = {k: v for k, v in result.summary.items() if k not in TIMING}
    return {"summary": summary, "schedule": schedule}


def main(names: list[str]) -> None:
    by_name = {name(*c): c for c in cases()}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown case(s): {unknown}")
    out = {n: run_case(*by_name[n]) for n in names or by_name}
    sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
