"""How HadarE's forking planner runs a job's copies under the run's fork efficiency (fork_credit.py)."""

from __future__ import annotations

import math

import pytest

from hadar.config import parse_cluster
from hadar.mechanism.fork_credit import _subset, credited_copies
from hadar.model.fork_efficiency import IDEAL, ForkEfficiency
from hadar.model.throughput import ThroughputTable
from hadar.model.world import World
from hadar.sim.run import simulate
from tests.helpers import job

TOY = ThroughputTable({("a", 1): {"fast": 2.0, "slow": 0.2}, ("a", 4): {"fast": 6.0, "slow": 0.6},
                       ("s", 1): {"fast": 1.0}, ("s", 2): {"fast": 2.5}})
HALF = ForkEfficiency({}, job_types={}, default=0.5)  # each doubling of the copies keeps half their worth


def nodes(spec: str, per_node: int):
    return parse_cluster(spec, per_node)


def test_a_gang_wider_than_a_node_runs_as_one_synchronous_copy_when_forking_loses() -> None:
    cluster = nodes("fast=4", 1)  # four 1-GPU nodes
    four = [(0,), (1,), (2,), (3,)]
    # ideal: four 1-GPU copies make 4 x 2 = 8 steps/s, the 4-GPU gang 6: the copies stay
    assert credited_copies(cluster, TOY, IDEAL, "a", 4, four) == four
    # half per doubling: the copies are worth 0.25 x 8 = 2, the gang 6: one lease on all four
    assert credited_copies(cluster, TOY, HALF, "a", 4, four) == [(0, 1, 2, 3)]


def test_under_ideal_forking_a_gang_wins_only_where_the_table_scales_superlinearly() -> None:
    cluster = nodes("fast=2", 1)
    assert credited_copies(cluster, TOY, IDEAL, "s", 2, [(0,), (1,)]) == [(0, 1)]  # 2.5 > 1 + 1


def test_only_the_job_s_width_merges_and_extra_copies_stay_forks() -> None:
    cluster = nodes("fast=6", 1)
    six = [(g,) for g in range(6)]
    got = credited_copies(cluster, TOY, HALF, "a", 4, six)
    assert got[0] == (0, 1, 2, 3)  # the first four in node order form the gang
    # the two 1-GPU copies left cost more than they add under HALF: eff(3) x 10 < eff(1) x 6
    assert got == [(0, 1, 2, 3)]


def test_a_slow_copy_that_costs_its_job_progress_is_dropped() -> None:
    cluster = nodes("fast=1,slow=1", 1)
    copies = [(0,), (1,)]  # a fast node (2 steps/s) and a slow one (0.2)
    assert credited_copies(cluster, TOY, IDEAL, "a", 1, copies) == copies  # ideal: every copy adds
    # eff(2) = 0.5: 0.5 x 2.2 = 1.1 < 2 alone: the slow copy is dropped, the fast one kept
    assert credited_copies(cluster, TOY, HALF, "a", 1, copies) == [(0,)]
    # a mild loss keeps both: 0.95 x 2.2 = 2.09 > 2
    mild = ForkEfficiency({}, job_types={}, default=0.95)
    assert credited_copies(cluster, TOY, mild, "a", 1, copies) == copies


def test_subset_takes_the_earliest_copies_that_add_up() -> None:
    assert _subset([10, 11, 12, 13], [3, 2, 1, 2], 4) == [10, 12]
    assert _subset([10, 11, 12], [2, 2, 2], 4) == [10, 11]
    assert _subset([10, 11], [3, 3], 4) is None
    assert _subset([], [], 4) is None


def test_a_calibrated_wide_job_finishes_at_its_gang_rate(table) -> None:
    """End to end: an 8-GPU Transformer alone on eight 1-GPU V100 nodes. Calibrated, its copies would be
    worth eff(8) x 8 x X[1]; as one gang it runs at X[8] and finishes when its steps are done at that
    rate (to within the round's whole steps)."""
    jt = "Transformer (batch size 128)"
    cluster = nodes("v100=8", 1)
    eff = ForkEfficiency.load("calibrated")
    steps = 100_000.0
    res = simulate([job(0, jt, sf=8, steps=steps)], cluster, table, "hadare", world=World(fork_efficiency=eff),
                   fork_estimate=eff, record_events=True)
    leases = [e["leases"] for e in res.events if e["event"] == "round"]
    assert all(len(ls) == 1 and len(ls[0][2]) == 8 for ls in leases)  # one lease on all eight GPUs
    assert res.rows[0].jct_s == pytest.approx(steps / table.get(jt, 8, "v100"), rel=1e-3)
    split = eff.factor(jt, 8) * 8 * table.get(jt, 1, "v100")
    assert table.get(jt, 8, "v100") > split  # what the gang is worth over the copies
    assert not math.isclose(table.get(jt, 8, "v100"), split)
