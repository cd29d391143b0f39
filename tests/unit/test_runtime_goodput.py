"""What the runtime tells an adaptive job (its batch, its learning-rate scale) and what it brings back for the
scheduler's model of a job (its measured noise scale, what each merge of its copies gained)."""

from __future__ import annotations

import json
import math

import pytest

from hadar.config import parse_cluster
from hadar.job.context import Context
from hadar.job.goodput import HOLDOUT, HOLDOUT_START, lr_scale
from hadar.job.lease import LeaseOutcome, LeaseSpec
from hadar.job.state import StateCache
from hadar.mechanism.ledger import JobLedger
from hadar.mechanism.ledger_state import dump_ledger, restore_ledger
from hadar.model.efficiency import Efficiency
from hadar.model.job import Job
from hadar.model.plan import Lease, LeaseResult, MergeGain, RoundPlan, RoundReport
from hadar.model.throughput import ThroughputTable
from hadar.runtime import merges
from hadar.runtime.tracker import ThroughputTracker

R18 = "ResNet-18 (batch size 64)"


def _ctx(**fields) -> tuple[Context, LeaseOutcome]:
    spec = LeaseSpec(**{"job_id": 3, "entrypoint": "m:f", "rank": 0, "world": 1, "max_iterations": 5,
                        "budget_s": 9.0, "checkpoint": "/nonexistent/c.pt", **fields})
    out = LeaseOutcome()
    return Context(spec, "cpu", StateCache(), out), out


def test_lr_scale_follows_the_rule_relative_to_the_own_batch():
    assert lr_scale("linear", 128, 32, None) == 4.0
    assert lr_scale("sqrt", 128, 32, None) == 2.0
    # AdaScale: r(B) / r(own) = (Bn + own) B / ((Bn + B) own) = (96 + 32) 128 / ((96 + 128) 32)
    assert lr_scale("adascale", 128, 32, 96.0) == pytest.approx(128 * 128 / (224 * 32))
    assert lr_scale("adascale", 128, 32, math.inf) == 4.0  # no true gradient seen: perfect scaling
    assert lr_scale("adascale", 128, 32, None) == 1.0  # nothing measured, no profile: no scaling
    assert lr_scale("", 128, 32, 96.0) == 1.0  # a rigid job
    assert lr_scale("linear", 32, 32, None) == 1.0


def test_ctx_gives_the_lease_batch_and_scale():
    ctx, _ = _ctx(batch=256.0, own_batch=64.0, lr_rule="adascale", noise_scale=192.0)
    assert ctx.batch_size == 256
    assert ctx.lr_scale == pytest.approx((192 + 64) * 256 / ((192 + 256) * 64))
    rigid, _ = _ctx(batch=64.0, own_batch=64.0)
    assert (rigid.batch_size, rigid.lr_scale) == (64, 1.0)
    unknown, _ = _ctx()
    assert (unknown.batch_size, unknown.lr_scale) == (None, 1.0)


def test_the_live_noise_meter_overrides_the_scheduler_noise_scale():
    torch = pytest.importorskip("torch")
    ctx, _ = _ctx(batch=128.0, own_batch=32.0, lr_rule="adascale", noise_scale=1e9)
    model = torch.nn.Linear(2, 1)
    noise = ctx.gradient_noise(model, 128)
    assert ctx.lr_scale == pytest.approx(4.0, rel=1e-6)  # before a pair: the scheduler's (huge Bn: ~linear)
    noise.estimate.add(small_sqr=2.0, small_batch=128, big_sqr=1.5, big_batch=256)  # |G|^2 = 1, S = 128
    assert noise.noise_scale == pytest.approx(128.0)
    assert ctx.lr_scale == pytest.approx((128 + 32) * 128 / ((128 + 128) * 32))


def test_a_lease_keeps_its_first_holdout_loss():
    ctx, out = _ctx(max_iterations=0, mode="finalize")
    ctx.report(**{HOLDOUT: 2.5})
    ctx.report(**{HOLDOUT: 1.5})
    assert ctx._verdict() == ""
    assert out.metrics[HOLDOUT] == 1.5 and out.metrics[HOLDOUT_START] == 2.5


def _job(adaptive: bool = True, efficiency: bool = True, rule: str = "sqrt") -> Job:
    eff = Efficiency(32.0, 64.0, ((0.0, 100.0), (0.5, 400.0)), rule) if efficiency else None
    return Job(job_id=0, job_type=R18, scale_factor=1, total_steps=1000.0, efficiency=eff,
               batch_range=(32.0, 512.0) if adaptive and efficiency else None)


def test_lease_fields_carry_the_chosen_batch_and_the_noise_scale():
    lease = Lease(0, R18, 1, (0,), 1000.0, batch=256.0)
    assert merges.lease_fields(_job(), lease, None, 600.0) == {
        "batch": 256.0, "own_batch": 64.0, "lr_rule": "sqrt", "noise_scale": 400.0}  # the profile's at 0.6
    assert merges.lease_fields(_job(), lease, 77.0, 0.0)["noise_scale"] == 77.0  # the measured one
    rigid = merges.lease_fields(_job(adaptive=False), Lease(0, R18, 1, (0,), 1000.0), None, 0.0)
    assert (rigid["batch"], rigid["lr_rule"]) == (64.0, "")  # its own batch, scale 1
    assert merges.lease_fields(_job(efficiency=False), lease, None, 0.0) == {}


def test_a_measured_noise_scale_rescales_the_profile():
    eff = Efficiency(32.0, 64.0, ((0.0, 100.0), (0.5, 400.0)))
    assert eff.measured(0.7, 1200.0).points == ((0.0, 300.0), (0.5, 1200.0))
    assert eff.measured(0.1, math.inf).points == ((0.0, math.inf),)
    flat = Efficiency(32.0, 64.0, ((0.0, 0.0),))
    assert flat.measured(0.1, 50.0).points == ((0.0, 50.0),)


def _meter_with_merge(start: float, after: list[float], noise: float | None) -> merges.MergeMeter:
    events: list[dict] = []
    meter = merges.MergeMeter(events.append)
    for a in after:
        m = {HOLDOUT_START: start, HOLDOUT: a, **({merges.NOISE: noise} if noise is not None else {})}
        meter.copy_done(5, LeaseOutcome(ok=True, metrics=m), 96.0)
    meter.merged(5, 4, 12.5)
    meter.events = events  # type: ignore[attr-defined]
    return meter


def test_a_merge_is_measured_on_the_next_lease_first_holdout_loss():
    meter = _meter_with_merge(2.0, [1.5, 1.7], 96.0)  # copies lowered the loss by 0.4 on average
    meter.lease_started(5, LeaseOutcome(ok=True, first_metrics={"accuracy": 0.9}))  # no holdout: waits
    assert meter.drain() == ()
    meter.lease_started(5, LeaseOutcome(ok=True, first_metrics={HOLDOUT: 1.2, "accuracy": 0.9}))
    (g,) = meter.drain()
    # gain (2 - 1.2) / 0.4 = 2 copies; data-parallel at 96 over 2 copies of 48: 2 (96 + 48) / (96 + 96) = 1.5
    assert (g.job_id, g.round, g.copies) == (5, 4, 2)
    assert g.gain == pytest.approx(2.0) and g.rho == pytest.approx(2.0 / 1.5)
    (e,) = meter.events  # type: ignore[attr-defined]
    assert e["event"] == "merge_gain" and e["t"] == 12.5 and e["merged_metrics"]["accuracy"] == 0.9
    assert meter.drain() == () and meter.measured == [g]


def test_a_merge_without_progress_or_noise_scale_has_no_gain_or_rho():
    meter = _meter_with_merge(2.0, [2.1, 2.3], None)
    meter.lease_started(5, LeaseOutcome(ok=True, first_metrics={HOLDOUT: 1.9}))
    (g,) = meter.drain()
    assert g.gain is None and g.rho is None and g.merged_loss == 1.9
    meter = _meter_with_merge(2.0, [1.0, 1.0], None)
    meter.lease_started(5, LeaseOutcome(ok=True, first_metrics={HOLDOUT: 1.5}))
    (g,) = meter.drain()
    assert g.gain == pytest.approx(0.5) and g.rho is None
    single = _meter_with_merge(2.0, [1.0], 96.0)  # one copy: nothing was averaged
    single.lease_started(5, LeaseOutcome(ok=True, first_metrics={HOLDOUT: 1.0}))
    assert single.drain() == ()


def test_noise_scales_of_the_round_report():
    assert merges.noise_scales({2: {"noise_scale": 40.0}, 1: {"loss": 1.0}, 0: {"noise_scale": 9.0}}) == (
        (0, 9.0), (2, 40.0))


def test_the_ledger_takes_the_measured_noise_scale_and_merge_gains_from_the_round_report(table):
    cluster = parse_cluster("v100=1")
    ledger = JobLedger(cluster, table, 60.0)
    ledger.add(_job(rule="adascale"))
    before = ledger.snapshot(0.0).jobs[0]
    assert before.efficiency.points == ((0.0, 100.0), (0.5, 400.0)) and before.merge_rho is None
    plan = RoundPlan(0.0, 60.0, (Lease(0, R18, 1, (0,), 1000.0),))
    gains = (MergeGain(0, 0, 2, 2.0, 1.6, 1.2, 2.0, 1.5), MergeGain(0, 1, 2, 1.2, 1.0, 0.9, 1.5, 0.5),
             MergeGain(0, 2, 2, 0.9, 0.95, 0.9, None, None))
    report = RoundReport(0.0, 60.0, (LeaseResult(0, 0, (0,), 250.0, 60.0),), noise_scales=((0, 50.0),),
                         merge_gains=gains)
    ledger.apply(plan, report)
    view = ledger.snapshot(60.0).jobs[0]
    assert view.efficiency.points == ((0.0, 50.0), (0.5, 200.0))  # measured 50 at 25 %: half the profile
    assert view.merge_rho == pytest.approx(1.0)  # the mean of the measured rhos
    rec = ledger.records[0]
    assert (rec.rho_n, rec.rho_sum) == (2, pytest.approx(2.0))  # a running sum over the rhos measured, not a list
    assert view.gain < before.gain  # a smaller noise scale: a step at its batch is worth less
    # a restarted service's ledger (the state a recorder keeps) sees the same measured noise and merges
    again = JobLedger(cluster, table, 60.0)
    restore_ledger(again, json.loads(json.dumps(dump_ledger(ledger))), {0: ledger.records[0].job})
    assert again.snapshot(60.0).jobs[0] == view


def test_given_batch_rows_of_an_adaptive_job_join_the_table():
    given = ThroughputTable({("mlp (batch size 16)", 1): {"v100": 40.0}, ("mlp (batch size 64)", 1): {"v100": 30.0},
                             ("other (batch size 16)", 1): {"v100": 5.0}})
    tracker = ThroughputTracker(("v100",), given=given)
    tracker.add("mlp", 1)
    table = tracker.table()
    assert table.has("mlp (batch size 64)", 1) and table.get("mlp (batch size 64)", 1, "v100") == 30.0
    assert not table.has("other (batch size 16)", 1)


def test_an_infinite_noise_scale_is_measured_where_the_true_gradient_vanished():
    assert merges.measured_noise({"noise_scale": 12.0, "grad_sqr": 1.0, "grad_var": 12.0}) == 12.0
    assert merges.measured_noise({"grad_sqr": -0.01, "grad_var": 9.0}) == math.inf
    assert merges.measured_noise({"loss": 1.0}) is None
    meter = _meter_with_merge(2.0, [1.5, 1.7], math.inf)
    meter.lease_started(5, LeaseOutcome(ok=True, first_metrics={HOLDOUT: 1.2}))
    (g,) = meter.drain()
    assert g.rho == pytest.approx(2.0 / 2)  # data-parallel at the summed batch: worth both copies
    (e,) = meter.events  # type: ignore[attr-defined]
    assert e["noise_scale"] is None and e["noise_dominated"] is True


def test_the_executor_puts_the_lease_batch_on_the_spec(table, tmp_path):
    from hadar.clock import WallClock
    from hadar.model.cluster import Cluster, Node
    from hadar.model.job import TrainSpec
    from hadar.runtime.emulation import SpeedRatios
    from hadar.runtime.executor import RayExecutor

    ex = RayExecutor(Cluster((Node("n", "v100", 1),)), None, WallClock(), checkpoint_dir=tmp_path,
                     ratios=SpeedRatios(table, ("v100",)))
    j = Job(0, "mlp", 1, 1000.0, train=TrainSpec(entrypoint="m.py:train", name="mlp"),
            efficiency=Efficiency(16.0, 16.0, ((0.0, 200.0),)), batch_range=(16.0, 512.0))
    info = ex.register(j)
    info.last.update(grad_sqr=-1.0, grad_var=3.0)  # the job's last lease: noise dominates
    spec = ex._spec(info, Lease(0, "mlp", 1, (0,), 1000.0, batch=512.0), 3.0, 0, None, "train")
    assert (spec.batch, spec.own_batch, spec.lr_rule, spec.noise_scale) == (512.0, 16.0, "adascale", math.inf)


def test_a_lease_at_a_chosen_batch_is_measured_as_that_batch(table):
    from hadar.model.cluster import Cluster, Node
    from hadar.runtime.bookkeeping import Bookkeeper

    tracker = ThroughputTracker(("v100",))
    book = Bookkeeper(lambda: Cluster((Node("n", "v100", 1),)), tracker, lambda e: None)
    book.observe(Lease(0, "mlp", 1, (0,), 100.0, batch=128.0), 50.0, 2.0, 2.0)
    book.observe(Lease(0, "mlp", 1, (0,), 100.0), 90.0, 3.0, 5.0)
    assert tracker.measured == {("mlp (batch size 128)", 1, "v100"): 25.0, ("mlp", 1, "v100"): 30.0}


def test_measured_merges_are_written_to_merges_csv(tmp_path):
    from hadar.runtime.outputs import write_merges

    events = [{"event": "lease", "job": 0}, {"t": 9.5, "event": "merge_gain", "job": 0, "round": 3, "copies": 2,
                                             "batch": 64.0, "start_loss": 2.0, "copy_loss": 1.6, "merged_loss": 1.2,
                                             "gain": 2.0, "rho": None, "noise_scale": None,
                                             "noise_dominated": False}]
    write_merges(events, tmp_path / "merges.csv")
    lines = (tmp_path / "merges.csv").read_text().splitlines()
    assert lines == ["job,round,t,copies,batch,start_loss,copy_loss,merged_loss,gain,rho,noise_scale,noise_dominated",
                     "0,3,9.5,2,64.0,2.0,1.6,1.2,2.0,,,False"]
    write_merges(events[:1], tmp_path / "none.csv")
    assert not (tmp_path / "none.csv").exists()


def test_time_to_target_writes_its_json_runs_and_merges(tmp_path):
    from hadar.runtime import ttt
    merge = {"round": 3, "t": 9.0, "copies": 2, "start_loss": 1.0, "copy_loss": 0.8, "merged_loss": 0.7, "gain": 1.5,
             "rho": 0.4, "noise_scale": 120.0}
    run_row = {"case": "hadare", "seed": 0, "ttt_s": 44.0, "ttt_from_first_step_s": 36.0, "cold_start_s": 8.0,
               "jct_s": 50.0, "final": 0.96, "steps": 900, "batches": [64.0, 128.0], "noise_scale": 120.0,
               "merges": [merge]}
    ttt.write({"runs": [run_row]}, tmp_path / "out")
    runs = (tmp_path / "out" / "runs.csv").read_text().splitlines()
    merges = (tmp_path / "out" / "merges.csv").read_text().splitlines()
    assert runs[0].startswith("case,seed,ttt_s,") and runs[1] == "hadare,0,44.0,36.0,8.0,50.0,0.96,900,64 128,120.0,1"
    assert merges[1] == "hadare,0,3,9.0,2,1.0,0.8,0.7,1.5,0.4,120.0"
    assert (tmp_path / "out" / "time_to_target.json").exists()
