"""Gavel-compatible mode reproduces Gavel's published simulator (spec/gavel.md section 5).

The mechanism is exact: fed ECOS's own allocations it reproduces every row below to 0.1 %
(see tests/unit/test_policies_ecos_reference.py for the allocation-level check). Where ECOS,
an interior-point solver, stops at an arbitrary point of a large optimal face (makespan: a
feasibility LP with no objective; FTF: a min-max whose non-bottleneck jobs are free; max-sum:
entries of 1e-6 that reorder who gets spare GPUs), gavel-compat mode solves cvxpy's problem
with our reimplementation of ECOS's iterations (policies/gavel/ecos_ipm.py) to land on the
same point. The rows in KNOWN_DEVIATIONS differ because Gavel's `gandiva` pairs jobs on
shared GPUs (space sharing), which we do not model.
They are marked xfail(strict): fixing one makes the test fail until it is removed from the list.
"""

from __future__ import annotations

import pytest

from hadar.config import parse_cluster
from hadar.metrics.gavel_reference import REFERENCE, TOLERANCE
from hadar.model.throughput import ThroughputTable
from hadar.sim.run import simulate
from hadar.sim.trace import read_jobs

KNOWN_DEVIATIONS = {
    ("small_test", "4:4:4", "gandiva"): "Gavel's gandiva packs job pairs on one GPU; ours does not pack",
    ("medium_test", "4:4:4", "gandiva"): "Gavel's gandiva packs job pairs on one GPU; ours does not pack",
}

CASES = []
for (trace, cluster, tbl), rows in REFERENCE.items():
    for policy, ref in rows.items():
        reason = KNOWN_DEVIATIONS.get((trace, cluster, policy))
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        CASES.append(pytest.param(trace, cluster, tbl, policy, ref, marks=marks, id=f"{trace}-{cluster}-{policy}"))


@pytest.mark.parametrize(("trace", "cluster", "tbl", "policy", "ref"), CASES)
def test_matches_gavel(trace, cluster, tbl, policy, ref):
    result = simulate(read_jobs(trace), parse_cluster(cluster), ThroughputTable.load(tbl), policy,
                      gavel_compat=True, seed=0)
    s = result.summary
    tol = TOLERANCE[policy]
    assert s["jobs_completed"] == s["jobs"]
    assert s["avg_jct_s"] == pytest.approx(ref[0], rel=tol), "avg JCT"
    assert s["makespan_s"] == pytest.approx(ref[1], rel=tol), "makespan"
