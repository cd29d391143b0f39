"""Throughput per dollar with space sharing (``max_sum_throughput_normalized_by_cost_packed_SLOs``)."""

from __future__ import annotations

import numpy as np
import pytest

from hadar.model import Cluster, JobView, SchedulerState, ThroughputTable
from hadar.model.state import Allocation
from hadar.policies import create

PACKED = "max_sum_throughput_normalized_by_cost_packed_SLOs"
UNPACKED = "max_sum_throughput_normalized_by_cost_perf_SLOs"
V100 = 0.74  # Gavel's price, $ per GPU-hour

# A and B run 1 step/s alone on a V100 and 0.8 / 0.7 steps/s sharing it: 1.5 steps/s per GPU together
TABLE = ThroughputTable.from_gavel_json({"v100": {
    "('A', 1)": {"null": 1.0, "('B', 1)": [0.8, 0.7]},
    "('B', 1)": {"null": 1.0, "('A', 1)": [0.7, 0.8]},
}})


def _state(slo_a: float | None = None, slo_b: float | None = None) -> SchedulerState:
    cluster = Cluster.from_counts({"v100": 1})
    jobs = tuple(JobView(job_id=i, job_type=jt, scale_factor=1, priority_weight=1.0, arrival_s=0.0,
                         total_steps=9000.0, remaining_steps=9000.0, throughputs=(1.0,),
                         slo=slo_a if jt == "A" else slo_b)
                 for i, jt in enumerate("AB"))
    return SchedulerState(now_s=100.0, round_s=360.0, cluster=cluster, jobs=jobs, table=TABLE, memo={})


def _rates(alloc: Allocation) -> np.ndarray:
    """Each job's effective steps/s: its time alone at 1 step/s plus the pair's time at its shared rate."""
    rates = np.asarray(alloc.fractions)[:, 0].copy()
    share = (alloc.pairs or {}).get((0, 1), (0.0,))[0]
    return rates + share * np.array([0.8, 0.7])


def test_the_pair_buys_more_steps_per_dollar_than_time_slicing():
    st = _state()
    packed, plain = create(PACKED).allocate(st), create(UNPACKED).allocate(st)
    assert packed.pairs == {(0, 1): pytest.approx((1.0,), abs=1e-6)}
    assert np.asarray(packed.fractions)[:, 0] == pytest.approx([0.0, 0.0], abs=1e-6)
    assert _rates(packed).sum() / V100 == pytest.approx(1.5 / V100, rel=1e-6)
    assert _rates(plain).sum() / V100 == pytest.approx(1.0 / V100, rel=1e-6)  # one GPU, one job at a time


def test_an_slo_still_constrains_the_packed_allocation():
    # A's deadline: 0 + f x 9,000 s; at t = 100 s it needs 9,000 / (f x 9,000 - 100) = 0.9 steps/s, more
    # than the pair gives it (0.8). Best: the pair half the time and A alone the other half (A: 0.9 steps/s)
    st = _state(slo_a=(9000.0 / 0.9 + 100.0) / 9000.0)
    alloc = create(PACKED).allocate(st)
    assert alloc.pairs is not None
    assert alloc.pairs[(0, 1)] == pytest.approx((0.5,), abs=1e-6)
    assert np.asarray(alloc.fractions)[:, 0] == pytest.approx([0.5, 0.0], abs=1e-6)
    assert _rates(alloc)[0] >= 0.9 * (1 - 1e-6)
    # an SLO nothing can meet (more than 1 step/s): the allocation without SLOs
    hopeless = create(PACKED).allocate(_state(slo_a=0.5))
    assert hopeless.pairs == {(0, 1): pytest.approx((1.0,), abs=1e-6)}


def test_when_two_slos_conflict_the_fallback_drops_one_or_all():
    # both need 0.9 steps/s: 1.8 in all, more than the GPU gives even shared (1.5); equally hard, so
    # job 0's is dropped (lowest id first) and B gets 0.9: the pair 1/3 of the time, B alone 2/3
    f = (9000.0 / 0.9 + 100.0) / 9000.0
    alloc = create(PACKED).allocate(_state(slo_a=f, slo_b=f))
    assert alloc.pairs == {(0, 1): pytest.approx((1 / 3,), abs=1e-6)}
    assert np.asarray(alloc.fractions)[:, 0] == pytest.approx([0.0, 2 / 3], abs=1e-6)
    assert _rates(alloc)[1] == pytest.approx(0.9, rel=1e-6)
    gavel = create(PACKED, slo_fallback="all").allocate(_state(slo_a=f, slo_b=f))  # as if there were no SLOs
    assert gavel.pairs == {(0, 1): pytest.approx((1.0,), abs=1e-6)}
