"""HadarE's forking LP, its type weights and its pace guard value a copy by the policy's own estimate."""

from __future__ import annotations

import math
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from hadar.config import parse_cluster
from hadar.mechanism.ledger import JobLedger
from hadar.model.fork_efficiency import ForkEfficiency
from hadar.model.fork_model import ForkModel
from hadar.model.job import Job
from hadar.policies import create
from hadar.solve.bounds import copy_limits, lp_efficiency
from hadar.solve.fork_lp import tiered_lp, worth_tiers

DATA = Path(__file__).parents[2] / "src" / "hadar" / "data"


def test_ideal_copies_make_one_tier_of_every_gpu() -> None:
    assert worth_tiers([0, 1, 2, 3, 4, 5], 4, 2) == [(1.0, 12)]  # W = 4 first, then 4 copies of 2 GPUs


def test_copies_that_cannot_speed_a_job_up_leave_one_tier_of_w_gpus() -> None:
    """Bn = 0, rho 0.8: m copies are worth 0.8 of one for every m >= 2; only the first copy counts."""
    assert worth_tiers([0, 1, 0.8, 0.8, 0.8], 2, 2) == [(1.0, 2)]


def test_tiers_are_the_chords_of_the_concave_hull_at_doublings() -> None:
    """e = 0.66 per doubling: m copies worth m^(1 + log2 0.66); tiers [0,1], [1,2], [2,4], [4,7], falling slopes."""
    worth = [m * 0.66 ** math.log2(m) if m else 0.0 for m in range(8)]
    tiers = worth_tiers(worth, 1, 1)
    assert [g for _, g in tiers] == [1, 1, 2, 3]
    slopes = [s for s, _ in tiers]
    assert slopes[0] == 1.0 and all(a > b > 0 for a, b in pairwise(slopes))
    assert slopes[1] == pytest.approx(worth[2] - 1)
    assert slopes[3] == pytest.approx((worth[7] - worth[4]) / 3)


def test_a_dip_at_the_second_copy_is_smoothed_by_the_hull() -> None:
    """A merge cost makes two copies worth 1.5 and three 2.4 (the second adds 0.5, the third 0.9): the hull
    averages them (0.7 each), so the LP never uses a third copy without a second."""
    tiers = worth_tiers([0, 1, 1.5, 2.4], 1, 1)
    assert tiers == [(1.0, 1), (pytest.approx(0.7), 2)]


def test_one_tier_per_job_of_every_gpu_is_the_ideal_forking_lp(table) -> None:
    cluster = parse_cluster("2:2:2", 2)
    jobs = [Job(0, "ResNet-18 (batch size 32)", 1, 10_000), Job(1, "A3C", 2, 5_000), Job(2, "LM (batch size 20)", 1,
                                                                                         8_000)]
    per_gpu, caps = copy_limits(jobs, cluster, table)
    steps = np.array([j.total_steps for j in jobs], dtype=float)
    tiers = [[(1.0, 1e9)] for _ in jobs]
    horizon, rel = tiered_lp(per_gpu, steps, cluster, caps, tiers)
    want_h, want_rel = lp_efficiency(per_gpu, steps, cluster, caps)
    assert horizon == pytest.approx(want_h, rel=1e-9)
    np.testing.assert_allclose(rel, want_rel, atol=1e-7)


def test_a_job_of_one_tier_holds_at_most_w_gpus_at_once(table) -> None:
    """A lone job on 3 types x 2 nodes: as one copy (one tier of W = 1 GPU) it runs on its fastest GPU only, so
    T is its steps over that rate; the ideal LP spreads it over all six GPUs."""
    cluster = parse_cluster("2:2:2", 1)
    job = Job(0, "A3C", 1, 10_000)
    per_gpu, caps = copy_limits([job], cluster, table)
    steps = np.array([10_000.0])
    horizon, rel = tiered_lp(per_gpu, steps, cluster, caps, [[(1.0, 1.0)]])
    assert horizon == pytest.approx(10_000 / per_gpu.max(), rel=1e-9)
    assert rel[0, int(np.argmax(per_gpu[0]))] == pytest.approx(1.0)
    assert lp_efficiency(per_gpu, steps, cluster, caps)[0] < 0.5 * horizon


def _state(table, jobs: list[Job], cluster_file: str = "physical_5x1.yaml"):
    ledger = JobLedger(parse_cluster(str(DATA / "clusters" / cluster_file)), table, 360.0)
    for j in jobs:
        ledger.add(j)
    return ledger.snapshot(0.0)


def test_a_job_copies_cannot_speed_up_keeps_hadars_gpu_types(table) -> None:
    """Under the noise-scale estimate an A3C job (no noise scale) is one tier: ``single``, its type weights all
    1 (Hadar's choice); a ResNet-18 job beside it is forkable. Without an estimate nothing is single."""
    state = _state(table, [Job(0, "A3C", 1, 50_000), Job(1, "ResNet-18 (batch size 32)", 1, 50_000)])
    policy = create("hadare")
    assert not policy._lp(state)[2].any()
    policy.fork_estimate = ForkModel().for_estimate()
    _, _, single = policy._lp(state)
    assert single.tolist() == [True, False]
    allocation = policy.allocate(state)
    assert len(allocation.copies[0]) == 1


def test_the_calibrated_estimate_reaches_the_policy_and_prices_copies(table) -> None:
    """A lone Recommendation job on five idle 1-GPU nodes: ideal, its pace guard spreads it over all five; told
    that a doubling of its copies keeps 0.5 of their worth (two copies worth one), no copy adds to it and it
    runs as one."""
    state = _state(table, [Job(0, "Recommendation (batch size 512)", 1, 200_000)])
    policy = create("hadare")
    assert len(policy.allocate(state).copies[0]) == 5
    policy.fork_estimate = ForkEfficiency({"recommendation": 0.5})
    assert len(policy.allocate(state).copies[0]) == 1


def test_wire_hands_any_non_ideal_estimate_to_hadare(table) -> None:
    from hadar.build import wire
    from hadar.clock import VirtualClock
    from hadar.sim.executor import SimulatedExecutor

    cluster = parse_cluster(str(DATA / "clusters" / "physical_5x1.yaml"))
    calibrated = ForkEfficiency.load("calibrated")
    for estimate, want in ((calibrated, calibrated), (ForkEfficiency(), None)):
        policy = create("hadare")
        wire(policy, cluster, table, SimulatedExecutor(cluster, table), VirtualClock(), round_s=360.0,
             fork_efficiency=estimate)
        assert policy.fork_estimate is want
    # teams wrap the policy (their weights through the jobs' priorities): HadarE inside still gets its estimate
    from hadar.mechanism.tenants import parse_tenants

    teams = parse_tenants({"teams": {"vision": {"weight": 2}, "nlp": {}}}, None)
    policy = create("hadare")
    wire(policy, cluster, table, SimulatedExecutor(cluster, table), VirtualClock(), round_s=360.0,
         fork_efficiency=calibrated, tenants=teams)
    assert policy.fork_estimate is calibrated and policy.deferring


def test_the_pace_guard_keeps_a_critical_job_copies_cannot_speed_up_on_its_fastest_gpu(table) -> None:
    """A long A3C job (no noise scale: never forked) sets the horizon beside five short ResNet-18 jobs on five
    1-GPU nodes. Hadar's placement alone leaves it waiting (shortest first); the pace guard holds one V100 for it,
    as Hadar's TTD keeper does, and places the others on the rest."""
    jobs = [Job(0, "A3C", 1, 3_000_000), *(Job(i, "ResNet-18 (batch size 32)", 1, 20_000 * i) for i in range(1, 6))]
    state = _state(table, jobs)
    types = {j: [state.cluster.nodes[n].gpu_type for n, _ in c] for j, c in
             _allocate(state, fork_guard=None, defer=False).copies.items()}
    assert 0 not in types
    copies = _allocate(state, defer=False).copies
    assert [(state.cluster.nodes[n].gpu_type, k) for n, k in copies[0]] == [("v100", 1)]
    assert sum(len(c) for c in copies.values()) == 5
    # deferring (the default with an estimate): Hadar's own round, whose TTD keeper holds the V100 for it
    deferred = _allocate(state).copies
    assert [(state.cluster.nodes[n].gpu_type, k) for n, k in deferred[0]] == [("v100", 1)]
    assert sum(len(c) for c in deferred.values()) == 5


def test_hadare_defers_to_hadar_where_its_estimate_credits_copies_below_their_steps(table) -> None:
    """With an estimate that is not ideal HadarE runs Hadar's own round (its plan, its keeper; no pace guard,
    no type weights) and offers copies only the GPUs that round leaves free; ideal, or `defer: false`, it
    reallocates for copies as before; given plan and keep_slack win either way."""
    ideal = create("hadare")
    assert not ideal.deferring and (ideal.hadar.plan, ideal.hadar.keep_slack) == ("pack", None)
    told = create("hadare")
    told.fork_estimate = ForkModel().for_estimate()
    assert told.deferring and (told.hadar.plan, told.hadar.keep_slack) == ("lp", 0.01)
    told.fork_estimate = None
    assert not told.deferring and told.hadar.plan == "pack"
    kept = create("hadare", defer=False)
    kept.fork_estimate = ForkModel().for_estimate()
    assert not kept.deferring
    mine = create("hadare", plan="pack", keep_slack=None)
    mine.fork_estimate = ForkModel().for_estimate()
    assert mine.deferring and (mine.hadar.plan, mine.hadar.keep_slack) == ("pack", None)
    # every GPU the deferred HadarE's Hadar gives a job, that job holds; copies only add to it
    jobs = [Job(i, "ResNet-18 (batch size 32)", 1, 40_000 * i) for i in range(1, 3)]
    state = _state(table, jobs)
    hadar = create("hadar").allocate(state)
    forked = _allocate(state).copies
    for i, j in enumerate(jobs):
        assert set(np.flatnonzero(hadar.fractions[i] > 0)) <= {
            state.gpu_types.index(state.cluster.nodes[n].gpu_type) for n, _ in forked[j.job_id]}
    # idle nodes took copies (not the K80: beside the faster copies the estimate credits it nothing)
    assert sum(len(c) for c in forked.values()) == len(state.cluster.nodes) - 1


def _allocate(state, **params):
    policy = create("hadare", **params)
    policy.fork_estimate = ForkModel().for_estimate()
    return policy.allocate(state)


def test_copies_yield_to_an_arrival_once_they_have_run_their_merge_time() -> None:
    """A copy's minimum lease is the knob's 30 s, or the noise-scale estimate's merge time where that is shorter
    (a copy has paid for its merge once it ran that long); a calibration file names no merge time."""
    policy = create("hadare")
    assert policy.traits.yield_after_s == 30.0
    policy.fork_estimate = ForkModel(merge_s=5.0).for_estimate()
    assert policy.traits.yield_after_s == 5.0
    policy.fork_estimate = ForkEfficiency.load("calibrated")
    assert policy.traits.yield_after_s == 30.0


def test_copy_factor_reads_either_estimate() -> None:
    """A calibration file's e^log2(m), or the noise-scale model's rho x eff(m) less the merge's share of the round."""
    from hadar.mechanism.fork_credit import copy_factor

    half = ForkEfficiency({"image": 0.5})
    assert copy_factor(half, "ResNet-18 (batch size 32)", 4, 0.9, 360.0) == pytest.approx(0.25)
    model = ForkModel(merge_s=36.0).for_estimate()
    want = model.factor("A3C", 2, 0.5) * 0.9
    assert copy_factor(model, "A3C", 2, 0.5, 360.0) == pytest.approx(want) == pytest.approx(0.5 * 0.9)
    assert copy_factor(model, "A3C", 1, 0.5, 360.0) == 1.0
