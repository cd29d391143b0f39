"""The physical limits (spec/hadar.md section 5) on cases solved by hand."""

from __future__ import annotations

import pytest

from hadar.errors import InfeasibleError
from hadar.metrics.bound import (
    bound_summary,
    compute_bounds,
    jct_bound_s,
    jct_floor_s,
    ttd_forking_bound_s,
    ttd_lp_bound_s,
)
from hadar.model.cluster import Cluster
from hadar.model.job import Job
from hadar.model.throughput import ThroughputTable

TABLE = ThroughputTable({("a", 1): {"fast": 2.0, "slow": 1.0}, ("b", 1): {"fast": 1.0, "slow": 1.0},
                         ("a", 2): {"fast": 4.0, "slow": 2.0}})
ONE_EACH = Cluster.from_counts({"fast": 1, "slow": 1})


def job(i: int, jt: str, steps: int, arrival: float = 0.0, sf: int = 1) -> Job:
    return Job(job_id=i, job_type=jt, scale_factor=sf, total_steps=steps, arrival_s=arrival)


def test_jct_bound_is_mean_best_type_time() -> None:
    jobs = [job(0, "a", 200), job(1, "b", 100)]  # 200/2 = 100 s, 100/1 = 100 s
    assert jct_bound_s(jobs, ONE_EACH, TABLE) == pytest.approx(100.0)


def test_lp_bound_uses_comparative_advantage() -> None:
    # a: 400 steps (2/s fast, 1/s slow); b: 300 steps (1/s anywhere). Best: a on fast (200 s),
    # b on slow (300 s) -> shift: b gets slow all T and fast for part: T solves
    # fast: a takes y_a with 2*y_a + ... hand LP: put a on fast for 200 s, b on slow 300 s; balance
    # by moving b to fast: T = (400/2 + 300)/2 = 250 (b: 250 on slow + 50 on fast).
    jobs = [job(0, "a", 400), job(1, "b", 300)]
    assert ttd_lp_bound_s(jobs, ONE_EACH, TABLE) == pytest.approx(250.0, rel=1e-6)


def test_ttd_bound_is_max_of_lp_and_arrival_limit() -> None:
    jobs = [job(0, "b", 10), job(1, "a", 200, arrival=1000.0)]  # late job: 1000 + 200/2 = 1100
    b = compute_bounds(jobs, ONE_EACH, TABLE)
    assert b.ttd_arrival_s == pytest.approx(1100.0)
    assert b.ttd_lp_s == pytest.approx((10 + 200) / 3.0, rel=1e-6)  # fast 2/s + slow 1/s pool for a, b anywhere
    assert b.ttd_bound_s == pytest.approx(1100.0)


def test_multi_gpu_job_earns_per_gpu_share() -> None:
    jobs = [job(0, "a", 800, sf=2)]  # 2 fast GPUs: 4 steps/s -> 200 s; LP per GPU 2/s on 2 GPUs = 200 s
    cluster = Cluster.from_counts({"fast": 2})
    b = compute_bounds(jobs, cluster, TABLE)
    assert b.jct_bound_s == pytest.approx(200.0)
    assert b.ttd_bound_s == pytest.approx(200.0)


def test_forking_bound_respects_arrivals() -> None:
    # one fast GPU: job0 (b, 100 steps at 1/s) at t=0, job1 (b, 100 steps) at t=50 -> 200 s;
    # without arrivals the LP would also say 200; with job1 arriving at 150 it must be >= 250
    cluster = Cluster.from_counts({"fast": 1})
    assert ttd_forking_bound_s([job(0, "b", 100), job(1, "b", 100, 50.0)], cluster, TABLE) == pytest.approx(200.0)
    assert ttd_forking_bound_s([job(0, "b", 100), job(1, "b", 100, 150.0)], cluster, TABLE) == pytest.approx(250.0)


def test_bound_summary_ratios() -> None:
    jobs = [job(0, "a", 200), job(1, "b", 100)]
    s = bound_summary(jobs, ONE_EACH, TABLE, avg_jct_s=150.0, makespan_s=None)
    assert s["stretch"] == pytest.approx(1.5)
    assert s["ttd_over_bound"] is None


def test_gavel_traces_match_the_spec(table) -> None:
    from hadar.config import parse_cluster
    from hadar.sim.trace import read_jobs

    cluster = parse_cluster("8:16:24")
    cont = compute_bounds(read_jobs("max_min_fairness"), cluster, table)
    static = compute_bounds(read_jobs("minimize_makespan"), cluster, table)
    assert cont.jct_bound_s / 3600 == pytest.approx(2.34, abs=0.01)
    assert cont.ttd_bound_s / 3600 == pytest.approx(17.04, abs=0.01)
    assert static.ttd_bound_s / 3600 == pytest.approx(17.71, abs=0.01)


def test_simulate_summary_reports_limits(table) -> None:
    from hadar.config import parse_cluster
    from hadar.sim.run import simulate
    from hadar.sim.trace import read_jobs

    s = simulate(read_jobs("small_test"), parse_cluster("4:4:4"), table, "hadar").summary
    for key in ("jct_bound_s", "stretch", "ttd_bound_s", "ttd_over_bound"):
        assert s[key] is not None
    assert s["stretch"] >= 1.0 - 1e-9 and s["ttd_over_bound"] >= 1.0 - 1e-9


ONE_FAST = Cluster.from_counts({"fast": 1})


def test_jct_floor_single_gpu_is_shortest_first() -> None:
    # one GPU, jobs of 1000 s and 2000 s at t=0: shortest first finishes at 1000 and 3000 (mean 2000),
    # and no schedule does better; the within-slot term leaves at most a sliver of a slot
    jobs = [job(0, "b", 1000), job(1, "b", 2000)]
    for tail in (False, True):
        floor = jct_floor_s(jobs, ONE_FAST, TABLE, slot_s=20.0, tail=tail)
        assert 2000.0 - 1.0 <= floor <= 2000.0 + 1e-6
    assert floor > jct_bound_s(jobs, ONE_FAST, TABLE) == pytest.approx(1500.0)


def test_jct_floor_gangs_queue_behind_each_other() -> None:
    # two 2-GPU jobs of 200 s on 2 GPUs: one waits for the other (mean 300 s); the JCT bound says 200
    jobs = [job(0, "a", 800, sf=2), job(1, "a", 800, sf=2)]
    cluster = Cluster.from_counts({"fast": 2})
    assert jct_floor_s(jobs, cluster, TABLE, slot_s=5.0) == pytest.approx(300.0, abs=2.0)
    assert jct_bound_s(jobs, cluster, TABLE) == pytest.approx(200.0)


def test_jct_floor_uses_each_type_for_whom_it_suits() -> None:
    # a: 2000 steps, 1000 s on fast, 2000 s on slow; b: 1000 steps, 1000 s on either: a on fast and b
    # on slow finish both at 1000 s, which is each one's best alone: the floor equals the JCT bound
    jobs = [job(0, "a", 2000), job(1, "b", 1000)]
    assert jct_floor_s(jobs, ONE_EACH, TABLE) == pytest.approx(1000.0, rel=1e-6)


def test_jct_floor_with_a_later_arrival() -> None:
    # one GPU: job 0 (2000 s) at 0, job 1 (1000 s) at 1000: the best schedules reach a mean JCT of 2000 s
    # (job 1 preempts job 0 or waits, either way 2000). The mean time alone counts job 0's split work
    # by its mean and says 1750 s; the tail (job 0 is not done at 1000 s) finds the optimum
    jobs = [job(0, "b", 2000), job(1, "b", 1000, arrival=1000.0)]
    assert jct_floor_s(jobs, ONE_FAST, TABLE, slot_s=10.0, tail=False) == pytest.approx(1750.0, abs=1.0)
    assert jct_floor_s(jobs, ONE_FAST, TABLE, slot_s=10.0) == pytest.approx(2000.0, abs=1e-3)


@pytest.mark.parametrize(("slower", "best_mean"), [(4.0, 1375.0), (10.0, 1450.0)])
def test_jct_floor_tail_charges_a_job_the_time_it_still_runs(slower: float, best_mean: float) -> None:
    # one fast GPU and one `slower` times slower, two jobs of 1000 s on fast. A schedule: job 0 on fast;
    # job 1 on slow until 1000 s (1/slower done), then on fast: mean (1000 + 2000 - 1000 / slower) / 2.
    # The mean-time bound alone charges job 1's slow part half price; the tail, which counts the
    # time a job still runs, proves that schedule optimal
    table = ThroughputTable({("e", 1): {"fast": slower, "slow": 1.0}})
    jobs = [job(0, "e", int(1000 * slower)), job(1, "e", int(1000 * slower))]
    assert jct_floor_s(jobs, ONE_EACH, table, slot_s=20.0, tail=False) < best_mean - 40.0
    assert jct_floor_s(jobs, ONE_EACH, table, slot_s=20.0) == pytest.approx(best_mean, abs=1e-3)


def test_jct_floor_rejects_a_job_no_gpu_can_run() -> None:
    table = ThroughputTable({("a", 1): {"fast": 0.0, "slow": 1.0}})
    with pytest.raises(InfeasibleError):
        jct_floor_s([job(0, "a", 10)], ONE_FAST, table)
