"""Issue 40 item 4: HadarE prices a copy by what it adds net of its job's other copies, on its own estimate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hadar.config import parse_cluster
from hadar.mechanism.forking import CopyCandidate, NodeFree, offer_nodes
from hadar.model.cluster import Cluster, Node
from hadar.model.fork_model import ForkModel
from hadar.model.job import Job
from hadar.model.world import World
from hadar.policies.hadar.pricing import PriceBook
from hadar.sim.run import simulate

DATA = Path(__file__).parents[2] / "src" / "hadar" / "data"


def _halving(m: int) -> float:
    """eff(m) = 2 / (m + 1): the noise-scale model with Bn = B (rho 1, no merge time)."""
    return 2.0 / (m + 1)


def test_a_copys_gain_is_its_rate_less_what_it_costs_the_others() -> None:
    c = CopyCandidate(0, np.array([[0.0, 1.0]]), np.array([1.0]), 1e9, factor=_halving, copies=1, total=1.0)
    assert c.gain(1.0) == pytest.approx(4 / 3 - 1)  # 2 copies credited 2 x 2/3
    c.copies, c.total = 3, 3.0
    assert c.gain(1.0) == pytest.approx(1.6 - 1.5)
    assert CopyCandidate(0, np.array([[0.0, 1.0]]), np.array([1.0]), 1e9).gain(0.7) == 0.7  # no factor: its rate


def test_a_copy_that_adds_nothing_is_never_offered() -> None:
    """eff(m) = 0.8 / m for m > 1 (Bn = 0, rho 0.8): a second copy lowers the job's credited rate, so of three free
    nodes the job takes one, in every pass; without the estimate it takes all three."""
    cluster = Cluster(tuple(Node(f"n{i}", "fast", 1) for i in range(3)))

    def worthless(m: int) -> float:
        return 1.0 if m <= 1 else 0.8 / m

    for factor, copies in ((worthless, 1), (None, 3)):
        job = CopyCandidate(0, np.array([[0.0, 1.0]]), np.array([1.0]), 1e9, factor=factor)
        got = offer_nodes(NodeFree(cluster, dict.fromkeys(range(3), 1)), PriceBook(np.array([3]), 0.1, 0.1),
                          [job], 360.0)
        assert len(got[0]) == copies


def test_the_second_copy_goes_where_its_net_gain_beats_the_price() -> None:
    """Two 1-GPU nodes at 0.25 a GPU: job 0's first copy pays 0.75; its second adds 1/3 under eff 2/(m+1), which
    leaves 0.083 after the price, below job 1's 0.5 - 0.25: job 1 gets the second node. Counted at its full rate
    (no estimate) job 0's second copy would pay 0.75 and take it."""
    cluster = Cluster(tuple(Node(f"n{i}", "fast", 1) for i in range(2)))
    for factor, want in ((_halving, {0: 1, 1: 1}), (None, {0: 2})):
        jobs = [CopyCandidate(0, np.array([[0.0, 1.0]]), np.array([1.0]), 1e9, factor=factor),
                CopyCandidate(1, np.array([[0.0, 0.5]]), np.array([1.0]), 1e9)]
        got = offer_nodes(NodeFree(cluster, {0: 1, 1: 1}), PriceBook(np.array([2]), 0.25, 0.25), jobs, 360.0)
        assert {i: len(c) for i, c in got.items()} == want


def _copies_per_round(res) -> list[int]:
    return [len(e["leases"]) for e in res.events if e["event"] == "round"]


def test_hadare_with_the_model_forks_only_what_gains(table) -> None:
    """An A3C job (no noise scale: copies worth one) on an idle five-node cluster runs as one copy when HadarE holds
    the model, as five when it plans as if forking were free. A ResNet-18 job at batch 32 (Bn 290 from progress 0,
    1,900 from 0.1) on 2 V100, 2 P100 and a K80: at first the K80's copy lowers the other four's worth more than it
    adds, so it idles; from the second round (past a tenth of the job) it runs."""
    cluster = parse_cluster(str(DATA / "clusters" / "physical_5x1.yaml"))
    world = World(fork_efficiency=ForkModel())
    est = ForkModel().for_estimate()
    a3c = [Job(0, "A3C", 1, 50_000)]
    told = simulate(a3c, cluster, table, "hadare", world=world, fork_estimate=est, record_events=True)
    blind = simulate(a3c, cluster, table, "hadare", world=world, record_events=True)
    assert set(_copies_per_round(told)) == {1} and set(_copies_per_round(blind)) == {5}
    assert told.summary["avg_jct_s"] < blind.summary["avg_jct_s"]  # the blind copies cost it merges for nothing
    r18 = [Job(0, "ResNet-18 (batch size 32)", 1, 200_000)]
    rates = [table.rate_on(r18[0].job_type, 1, t) for t in ("v100", "v100", "p100", "p100", "k80")]

    def credited(bn: float, k: int) -> float:  # rho 0.8 before a quarter, the merge's 5 s of 360 off
        return 0.8 * (bn + 32) / (bn + k * 32) * (1 - 5 / 360) * sum(rates[:k])

    assert credited(290, 5) < credited(290, 4) and credited(1900, 5) > credited(1900, 4)
    forks = simulate(r18, cluster, table, "hadare", world=world, fork_estimate=est, record_events=True)
    counts = _copies_per_round(forks)
    assert counts[0] == 4 and set(counts[1:]) == {5}


def test_the_planner_keeps_the_best_number_of_copies_not_the_first_tie(table) -> None:
    """Under the model an A3C job's m copies are credited 0.8 x (1/m) x m of one copy's rate for every m >= 2: dropping
    one at a time never gains, yet one copy alone (credited in full) beats them all. The planner keeps one, the
    fastest (node 0, a V100)."""
    from hadar.mechanism.fork_credit import credited_copies

    cluster = parse_cluster(str(DATA / "clusters" / "physical_5x1.yaml"))
    groups = [(g,) for g in range(5)]
    model = ForkModel().for_estimate()
    assert credited_copies(cluster, table, model, "A3C", 1, groups, 0.5, 360.0) == [(0,)]
    # a ResNet-18 job late in training keeps all five (each copy adds more than it costs the others)
    assert credited_copies(cluster, table, model, "ResNet-18 (batch size 32)", 1, groups, 0.9, 360.0) == groups


def test_the_pace_guard_gives_no_copy_that_adds_nothing(table) -> None:
    """A lone A3C job on an idle five-node cluster is the pace guard's case (it sets the horizon): planning as if
    copies were free HadarE gives it a copy on every node; with the model, one (the others would be worth less)."""
    from hadar.mechanism.ledger import JobLedger
    from hadar.policies import create

    cluster = parse_cluster(str(DATA / "clusters" / "physical_5x1.yaml"))
    ledger = JobLedger(cluster, table, 360.0)
    ledger.add(Job(0, "A3C", 1, 200_000))
    state = ledger.snapshot(0.0)
    for model, copies in ((None, 5), (ForkModel().for_estimate(), 1)):
        policy = create("hadare")
        policy.fork_estimate = model
        assert len(policy.allocate(state).copies[0]) == copies


def test_hadare_reads_a_jobs_measured_merge_rho_in_place_of_the_models(table) -> None:
    """The runtime measures each merge's drift factor (``MergeGain.rho``, the ledger's mean of them is the job's
    ``merge_rho``): HadarE's estimate for that job takes it in place of the model's rho(f). Measured low, the
    copies of a ResNet-18 job on an idle five-node cluster are worth less than one copy alone, so it runs as one;
    unmeasured, it runs as four (the model's rho 0.8)."""
    from hadar.mechanism.ledger import JobLedger
    from hadar.policies import create

    cluster = parse_cluster(str(DATA / "clusters" / "physical_5x1.yaml"))
    est = ForkModel().for_estimate()

    def allocate(rho: float | None):
        ledger = JobLedger(cluster, table, 360.0)
        ledger.add(Job(0, "ResNet-18 (batch size 32)", 1, 200_000))
        if rho is not None:
            rec = ledger.records[0]
            rec.rho_sum, rec.rho_n = rho, 1
        state = ledger.snapshot(0.0)
        policy = create("hadare")
        policy.fork_estimate = est
        return policy, state, policy.allocate(state)

    policy, state, unmeasured = allocate(None)
    assert len(unmeasured.copies[0]) == 4
    view = state.jobs[0]
    assert policy._factor(state, view)(3) == pytest.approx(est.rate_factor(view.job_type, 3, 0.0, 360.0))
    policy, state, low = allocate(0.2)
    factor = policy._factor(state, state.jobs[0])
    assert factor(1) == 1.0 and factor(3) == pytest.approx(est.rate_factor(view.job_type, 3, 0.0, 360.0) * 0.2 / 0.8)
    assert len(low.copies[0]) == 1
