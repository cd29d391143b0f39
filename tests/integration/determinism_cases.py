"""Runs a fixed set of simulations and prints one JSON object: per case, the summary (timings
left out) and a hash of the whole schedule (every round's leases, every finish).

Run in a subprocess by test_determinism.py under several OpenBLAS kernels, NumPy dispatch
settings and hash seeds; every run must print the same bytes.
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


def run_case(trace: str, cluster: str, tbl: str, policy: str, compat: bool) -> dict:
    result = simulate(read_jobs(trace), parse_cluster(cluster), ThroughputTable.load(tbl), policy,
                      gavel_compat=compat, seed=0, record_events=True)
    schedule = hashlib.sha256(json.dumps(result.events, sort_keys=True).encode()).hexdigest()
    summary = {k: v for k, v in result.summary.items() if k not in TIMING}
    return {"summary": summary, "schedule": schedule}


def main() -> None:
    out = {f"{t}|{c}|{tb}|{p}|{'compat' if g else 'default'}": run_case(t, c, tb, p, g) for t, c, tb, p, g in cases()}
    sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
