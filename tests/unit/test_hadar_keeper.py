"""Hadar's TTD keeper (policies/hadar/keeper.py) and the first-round rule, on cases solved by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hadar.errors import InputError
from hadar.model.state import SchedulerState
from hadar.policies import create
from hadar.policies.hadar.keeper import Work, horizon, horizon_s, jct_plan, periods_s, round_plan
from tests.helpers import leased
from tests.unit.test_hadar import ONE_FAST, ONE_FAST_ONE_SLOW, job, placed, state_of


def work(rates, remaining, scale, capacity) -> Work:
    return Work(np.array(rates, dtype=float), np.array(remaining, dtype=float), np.array(scale, dtype=float),
                np.array(capacity, dtype=float))


def test_horizon_is_the_longest_job_on_its_best_type_when_that_binds() -> None:
    # 40000 steps at 4 steps/s on the one fast GPU: 10000 s; the short job fits on the slow GPU meanwhile
    assert horizon_s(work([[4, 1], [4, 1]], [40000, 400], [1, 1], [1, 1])) == pytest.approx(10000.0)


def test_horizon_is_the_capacity_limit_when_that_binds() -> None:
    # two 4000-step jobs share one fast GPU (4 steps/s): 2000 s, though each alone needs 1000 s
    assert horizon_s(work([[4], [4]], [4000, 4000], [1, 1], [1])) == pytest.approx(2000.0)
    # fast 4 + slow 1 steps/s both busy: 8400 steps need 1680 s (each job's own limit is looser)
    assert horizon_s(work([[4, 1]] * 3, [4000, 4000, 400], [1, 1, 1], [1, 1])) == pytest.approx(1680.0)


def test_horizon_counts_a_gang_as_one_slot() -> None:
    # a 2-GPU job at 6 steps/s on 2 fast GPUs cannot go faster with 4 fast GPUs: 6000 steps take 1000 s
    assert horizon_s(work([[6.0]], [6000], [2], [4])) == pytest.approx(1000.0)


def test_horizon_of_nothing_is_zero() -> None:
    assert horizon_s(work(np.zeros((0, 2)), [], [], [1, 1])) == 0.0


@pytest.mark.parametrize("seed", range(6))
def test_horizon_bound_is_an_upper_bound_of_what_is_left(seed: int) -> None:
    # the keeper skips its second horizon LP where the first one's plan, scaled to what a round leaves,
    # already keeps pace: that scaled plan must be feasible, so its time is at least the LP's optimum
    rng = np.random.default_rng(seed)
    m, n = 10, 3
    rates = rng.uniform(0.5, 5.0, (m, n)) * (rng.uniform(size=(m, n)) > 0.2)
    rates[:, 0] = np.maximum(rates[:, 0], 0.5)  # every job runs somewhere
    w = work(rates, rng.uniform(2e3, 2e5, m), rng.choice([1, 2, 4], m), rng.choice([4, 6, 8], n))
    hz = horizon(w)
    assert hz.s == horizon_s(w)
    assert hz.bound_s(w) == pytest.approx(hz.s, rel=1e-6)  # nothing done: the plan itself
    for share in (0.0, 0.3, 0.9, 1.0):
        left = np.where(rng.uniform(size=m) < 0.5, w.remaining * share, w.remaining * rng.uniform(0.5, 1.0, m))
        after = dataclasses.replace(w, remaining=left)
        assert hz.bound_s(after) >= horizon_s(after) - 1e-3


def test_jct_plan_keeps_a_long_job_to_its_period_lengths() -> None:
    # the plan leaves out a job's time rows where they cannot bind (its slowest type finishes it within the
    # period); a long job's rows stay: two GPUs free, one job of 10 rounds' work, alone: it still gets at
    # most the round's length of one gang, not both GPUs' worth
    w = work([[1.0, 1.0], [1.0, 0.5]], [3600.0, 100.0], [1, 1], [1, 1])
    x, now = jct_plan(w, np.ones(2), 360.0, 3 * horizon_s(w))
    assert x[0].sum() <= 1.0 + 1e-9 and x[0].sum() == pytest.approx(1.0)
    assert now[1] == pytest.approx(1.0) and now[0] == pytest.approx(0.1)


@pytest.mark.parametrize("whole", [False, True])
def test_round_plan_respects_capacity_gangs_and_the_horizon(whole: bool) -> None:
    rng = np.random.default_rng(3)
    m, n, round_s = 12, 3, 360.0
    w = work(rng.uniform(0.5, 5.0, (m, n)), rng.uniform(2e3, 2e4, m), rng.choice([1, 2], m), [4, 4, 4])
    h = horizon_s(w)
    value = rng.uniform(0.0, 1.0, (m, n))
    x, price = round_plan(w, value, round_s, h - round_s, whole=whole)
    assert (x >= -1e-9).all() and (x.sum(axis=1) <= 1 + 1e-9).all()
    assert ((w.scale[:, None] * x).sum(axis=0) <= w.capacity + 1e-9).all()
    if whole:
        assert np.allclose(x, np.round(x))
    else:
        assert (price >= 0).all()
    left = np.maximum(w.remaining - round_s * (x * w.rates).sum(axis=1), 0.0)
    # a round well used leaves everything doable in h - round_s (up to the MIP's whole-gang loss)
    slack = 0.05 * round_s if whole else 1e-6 * h
    assert horizon_s(dataclasses.replace(w, remaining=left)) <= h - round_s + slack


def test_keeper_gives_the_fast_gpu_to_the_job_that_bounds_the_drain() -> None:
    jobs = [job(0, "long", 40000), job(1, "short", 400)]
    assert placed("hadar", ONE_FAST_ONE_SLOW, jobs, keep_slack=None)[1] == ["fast"]  # shortest first
    # the keeper: the long job bounds the horizon (with ftf_cap off: the short job's 100 s on the fast GPU
    # would take 400 s on the slow one, 4x its best-type time, so by default it keeps the plan's fast GPU)
    assert placed("hadar", ONE_FAST_ONE_SLOW, jobs, ftf_cap=None)[0] == ["fast"]
    assert placed("hadar", ONE_FAST_ONE_SLOW, jobs)[1] == ["fast"]
    assert placed("hadar", ONE_FAST_ONE_SLOW, jobs, ftf_cap=4.5)[0] == ["fast"]


def test_keeper_leaves_a_placement_that_keeps_the_horizon() -> None:
    # two fast GPUs, two jobs: both run on fast whatever the order; the keeper changes nothing
    from hadar.model.cluster import Cluster

    two_fast = Cluster.from_counts({"fast": 2})
    jobs = [job(0, "long", 40000), job(1, "short", 400)]
    assert placed("hadar", two_fast, jobs) == placed("hadar", two_fast, jobs, keep_slack=None)


def test_keep_slack_is_validated() -> None:
    with pytest.raises(InputError):
        create("hadar", keep_slack=1.5)


def test_a_job_that_never_ran_goes_first() -> None:
    # (the short job needs 1000 s more: it does not finish this round, which would put it first)
    st = state_of(ONE_FAST, [job(0, "short", 4000), job(1, "long", 40000, arrival=10.0)], now=360.0)
    ran = dataclasses.replace(st.jobs[0], attained_gpu_s=360.0)
    st = dataclasses.replace(st, jobs=(ran, st.jobs[1]))
    def who(**kw):
        return sorted(leased(create("hadar", keep_slack=None, **kw), st))
    assert who(first_round=False) == [0]  # shortest remaining first
    assert who() == [1]  # the new job gets its first round


def test_plan_periods_split_the_round_then_grow() -> None:
    lens = periods_s(360.0, 10_000.0)
    assert lens[:4].tolist() == pytest.approx([120.0, 120.0, 120.0, 360.0])
    assert lens[4] == pytest.approx(1080.0)
    assert lens.sum() == pytest.approx(10_000.0) and (lens > 0).all()
    assert periods_s(360.0, 100.0).sum() == pytest.approx(720.0)  # never less than two rounds


def test_jct_plan_finishes_the_short_job_this_round() -> None:
    # one GPU: 400 steps (100 s) and 40000 steps (10000 s) at 4 steps/s: the short job is done this round
    w = work([[4.0], [4.0]], [400, 40000], [1, 1], [1])
    x, now = jct_plan(w, np.ones(2), 360.0, 3 * horizon_s(w))
    assert now[0] == pytest.approx(1.0)
    assert x[0, 0] == pytest.approx(100 / 360) and x[1, 0] == pytest.approx(260 / 360)


def test_jct_plan_gives_each_type_to_whom_it_suits() -> None:
    # equal work; job 0 is 10x faster on fast, job 1 the same anywhere: job 0 on fast, job 1 on slow
    w = work([[10.0, 1.0], [2.0, 2.0]], [36000, 7200], [1, 1], [1, 1])
    x, _ = jct_plan(w, np.ones(2), 360.0, 3 * horizon_s(w))
    assert x[0, 0] == pytest.approx(1.0) and x[1, 1] == pytest.approx(1.0)


def test_jct_plan_respects_capacity_and_gangs() -> None:
    rng = np.random.default_rng(5)
    m = 20
    w = work(rng.uniform(0.5, 5.0, (m, 3)), rng.uniform(2e3, 2e5, m), rng.choice([1, 2, 4], m), [4, 4, 4])
    x, now = jct_plan(w, np.ones(m), 360.0, 3 * horizon_s(w))
    assert (x >= -1e-9).all() and (x.sum(axis=1) <= 1 + 1e-6).all()
    assert ((w.scale[:, None] * x).sum(axis=0) <= w.capacity + 1e-6).all()
    assert ((now >= -1e-9) & (now <= 1 + 1e-9)).all()


def test_hadar_plan_is_validated_and_pack_is_the_spec_mode() -> None:
    with pytest.raises(InputError):
        create("hadar", plan="greedy")
    with pytest.raises(InputError):
        create("hadar", plan_total=0.5)
    # plan="pack" is spec section 3 alone: shortest remaining first on the fast GPU
    jobs = [job(0, "long", 40000), job(1, "short", 400)]
    assert placed("hadar", ONE_FAST_ONE_SLOW, jobs, plan="pack", keep_slack=None)[1] == ["fast"]


def test_keeper_is_looser_while_jobs_still_arrive() -> None:
    # 'flat' (36000 steps: 1 step/s on fast, 0.9 on slow) sets the horizon (36000 s); shortest first puts
    # the short job on fast and 'flat' on slow, which pushes the horizon out by 36 s: 10 % of the round
    # (ftf_cap off: it would keep the short job, 4x slower on slow, on fast whatever the keeper says)
    jobs = [job(0, "flat", 36000), job(1, "short", 400)]
    kw = {"plan": "pack", "keep_busy": 0.2, "ftf_cap": None}
    assert placed("hadar", ONE_FAST_ONE_SLOW, jobs, **kw)[1] == ["fast"]  # both just arrived: 20 % allowed
    assert placed("hadar", ONE_FAST_ONE_SLOW, jobs, plan="pack", keep_busy=None, ftf_cap=None)[0] == ["fast"]  # 1 %
    # no arrival for over a tenth of the horizon: the drain is on, the 1 % slack again
    assert placed("hadar", ONE_FAST_ONE_SLOW, jobs, now=20000.0, **kw)[0] == ["fast"]
    with pytest.raises(InputError):
        create("hadar", keep_busy=1.0)


def test_keep_fair_shields_jobs_that_never_ran_or_fell_behind() -> None:
    from tests.unit._policy_states import state

    with pytest.raises(InputError):
        create("hadar", keep_fair=0.5)
    with pytest.raises(InputError):
        create("hadar", keep_short=-1.0)
    # at t = 2 h: job 0 (1 h alone, 0.5 h left, arrived at 0) is at FTF (2 + 0.5) / 1 = 2.5 so far;
    # job 1 (10 h alone, 9 h left) at 1.1; job 2 never ran (attained 0)
    st = state([{"rates": {"v100": 1.0}, "total": 3600.0, "remaining": 1800.0},
                {"rates": {"v100": 1.0}, "total": 36000.0, "remaining": 32400.0},
                {"rates": {"v100": 1.0}, "total": 3600.0, "arrival": 7000.0}], {"v100": 2}, now=7200.0)
    pol = create("hadar", keep_fair=1.5, keep_own=None)
    work = Work(st.throughput_matrix(), st.remaining_steps(), st.scale_factors().astype(int), np.array([2]))
    h = horizon_s(work)  # job 1 alone sets it: 32,400 s on its own, more than the 37,800 GPU-s of all on 2 GPUs
    assert h == pytest.approx(32400.0)
    fresh = np.array([False, False, True])
    assert pol.shield().jobs(st, work, fresh, h).tolist() == [1, 0, 1]
    # keep_short alone: jobs with at most a round left (none here) and, with it, those that never ran
    assert create("hadar", keep_own=None).shield().jobs(st, work, fresh, h).tolist() == [0, 0, 1]
    assert create("hadar", keep_short=5.0, keep_own=None).shield().jobs(st, work, fresh, h).tolist() == [1, 0, 1]
    # the keeper may hold back anyone
    assert create("hadar", keep_short=None, keep_own=None).shield().jobs(st, work, fresh, h) is None


def test_keep_own_shields_jobs_far_shorter_than_the_job_that_sets_the_horizon() -> None:
    from tests.unit._policy_states import state

    with pytest.raises(InputError):
        create("hadar", keep_own=-0.5)
    # job 1 (9 h left) alone sets the horizon on 2 GPUs; job 0 (0.5 h left) and job 2 (1 h, never ran)
    # are at most 0.6 of it: by default the keeper holds back neither (the drain waits for job 1 anyway)
    def jobs(arrival: float) -> SchedulerState:
        return state([{"rates": {"v100": 1.0}, "total": 3600.0, "remaining": 1800.0},
                      {"rates": {"v100": 1.0}, "total": 36000.0, "remaining": 32400.0},
                      {"rates": {"v100": 1.0}, "total": 3600.0, "arrival": arrival}], {"v100": 2}, now=7200.0)
    st = jobs(6500.0)
    fresh = np.array([False, False, True])
    two = Work(st.throughput_matrix(), st.remaining_steps(), st.scale_factors().astype(int), np.array([2]))
    assert horizon_s(two) == pytest.approx(32400.0)
    assert create("hadar").shield().jobs(st, two, fresh, horizon_s(two)).tolist() == [1, 0, 1]
    assert create("hadar", keep_own=0.01).shield().jobs(st, two, fresh, horizon_s(two)).tolist() == [0, 0, 1]
    # ... but only once arrivals pause: job 2 arrived 200 s ago, within 2 % of the horizon (648 s)
    assert create("hadar").shield().jobs(jobs(7000.0), two, fresh, horizon_s(two)).tolist() == [0, 0, 1]
    # on one GPU all the work sets the horizon (37,800 s > 1.01 x 32,400 s): only the job that never ran
    one = Work(st.throughput_matrix(), st.remaining_steps(), st.scale_factors().astype(int), np.array([1]))
    assert horizon_s(one) == pytest.approx(37800.0)
    assert create("hadar").shield().jobs(st, one, fresh, horizon_s(one)).tolist() == [0, 0, 1]


def test_ftf_cap_gives_a_short_job_its_best_type_when_gangs_hold_it() -> None:
    """Philly 2869ce's case: five 8-GPU gangs hold every V100 and P100 node (and one K80 node) when a
    4-GPU ResNet-18 of 102 s arrives. The JCT plan gives it V100s, but the keeper's re-plan (the
    gangs set the horizon) puts it on K80s, 4.4x its best-type time; with ``ftf_cap`` (default 2) it
    keeps the plan's V100s, a gang runs on K80s for the round, and it finishes in its best-type time."""
    from hadar.config import parse_cluster
    from hadar.metrics.bound import isolated_best_s
    from hadar.model.job import Job
    from hadar.model.throughput import ThroughputTable
    from hadar.sim.run import simulate

    table = ThroughputTable.load()
    gangs = [("ResNet-18 (batch size 64)", 4126677.5), ("ResNet-50 (batch size 64)", 300451.2),
             ("ResNet-50 (batch size 16)", 760576.7), ("ResNet-18 (batch size 256)", 1346986.0),
             ("LM (batch size 80)", 3826312.9)]  # about 5.7 h each under Hadar
    jobs = [Job(job_id=i, job_type=t, scale_factor=8, total_steps=s, arrival_s=float(i))
            for i, (t, s) in enumerate(gangs)]
    jobs.append(Job(job_id=5, job_type="ResNet-18 (batch size 64)", scale_factor=4, total_steps=9750.0,
                    arrival_s=3600.0))
    cluster = parse_cluster("16:16:16", 8)
    best = float(isolated_best_s(jobs, cluster, table)[5])
    assert best == pytest.approx(102.0, abs=0.1)
    with pytest.raises(InputError):
        create("hadar", ftf_cap=0.5)
    jct = {}
    for cap in (2.0, None):
        rows = simulate(iter(jobs), cluster, table, "hadar", policy_kwargs={"ftf_cap": cap}).rows
        jct[cap] = next(r.jct_s for r in rows if r.job_id == 5)
    assert jct[2.0] == pytest.approx(best, rel=1e-6)
    assert jct[None] > 4 * best  # on K80s
