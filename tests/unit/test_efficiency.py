"""Statistical progress (issue 40, item 2): a job's efficiency profile, the trace columns that give it,
the family defaults, and the simulated world crediting reference steps (numbers by hand)."""

from __future__ import annotations

import math

import pytest

from hadar.config import parse_cluster
from hadar.errors import InputError
from hadar.model.efficiency import FAMILY_DEFAULTS, Efficiency, format_points, gain, parse_points
from hadar.model.job import Job
from hadar.model.plan import Lease, RoundPlan
from hadar.model.throughput import ThroughputTable
from hadar.sim.executor import SimulatedExecutor
from hadar.sim.run import simulate
from hadar.sim.trace import read_jobs

TOY = "toy (batch size 200)"
#: M0 = 100, the job at 200 (s = 2): Bn = 100 for the first half (r = 2 x 200 / 300 = 4/3), then infinite (r = 2)
TWO_PHASE = Efficiency(100.0, 200.0, ((0.0, 100.0), (0.5, math.inf)))


def _table(rate: float = 1.0) -> ThroughputTable:
    return ThroughputTable.from_gavel_json({"v100": {f"('{TOY}', 1)": {"null": rate}}})


def test_the_gain_is_pollux_and_sias_formula() -> None:
    # r = (sigma2 + mu2) / (sigma2 / s + mu2) with Bn = M0 sigma2 / mu2: mu2 = 1, sigma2 = 3, M0 = 10 -> Bn = 30
    sigma2, mu2, s = 3.0, 1.0, 4.0
    assert gain(30.0, 10.0, 40.0) == pytest.approx((sigma2 + mu2) / (sigma2 / s + mu2))  # 16/7
    assert gain(30.0, 10.0, 10.0) == 1.0
    assert gain(math.inf, 10.0, 40.0) == 4.0  # no true gradient left: perfect scaling
    assert gain(1e-9, 10.0, 40.0) == pytest.approx(1.0)  # all signal: a bigger batch buys nothing


def test_credit_and_steps_for_are_exact_across_a_change_of_noise_scale() -> None:
    e = TWO_PHASE
    assert e.gain(0.0) == pytest.approx(4 / 3) and e.gain(0.5) == 2.0 and e.noise_scale(0.49) == 100.0
    # 1200 reference steps: the first 600 at 4/3 (450 steps), the last 600 at 2 (300 steps)
    assert e.steps_for(0.0, 1200.0, 1200.0) == pytest.approx(750.0)
    assert e.credit(0.0, 500.0, 1200.0) == pytest.approx(600.0 + 50 * 2)
    assert e.credit(480.0, 360.0, 1200.0) == pytest.approx(120.0 + 270 * 2)
    assert e.steps_for(480.0, 660.0, 1200.0) == pytest.approx(360.0)
    assert e.credit(0.0, 90.0, 1200.0, batch=100.0) == 90.0  # at the reference batch a step is a step


def test_a_bad_profile_is_an_input_error() -> None:
    with pytest.raises(InputError, match="first point must be at progress 0"):
        Efficiency(100.0, 200.0, ((0.1, 5.0),))
    with pytest.raises(InputError, match="must rise"):
        Efficiency(100.0, 200.0, ((0.0, 5.0), (0.5, 6.0), (0.4, 7.0)))
    with pytest.raises(InputError, match="ref_batch must be a positive"):
        Efficiency(0.0, 200.0, ((0.0, 5.0),))
    with pytest.raises(InputError, match="FRACTION:BN"):
        parse_points("0:1 0.5:x", "f.csv:2")
    points = ((0.0, 72.5), (0.125, math.inf))
    assert parse_points(format_points(points), "") == points
    assert parse_points("300", "") == ((0.0, 300.0),)


def test_the_trace_columns_and_the_family_defaults(tmp_path) -> None:
    f = tmp_path / "jobs.csv"
    f.write_text("job_type,total_steps,noise_scale,ref_batch,batch\n"
                 f"{TOY},1200,0:100 0.5:inf,100,\n"
                 "ResNet-50 (batch size 64),1000,default,,\n"
                 "ResNet-18 (batch size 64),1000,default,,128\n"
                 "ResNet-18 (batch size 64),1000,,,\n")
    a, b, c, d = read_jobs(f)
    assert a.efficiency == TWO_PHASE and not a.extra
    ref, points = FAMILY_DEFAULTS["ResNet-50"]
    assert b.efficiency == Efficiency(ref, 64.0, points)
    assert c.efficiency is not None and c.efficiency.batch == 128.0
    assert d.efficiency is None and d.table_steps == 1000.0
    assert a.table_steps == pytest.approx(750.0)
    for bad, msg in (("CycleGAN,10,default,,", "no default noise scale for 'CycleGAN'"),
                     (f"{TOY},10,5,,", "noise_scale needs ref_batch"),
                     (f"{TOY},10,,100,", "ref_batch without noise_scale")):
        f.write_text(f"job_type,total_steps,noise_scale,ref_batch,batch\n{bad}\n")
        with pytest.raises(InputError, match=msg):
            read_jobs(f)


def test_the_world_credits_reference_steps_and_the_job_ends_at_its_target() -> None:
    """1 table step/s, 360 s rounds, no restarts: round 1 makes 360 steps = 480 reference steps (4/3 each);
    round 2 makes 90 steps to the half (120) and 270 at 2 (540); round 3 needs the last 60: 30 steps. JCT
    = 360 + 360 + 30 = 750 s, the table steps the job needs alone (``table_steps``), and so is the bound."""
    cluster = parse_cluster("v100=1")
    job = Job(job_id=0, job_type=TOY, scale_factor=1, total_steps=1200.0, efficiency=TWO_PHASE)
    ex = SimulatedExecutor(cluster, _table())
    ex.admit([job])
    first = ex.run_round(RoundPlan(0.0, 360.0, (Lease(0, TOY, 1, (0,), 1200.0),)))
    assert first.results[0].steps == pytest.approx(480.0) and first.end_s == 360.0
    second = ex.run_round(RoundPlan(360.0, 360.0, (Lease(0, TOY, 1, (0,), 720.0, extended=True),)))
    assert second.results[0].steps == pytest.approx(660.0)
    last = Lease(0, TOY, 1, (0,), 60.0, extended=True)
    assert ex.estimate_rate(last) == pytest.approx(2.0)  # 60 reference steps in 30 s
    third = ex.run_round(RoundPlan(720.0, 360.0, (last,)))
    assert third.results[0].steps == 60.0 and third.end_s == pytest.approx(750.0)
    for policy in ("fifo", "hadar", "max_min_fairness_perf"):
        out = simulate([job], cluster, _table(), policy).summary
        assert out["avg_jct_s"] == pytest.approx(750.0), policy
        assert out["jct_bound_s"] == pytest.approx(750.0), policy


def test_a_job_without_a_profile_counts_every_step_as_one() -> None:
    cluster = parse_cluster("v100=1")
    job = Job(job_id=0, job_type=TOY, scale_factor=1, total_steps=1200.0)
    assert simulate([job], cluster, _table(), "fifo").summary["avg_jct_s"] == pytest.approx(1200.0)
