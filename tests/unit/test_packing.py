"""Space sharing: co-location entries, the LP over singles and pairs, pairs through rounds and the ledger."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hadar.config import parse_cluster
from hadar.errors import InputError
from hadar.mechanism.ledger import JobLedger
from hadar.mechanism.rounds import GavelRoundPlanner
from hadar.model.throughput import ThroughputTable
from hadar.policies.gavel.packed import MaxMinFairnessPacked
from hadar.policies.gavel.packing import Units, packed_max_min
from hadar.policies.registry import create
from hadar.sim.executor import SimulatedExecutor
from hadar.sim.run import simulate
from hadar.sim.trace import read_trace, resolve_trace_path
from tests.helpers import job

R16, R32 = "ResNet-18 (batch size 16)", "ResNet-18 (batch size 32)"


def two_type_table() -> ThroughputTable:
    """A and B run 1 step/s alone on a v100 and 0.8 / 0.7 steps/s when they share it."""
    return ThroughputTable.from_gavel_json({"v100": {
        "('A', 1)": {"null": 1.0, "('B', 1)": [0.8, 0.7]},
        "('B', 1)": {"null": 1.0, "('A', 1)": [0.7, 0.8]},
    }})


def test_co_location_entries_are_read_both_ways(table):
    a = table.pair_rates(R16, R32, 1, "k80")
    assert a == pytest.approx((2.539979567443098, 3.1201925448827033))
    assert table.pair_rates(R32, R16, 1, "k80") == pytest.approx(a[::-1])
    assert {k for _, k, _ in table.pairs} == {1, 2, 4, 8}
    assert table.pair_rates(R16, R32, 1, "no_such_type") == (0.0, 0.0)
    assert table.with_rate(R16, 1, "k80", 1.0).pairs == table.pairs


def test_pairs_of_different_gpu_counts_are_skipped_and_bad_entries_rejected():
    t = ThroughputTable.from_gavel_json({"v100": {"('A', 1)": {"null": 1.0, "('B', 2)": [0.5, 0.5]},
                                                 "('B', 2)": {"null": 2.0}}})
    assert dict(t.pairs) == {}
    with pytest.raises(InputError, match="list of two numbers"):
        ThroughputTable.from_gavel_json({"v100": {"('A', 1)": {"null": 1.0, "('B', 1)": 0.5}}})


def test_packed_lp_hand_checked():
    # one GPU; alone each job gets 1/2 (value 0.5); together 0.8 / 0.7. Optimum: the pair 10/11 of
    # the time and B alone 1/11: A = 0.8 * 10/11 = 8/11, B = 0.7 * 10/11 + 1/11 = 8/11.
    units = Units(2, np.array([[0, 1]]), np.array([[[0.8, 0.7]]]))
    tau, x = packed_max_min(units, np.ones(2), np.ones((2, 1)), np.ones(2), np.ones(1))
    assert tau == pytest.approx(8 / 11)
    assert x[:, 0] == pytest.approx([0.0, 1 / 11, 10 / 11])


def test_a_pair_shares_one_gpu_and_each_job_is_credited_its_co_located_rate():
    t = two_type_table()
    ledger = JobLedger(parse_cluster("v100=1"), t, 360.0)
    ledger.add(job(0, "A", steps=1e5))
    ledger.add(job(1, "B", steps=1e5))
    state = ledger.snapshot(0.0)
    alloc = MaxMinFairnessPacked().allocate(state)
    assert alloc.pairs is not None
    assert alloc.pairs[(0, 1)] == pytest.approx((10 / 11,))
    assert alloc.fractions[:, 0] == pytest.approx([0.0, 1 / 11])
    plan = GavelRoundPlanner().plan(state, alloc, None)
    assert {(lease.job_id, lease.gpus, lease.partner_id) for lease in plan.leases} == {(0, (0,), 1), (1, (0,), 0)}
    report = SimulatedExecutor(ledger.cluster, t).run_round(plan)
    ledger.apply(plan, report)
    assert ledger.records[0].remaining == pytest.approx(1e5 - 288)  # floor(0.8 * 360)
    assert ledger.records[1].remaining == pytest.approx(1e5 - math.floor(0.7 * 360))  # 251 in floats
    assert ledger.gpu_busy_s[0] == pytest.approx(360.0)  # busy once, not twice


@pytest.mark.parametrize(("policy", "jct_h", "makespan_h"), [
    ("max_min_fairness_packed", 3.49, 5.81),
    ("min_total_duration_packed", 4.42, 4.52),
    ("finish_time_fairness_packed", 3.51, 5.87),
    ("fifo_packed", 3.87, 8.27),
])
def test_medium_test_matches_gavel_within_3_percent(table, policy, jct_h, makespan_h):
    # Gavel's published medium_test numbers (4:4:4, seed 0, 1-GPU jobs only)
    jobs = read_trace(resolve_trace_path("medium_test"))
    r = simulate(jobs, parse_cluster("4:4:4"), table, policy, gavel_compat=True)
    assert r.summary["jobs_completed"] == 20
    assert r.summary["avg_jct_s"] / 3600 == pytest.approx(jct_h, rel=0.03)
    assert r.summary["makespan_s"] / 3600 == pytest.approx(makespan_h, rel=0.03)


@pytest.mark.parametrize("policy", ["max_min_fairness_packed", "min_total_duration_packed",
                                    "finish_time_fairness_packed", "fifo_packed",
                                    "max_sum_throughput_normalized_by_cost_packed_SLOs"])
def test_mixed_gpu_counts_run_to_completion_and_pair_only_equal_counts(table, policy):
    kinds = [(R16, 1), (R32, 1), (R16, 2), (R32, 2), ("ResNet-50 (batch size 64)", 4), (R16, 1)]
    jobs = [job(i, jt, sf=sf, steps=3000.0) for i, (jt, sf) in enumerate(kinds)]
    ledger = JobLedger(parse_cluster("4:4:4"), table, 360.0)
    for j in jobs:
        ledger.add(j)
    alloc = create(policy).allocate(ledger.snapshot(0.0))
    sf = {j.job_id: j.scale_factor for j in jobs}
    assert all(sf[a] == sf[b] for a, b in alloc.pairs or {})
    r = simulate(jobs, parse_cluster("4:4:4"), table, policy)
    assert r.summary["jobs_completed"] == len(jobs)
    assert 0 < r.summary["utilization"] <= 1.0
