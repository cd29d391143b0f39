"""Clocks: the virtual one jumps, the wall one sleeps, at a settable speed (clock seconds per wall second)."""

from __future__ import annotations

import pytest

from hadar.build import policy_for_run, wire
from hadar.clock import VirtualClock, WallClock, elapsed_s
from hadar.config import parse_cluster
from hadar.model.job import Job
from hadar.sim.executor import SimulatedExecutor
from hadar.sources import Workload

R50 = "ResNet-50 (batch size 64)"


def test_virtual_clock_jumps_forward_only():
    c = VirtualClock(5.0)
    c.advance_to(3.0)
    assert c.now() == 5.0
    c.advance_to(7.5)
    assert c.now() == 7.5


@pytest.mark.parametrize("speed", [0, -1.0, float("nan"), float("inf")])
def test_a_wall_clock_refuses_a_speed_that_is_not_a_positive_number(speed):
    with pytest.raises(ValueError, match="speed"):
        WallClock(speed)


def test_a_fast_wall_clock_reaches_a_time_in_that_fraction_of_wall_seconds():
    clock = WallClock(speed=100.0)
    assert clock.wall_s(30.0) == pytest.approx(0.3)
    t0 = elapsed_s()
    clock.advance_to(30.0)  # 0.3 wall seconds, not 30
    waited = elapsed_s(t0)
    assert clock.now() >= 30.0
    assert waited < 15.0  # far below the 30 s an unscaled clock sleeps, however loaded the machine
    assert WallClock().wall_s(2.0) == 2.0


def test_the_engine_runs_its_rounds_on_a_fast_wall_clock(table):
    """The loop's mechanism on a real clock at 600x: every job finishes, none before it could (its arrival
    plus its steps at its rate), and the run takes a fraction of the clock span in wall seconds. Finish
    times are not compared with the virtual clock's: a wall clock runs late by however long the machine
    keeps the loop waiting, and a round's boundaries move with it."""
    cluster = parse_cluster("2:0:0")
    jobs = [Job(0, R50, 1, 8_000), Job(1, R50, 1, 16_000, arrival_s=400.0), Job(2, R50, 1, 4_000)]
    rate = table.get(R50, 1, "v100")
    ex = SimulatedExecutor(cluster, table)
    clock = WallClock(speed=600.0)
    engine, ledger = wire(policy_for_run("max_min_fairness_perf").policy, cluster, table, ex, clock,
                          round_s=360.0)
    t0 = elapsed_s()
    engine.run(Workload(jobs))
    wall = elapsed_s(t0)
    for job in jobs:
        rec = ledger.records[job.job_id]
        assert rec.status == "done" and rec.finish_s is not None
        assert rec.finish_s >= job.arrival_s + job.total_steps / rate - 1e-6
    span = max(r.finish_s for r in ledger.records.values())
    assert wall < span / 2  # the clock ran fast (600x nominal), however loaded the machine
