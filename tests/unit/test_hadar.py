"""Hadar: price function, dual subroutine, utilities, placement, and the policy contract (with YARN-CS)."""

from __future__ import annotations

import numpy as np
import pytest

from hadar.mechanism.ledger import JobLedger
from hadar.mechanism.placement import assign_gpus
from hadar.model.cluster import Cluster, Node
from hadar.model.job import Job
from hadar.model.plan import LeaseResult, RoundPlan, RoundReport
from hadar.model.throughput import ThroughputTable
from hadar.policies import create
from hadar.policies.hadar.pricing import PriceBook, best_offer, price_curve
from tests.helpers import leased

TABLE = ThroughputTable({
    ("short", 1): {"fast": 4.0, "slow": 1.0}, ("long", 1): {"fast": 4.0, "slow": 1.0},
    ("flat", 1): {"fast": 1.0, "slow": 0.9}, ("picky", 1): {"fast": 3.0, "slow": 0.3},
    ("fastonly", 1): {"fast": 2.0, "slow": 0.0}, ("dist", 4): {"fast": 8.0, "slow": 4.0},
})


def state_of(cluster: Cluster, jobs: list[Job], now: float = 0.0, table: ThroughputTable = TABLE):
    ledger = JobLedger(cluster, table, 360.0)
    for j in jobs:
        ledger.add(j)
    return ledger.snapshot(now)


def job(i: int, jt: str, steps: float, arrival: float = 0.0, sf: int = 1) -> Job:
    return Job(job_id=i, job_type=jt, scale_factor=sf, total_steps=int(steps), arrival_s=arrival)


def types_of(cluster: Cluster, gpus) -> list[str]:
    return sorted(cluster.gpu_type_of[g] for g in gpus)


# -- price function ---------------------------------------------------------------
def test_price_curve_runs_from_floor_to_ceiling() -> None:
    assert price_curve(1.0, 100.0, 0.0) == pytest.approx(1.0)
    assert price_curve(1.0, 100.0, 1.0) == pytest.approx(100.0)
    assert price_curve(1.0, 100.0, 0.5) == pytest.approx(10.0)
    assert price_curve(1.0, 100.0, 1.0, steepness=0.5) == pytest.approx(10.0)


def test_price_book_rises_as_a_type_fills() -> None:
    book = PriceBook(np.array([4, 2]), 1.0, 16.0, 1.0)
    assert [book.price(0, k) for k in range(4)] == pytest.approx([1.0, 2.0, 4.0, 8.0])
    book.take({0: 2})
    assert book.price(0) == pytest.approx(4.0) and book.price(0, 2) == float("inf")
    with pytest.raises(ValueError, match="only 2 free"):
        book.take({1: 3})


# -- dual subroutine ------------------------------------------------------------------
def test_dual_picks_cheapest_feasible_mix() -> None:
    book = PriceBook(np.array([3, 8]), 1.0, 1.0, 0.0)  # flat prices: 3 fast, 8 slow
    rates, value = np.array([8.0, 4.0]), np.array([10.0, 5.0])
    offer = best_offer(book, rates, value, 4)  # 4 fast impossible: 3 fast + 1 slow (value of slow) vs 4 slow
    assert sum(offer.counts.values()) == 4
    assert offer.utility == pytest.approx(5.0) and offer.cost == pytest.approx(4.0)
    book.take({1: 8})
    assert best_offer(book, rates, value, 4) is None  # only 3 GPUs left


def test_dual_prefers_cheaper_type_for_equal_speed() -> None:
    book = PriceBook(np.array([2, 2]), 1.0, 100.0, 1.0)
    book.take({0: 1})  # fast half full: its next GPU costs 10, slow costs 1
    offer = best_offer(book, np.array([1.0, 1.0]), np.array([50.0, 50.0]), 1)
    assert offer.counts == {1: 1}


def test_dual_never_uses_zero_throughput_type() -> None:
    book = PriceBook(np.array([1, 8]), 1.0, 1.0, 0.0)
    book.take({0: 1})
    assert best_offer(book, np.array([2.0, 0.0]), np.array([5.0, 0.0]), 1) is None
    assert best_offer(book, np.array([2.0, 0.0]), np.array([5.0, 0.0]), 1, rate_model="additive") is None


def test_additive_model_sums_task_shares() -> None:
    book = PriceBook(np.array([1, 8]), 0.1, 0.1, 0.0)
    offer = best_offer(book, np.array([8.0, 4.0]), np.array([8.0, 4.0]), 4, rate_model="additive")
    assert offer.counts == {0: 1, 1: 3}
    assert offer.utility == pytest.approx(8.0 / 4 + 3 * 4.0 / 4)


# -- utilities behave like their namesakes ----------------------------------------------
ONE_FAST_ONE_SLOW = Cluster.from_counts({"fast": 1, "slow": 1})
ONE_FAST = Cluster.from_counts({"fast": 1})


def placed(policy: str, cluster: Cluster, jobs: list[Job], now: float = 0.0, **kw):
    got = leased(create(policy, **kw), state_of(cluster, jobs, now))
    return {jid: types_of(cluster, g) for jid, g in got.items()}


def test_jct_runs_shortest_remaining_first_on_the_fast_gpu() -> None:
    got = placed("hadar", ONE_FAST_ONE_SLOW, [job(0, "long", 40000), job(1, "short", 400)], keep_slack=None)
    assert got[1] == ["fast"] and got[0] == ["slow"]


def test_jct_gives_fast_gpu_to_who_gains_from_it() -> None:
    # equal remaining best-type times; 'picky' is 10x faster on fast, 'flat' barely
    got = placed("hadar", ONE_FAST_ONE_SLOW, [job(0, "flat", 1000), job(1, "picky", 3000)], keep_slack=None)
    assert got[1] == ["fast"] and got[0] == ["slow"]


def test_fifo_serves_earliest_arrival() -> None:
    got = placed("hadar", ONE_FAST, [job(0, "long", 40000, 0.0), job(1, "short", 400, 10.0)], now=20.0,
                 utility="fifo")
    assert list(got) == [0]


def test_fair_serves_least_attained_service() -> None:
    ledger = JobLedger(ONE_FAST, TABLE, 360.0)
    ledger.add(job(0, "short", 40000))
    ledger.add(job(1, "long", 40000))
    plan = RoundPlan(0.0, 360.0)
    ledger.apply(plan, RoundReport(0.0, 360.0, (LeaseResult(0, 0, (0,), 1440.0, 360.0),)))
    assert list(leased(create("hadar", utility="fair"), ledger.snapshot(360.0))) == [1]


def test_throughput_gives_fast_type_to_biggest_speedup() -> None:
    got = placed("hadar", ONE_FAST_ONE_SLOW, [job(0, "flat", 10), job(1, "picky", 10 ** 6)], utility="throughput")
    assert got[1] == ["fast"] and got[0] == ["slow"]


def test_job_may_span_types() -> None:
    cluster = Cluster.from_counts({"fast": 3, "slow": 4})
    got = placed("hadar", cluster, [job(0, "dist", 80000, sf=4)])
    assert len(got[0]) == 4


def test_yarn_is_fifo_non_preemptive_one_type() -> None:
    cluster = Cluster.from_counts({"fast": 4, "slow": 4})
    jobs = [job(0, "dist", 10 ** 6, 0.0, sf=4), job(1, "dist", 10 ** 6, 1.0, sf=4), job(2, "short", 10, 2.0)]
    got = leased(create("yarn_cs"), state_of(cluster, jobs, 5.0))
    assert sorted(got) == [0, 1]  # the short job waits behind the head: no backfill
    for gpus in got.values():
        assert len(set(types_of(cluster, gpus))) == 1


# -- placement ------------------------------------------------------------------------
def test_assign_keeps_previous_gpus_and_packs_nodes() -> None:
    cluster = Cluster((Node("a", "fast", 4), Node("b", "fast", 2), Node("c", "fast", 2)))
    got = assign_gpus(cluster, {0: {"fast": 2}, 1: {"fast": 2}}, {0: (5, 6)})
    assert got[0] == (5, 6)
    assert len({cluster.node_of[g] for g in got[1]}) == 1


# -- contract (hadar, yarn_cs, and Hadar's other utilities) ----------------------------------
@pytest.mark.parametrize(("name", "kw"), [("hadar", {}), ("hadar", {"utility": "fifo"}), ("hadar", {"utility": "fair"}),
                                     ("hadar", {"utility": "throughput"}), ("hadar", {"rate_model": "additive"}),
                                     ("yarn_cs", {})])
def test_policy_contract_on_gavel_jobs(name: str, kw: dict, table) -> None:
    from hadar.config import parse_cluster
    from hadar.sim.generate import JobGenerator

    cluster = parse_cluster("2:3:3", gpus_per_node=2)
    gen = iter(JobGenerator(table, 10.0, seed=3, multi_gpu=True))
    jobs = [next(gen) for _ in range(25)]
    st = state_of(cluster, jobs, jobs[-1].arrival_s, table)
    policy = create(name, **kw)
    a1, a2 = policy.allocate(st), create(name, **kw).allocate(st)
    x = a1.fractions
    assert np.all(x >= 0) and np.all(x.sum(axis=1) <= 1 + 1e-9)
    assert np.all(a1.shares().sum(axis=0) <= st.capacities() + 1e-9)
    assert np.all(x[st.throughput_matrix() <= 0] == 0)
    assert a1.counts == a2.counts and np.array_equal(x, a2.fractions)
    got = leased(policy, st, a1)
    used = [g for gs in got.values() for g in gs]
    assert len(used) == len(set(used))
    scale = {j.job_id: j.scale_factor for j in st.jobs}
    for jid, gpus in got.items():
        assert len(gpus) == scale[jid]
        i = st.job_ids.index(jid)
        for r, t in enumerate(st.gpu_types):
            assert x[i, r] * scale[jid] == pytest.approx(sum(cluster.gpu_type_of[g] == t for g in gpus))


@pytest.mark.parametrize("name", ["hadar", "yarn_cs"])
def test_runs_trace_to_completion(name: str, table) -> None:
    from hadar.config import parse_cluster
    from hadar.sim.run import simulate
    from hadar.sim.trace import read_jobs

    res = simulate(read_jobs("medium_test"), parse_cluster("4:4:4"), table, name)
    assert res.summary["jobs_completed"] == res.summary["jobs"] == 20
    if name == "yarn_cs":
        assert res.summary["restarts"] == 0  # non-preemptive
    else:
        assert res.summary["lease_extension_rate"] > 0.5  # sticky placements
