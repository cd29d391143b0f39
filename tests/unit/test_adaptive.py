"""Adaptive jobs (issue 40, item 3): a batch range per job, its rate at each batch (model/batch.py), the world
running a lease at the batch the plan chose and crediting r there, Hadar choosing the batch by goodput with a
restart-paying hysteresis, and ``hadar trace import sia --jobs adaptive``.

The toy family's table: batch 100 at 2 steps/s and batch 200 at 1.8 steps/s on one V100 (step time 0.5 s and
0.556 s), 3.6 and 3.0 on two; its profile M0 = 100, Bn = 100: a step at 200 (s = 2) makes r = 2 x 200 / 300
= 4/3 reference steps.
"""

from __future__ import annotations

import csv
import math
import pickle
from dataclasses import replace
from pathlib import Path

import pytest

from hadar.cli import main
from hadar.config import parse_cluster
from hadar.errors import InputError
from hadar.model.batch import batch_rate, batch_type, candidates
from hadar.model.efficiency import Efficiency
from hadar.model.job import Job
from hadar.model.plan import Lease, RoundPlan
from hadar.model.state import Allocation, JobView, SchedulerState
from hadar.model.throughput import ThroughputTable
from hadar.policies.hadar import elastic, water
from hadar.sim import executor as sim_executor
from hadar.sim.executor import SimulatedExecutor
from hadar.sim.run import simulate
from hadar.sim.sia_import import adaptive_caps
from hadar.sim.sia_profiles import CLUSTER as SIA_CLUSTER
from hadar.sim.sia_profiles import SiaProfile, rigid_run
from hadar.sim.trace import read_jobs

T100, T200 = "toy (batch size 100)", "toy (batch size 200)"
TABLE = ThroughputTable.from_gavel_json({"v100": {
    f"('{T100}', 1)": {"null": 2.0}, f"('{T200}', 1)": {"null": 1.8},
    f"('{T100}', 2)": {"null": 3.6}, f"('{T200}', 2)": {"null": 3.0}}})
CLUSTER = parse_cluster("v100=2", gpus_per_node=2)
EFF = Efficiency(100.0, 100.0, ((0.0, 100.0),))
DATA = Path(__file__).parent / "data" / "sia"


def test_a_batch_the_table_names_runs_at_its_rate() -> None:
    assert batch_type(T100, 200.0) == T200 and batch_type(T100, 150.5) == "toy (batch size 150.5)"
    assert batch_rate(TABLE, T100, 100.0, 200.0, 1, "v100") == 1.8
    assert batch_rate(TABLE, T100, 100.0, 100.0, 2, "v100") == 3.6


def test_step_time_is_linear_in_the_batch_between_and_beyond_the_known_ones() -> None:
    # 1 GPU: T(100) = 0.5 s, T(200) = 5/9 s; at 150 the mean, 0.5278 s
    assert 1 / batch_rate(TABLE, T100, 100.0, 150.0, 1, "v100") == pytest.approx((0.5 + 5 / 9) / 2, rel=1e-12)
    # beyond 200 along the line (slope 1/1800 s a sample, below T/B = 1/360): T(400) = 5/9 + 200/1800
    assert 1 / batch_rate(TABLE, T100, 100.0, 400.0, 1, "v100") == pytest.approx(5 / 9 + 200 / 1800, rel=1e-12)
    # below 100: T(50) = 0.5 - 50/1800
    assert 1 / batch_rate(TABLE, T100, 100.0, 50.0, 1, "v100") == pytest.approx(0.5 - 50 / 1800, rel=1e-12)
    # a slope steeper than T / B is held there (no negative overhead): T(100) = 1 s, T(200) = 3 s; T(300) = 4.5
    steep = ThroughputTable.from_gavel_json({"v100": {f"('{T100}', 1)": {"null": 1.0},
                                                      f"('{T200}', 1)": {"null": 1 / 3}}})
    assert 1 / batch_rate(steep, T100, 100.0, 300.0, 1, "v100") == pytest.approx(4.5, rel=1e-12)
    # a falling step time is held flat: T(100) = 1 s, T(200) = 0.5 s; T(300) = 0.5
    fall = ThroughputTable.from_gavel_json({"v100": {f"('{T100}', 1)": {"null": 1.0},
                                                     f"('{T200}', 1)": {"null": 2.0}}})
    assert batch_rate(fall, T100, 100.0, 300.0, 1, "v100") == pytest.approx(2.0, rel=1e-12)


def test_one_known_batch_keeps_samples_per_second_and_none_scales_the_jobs_own_rate() -> None:
    one = ThroughputTable.from_gavel_json({"v100": {f"('{T100}', 1)": {"null": 2.0}}})
    assert batch_rate(one, T100, 100.0, 400.0, 1, "v100") == pytest.approx(0.5, rel=1e-12)
    # no batch of the family on 2 GPUs: the job's own rate there (rate_on: 2 x 2.0) x 100 / 400
    assert batch_rate(one, T100, 100.0, 400.0, 2, "v100") == pytest.approx(1.0, rel=1e-12)


def test_candidates_are_the_tables_batches_the_ends_and_powers_of_two() -> None:
    assert candidates(TABLE, T100, 100.0, 25.0, 300.0) == (25.0, 50.0, 100.0, 200.0, 300.0)
    assert candidates(TABLE, T100, 100.0, 100.0, 100.0) == (100.0,)


def test_the_learning_rate_rule_caps_a_steps_worth() -> None:
    """s = 4, Bn = 100, M0 = 100: r = 4 x 200 / 500 = 1.6; sqrt: min(2, 1.6); linear: min(4, 1.6); at s = 1.21
    r = 1.21 x 200 / 221 = 1.095, sqrt(s) = 1.1: r."""
    for rule, want in (("adascale", 1.6), ("sqrt", 1.6), ("linear", 1.6)):
        assert Efficiency(100.0, 100.0, ((0.0, 100.0),), rule).gain(0.0, 400.0) == pytest.approx(want)
    assert Efficiency(100.0, 100.0, ((0.0, 1e6),), "sqrt").gain(0.0, 400.0) == pytest.approx(2.0)
    assert Efficiency(100.0, 100.0, ((0.0, 1e6),), "linear").gain(0.0, 400.0) == pytest.approx(4 * 1e6 / (1e6 + 300))
    with pytest.raises(InputError, match="unknown rule 'cubic'"):
        Efficiency(100.0, 100.0, ((0.0, 100.0),), "cubic")


def test_the_trace_columns_of_a_batch_range(tmp_path) -> None:
    f = tmp_path / "jobs.csv"
    f.write_text("job_type,total_steps,scale_factor,noise_scale,ref_batch,min_batch,max_batch,lr_rule\n"
                 f"{T100},10,1,100,100,50,400,sqrt\n{T100},10,1,100,100,,200,\n{T100},10,1,100,100,,,\n")
    jobs = read_jobs(f)
    assert [j.batch_range for j in jobs] == [(50.0, 400.0), (100.0, 200.0), None]
    assert [j.efficiency.lr_rule for j in jobs if j.efficiency] == ["sqrt", "adascale", "adascale"]
    f.write_text(f"job_type,total_steps,scale_factor,noise_scale,ref_batch,min_batch\n{T100},10,1,100,100,150\n")
    with pytest.raises(InputError, match="want 0 < min_batch <= batch <= max_batch"):
        read_jobs(f)
    f.write_text(f"job_type,total_steps,scale_factor,min_batch\n{T100},10,1,50\n")
    with pytest.raises(InputError, match="need an efficiency profile"):
        read_jobs(f)


def test_the_world_runs_a_lease_at_its_batch_and_credits_r_there() -> None:
    """100 s at batch 200 on one V100: 180 steps of 1.8 steps/s, each 4/3 reference steps: 240."""
    job = Job(job_id=0, job_type=T100, scale_factor=1, total_steps=1e4, efficiency=EFF, batch_range=(100.0, 200.0))
    ex = SimulatedExecutor(CLUSTER, TABLE)
    ex.admit([job])
    at = Lease(0, T100, 1, (0,), 1e4, batch=200.0)
    report = ex.run_round(RoundPlan(0.0, 100.0, (at,)))
    assert report.results[0].steps == pytest.approx(240.0, rel=1e-12)
    assert ex.estimate_rate(at) == pytest.approx(2.4, rel=1e-12)
    own = ex.run_round(RoundPlan(0.0, 100.0, (Lease(0, T100, 1, (0,), 1e4),))).results[0]
    assert own.steps == 200.0  # its own batch: 200 steps of 2 steps/s, r = 1
    # the last steps: 120 reference steps left at 2.4 a second end at 50 s
    last = ex.run_round(RoundPlan(0.0, 100.0, (Lease(0, T100, 1, (0,), 120.0, batch=200.0),))).results[0]
    assert last.steps == 120.0 and last.end_s == pytest.approx(50.0, rel=1e-12)


def _view(ran: bool, restart_s: float, memo_batch: float | None = None, since: float = -1e5) -> SchedulerState:
    """One adaptive job on 1 V100 (``ran``: there last round, holding it ``since`` then)."""
    view = JobView(0, T100, 1, 1.0, 0.0, 1e4, 1e4, (2.0,), previous_gpus=(0,) if ran else (), restart_s=restart_s,
                   efficiency=EFF, batch_range=(100.0, 200.0))
    memo: dict[str, object] = {water.HELD: {0: ((0, 1), since)}}
    if memo_batch is not None:
        memo[elastic.BATCHES] = {0: memo_batch}
    return SchedulerState(0.0, 360.0, CLUSTER, (view,), TABLE, memo=memo)


def test_hadar_picks_the_batch_of_most_goodput_and_changes_only_where_it_pays_its_restart() -> None:
    """On 1 V100: batch 100 makes 2 x 1 = 2 reference steps/s, 200 makes 1.8 x 4/3 = 2.4. A job that ran at 100
    judges 200 at 2.4 x T / (T + restart), T = 1e4 / 2.4 = 4,167 s: 1.935 with a 1,000 s restart (stays),
    2.344 with 100 s (moves), where it has held its GPU long (1e5 s) so the change's gain is kept to its end;
    one placed a round ago expects to keep a change a round (360 s): 2.4 x 360 / 460 = 1.878 < 2 (stays)."""
    assert elastic.best_batch(_view(False, 1000.0), _view(False, 1000.0).jobs[0], 1, ("v100",), 100.0)[1:] == (
        pytest.approx(2.4), 200.0)
    for restart, want in ((1000.0, 100.0), (100.0, 200.0)):
        state = _view(True, restart, 100.0)
        assert elastic.batches_for(state, {0: {0: 1}}) == {0: want}
    assert elastic.batches_for(_view(True, 100.0, 100.0, since=-360.0), {0: {0: 1}}) == {0: 100.0}
    # a job that did not run pays its restore anyway: the best batch
    assert elastic.batches_for(_view(False, 1000.0), {0: {0: 1}}) == {0: 200.0}
    # its view: on each type its rate at its best batch there times its mean gain over the work left (4/3)
    sized = elastic.sized(_view(False, 0.0))[0]
    assert sized.jobs[0].throughputs == pytest.approx((2.4,))


def test_a_ranged_adaptive_job_gets_its_type_and_count_by_goodput_at_its_best_batch() -> None:
    """The elastic jobs' water-filling, each count at its best batch: on 1 V100 batch 200 makes 1.8 x 4/3 = 2.4
    reference steps/s (100: 2), on 2 V100s 3.0 x 4/3 = 4 (100: 3.6). From nothing, 1 GPU first (2.4 a GPU
    against 4 / 2), then the second (adds 1.6): 2 GPUs, its view 4 on the V100s; beside a rigid job holding
    one GPU, 1."""
    view = replace(_view(False, 0.0).jobs[0], gpu_range=(1, 2))
    state = SchedulerState(0.0, 360.0, CLUSTER, (view,), TABLE)
    sized, memo = elastic.sized(state)
    assert sized.jobs[0].scale_factor == 2 and sized.jobs[0].throughputs == pytest.approx((4.0,))
    assert memo[water.HELD] == {0: ((0, 2), 0.0)}
    rigid = JobView(1, T100, 1, 1.0, 0.0, 1e4, 1e4, (2.0,))
    beside = elastic.sized(SchedulerState(0.0, 360.0, CLUSTER, (view, rigid), TABLE))[0]
    assert beside.jobs[0].scale_factor == 1 and beside.jobs[0].throughputs == pytest.approx((2.4,))


def test_a_change_of_batch_is_not_an_extended_lease() -> None:
    from hadar.mechanism.placement import PlacementPlanner

    state = _view(True, 30.0)
    before = RoundPlan(0.0, 360.0, (Lease(0, T100, 1, (0,), 1e4, extended=True, batch=100.0),))
    for batch, extended in ((100.0, True), (200.0, False)):
        alloc = Allocation.for_state(state, [[1.0]], counts={0: {"v100": 1}}, batches={0: batch})
        (lease,) = PlacementPlanner().plan(state, alloc, before).leases
        assert (lease.batch, lease.extended, lease.lost_s) == (batch, extended, 0.0 if extended else 30.0)
        assert dict(pickle.loads(pickle.dumps(alloc)).batches) == {0: batch}  # the recorder keeps it


def test_hadar_runs_an_adaptive_job_at_the_batch_its_progress_calls_for(monkeypatch) -> None:
    """Bn 10 for the first half (r(200) = 2 x 110 / 210 = 1.05: batch 100's 2 steps/s beat 1.8 x 1.05), 1e6
    after (r(200) ~ 2: 3.6 > 2): Hadar runs the job at 100 first and at 200 from the second half on."""
    eff = Efficiency(100.0, 100.0, ((0.0, 10.0), (0.5, 1e6)))
    job = Job(job_id=0, job_type=T100, scale_factor=1, total_steps=4000.0, efficiency=eff, batch_range=(100.0, 200.0),
              restart_s=10.0)
    seen: list[float] = []
    run_round = sim_executor.SimulatedExecutor.run_round

    def spy(self, plan):
        seen.extend(lease.batch for lease in plan.leases)
        return run_round(self, plan)

    monkeypatch.setattr(sim_executor.SimulatedExecutor, "run_round", spy)
    one = parse_cluster("v100=1", gpus_per_node=1)
    out = simulate([job], one, TABLE, "hadar").summary
    assert seen[0] == 100.0 and seen[-1] == 200.0 and sorted(seen) == seen  # one change, upwards
    # alone at 100 it would take 4,000 / 2 = 2,000 s (+10 s restore); adapting it finishes sooner
    assert out["jobs_completed"] == 1 and out["avg_jct_s"] < 2000.0
    rigid = simulate([Job(job_id=0, job_type=T100, scale_factor=1, total_steps=4000.0, efficiency=eff,
                          restart_s=10.0)], one, TABLE, "hadar").summary
    assert rigid["avg_jct_s"] == pytest.approx(2010.0)


def test_sia_import_adaptive_writes_batch_ranges_and_every_batch(tmp_path) -> None:
    """The fixture's bert: validated batches 16 and 64; the 8-GPU row's own batch 32 is written too. Each entry:
    the iterations at B over the run's seconds on that type (1 / seconds per iteration where the real batch is B)."""
    out = tmp_path / "out"
    assert main(["trace", "import", "sia", str(DATA / "workloads" / "tiny.csv"), "--sia-dir", str(DATA),
                 "--out-dir", str(out), "--jobs", "adaptive"]) == 0
    rows = list(csv.DictReader((out / "trace.csv").open()))
    assert [(r["min_batch"], r["max_batch"], r["lr_rule"], r["batch"]) for r in rows] == [
        ("16", "64", "adascale", "64"), ("16", "64", "adascale", "32"), ("16", "64", "adascale", "64")]
    # Sia's bound on an adaptive job's GPUs, not the row's count: its largest batch 64 over its smallest
    # per-GPU batch 8 (every type of the fixture), at most the type's GPUs and 64
    assert adaptive_caps(SiaProfile(DATA / "traces" / "bert", "bert"), SIA_CLUSTER) == {
        "t4": 8, "a100": 8, "rtx2080ti": 8}
    assert [(r["min_gpus"], r["max_gpus"], r["scale_factor"]) for r in rows] == [
        ("1", "8", "4"), ("1", "8", "8"), ("1", "8", "1")]
    table = ThroughputTable.load(out / "throughputs.json")
    assert table.scale_factors("bert (batch size 16)") == tuple(range(1, 9))
    assert table.get("bert (batch size 64)", 4, "a100") == pytest.approx(1 / (0.17 * 1.2), rel=1e-12)
    p = SiaProfile(DATA / "traces" / "bert", "bert")
    for kind in SIA_CLUSTER:
        run = rigid_run(p, kind, 8, 32)
        want = 0.0 if run is None else p.iterations(32) / run.seconds
        assert table.get("bert (batch size 32)", 8, kind.name) == pytest.approx(want, rel=1e-12)
    jobs = read_jobs(out / "trace.csv")
    assert all(j.batch_range == (16.0, 64.0) and j.efficiency is not None for j in jobs)
    assert simulate(jobs, parse_cluster(str(out / "cluster.yaml")), table, "hadar").summary["jobs_completed"] == 3
    assert math.isfinite(simulate(jobs, parse_cluster(str(out / "cluster.yaml")), table,
                                  "max_sum_throughput_perf").summary["avg_jct_s"])
