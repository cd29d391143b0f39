"""Issue 17 item 5: the fork efficiency: its model, where the simulator applies it, its file, its calibration maths."""

from __future__ import annotations

import json
import math

import pytest

from hadar.config import parse_cluster
from hadar.errors import InputError
from hadar.mechanism.ledger import JobLedger
from hadar.model.fork_efficiency import (
    IDEAL,
    ForkEfficiency,
    efficiency,
    fit_per_doubling,
    samples_to_reach,
)
from hadar.model.job import Job
from hadar.model.plan import Lease, RoundPlan
from hadar.model.world import World
from hadar.sim.executor import SimulatedExecutor
from hadar.sim.run import simulate
from tests.helpers import job

R18 = "ResNet-18 (batch size 64)"
FAMILIES = ("image", "lstm-lm", "transformer", "recommendation")
MACHINE = {"wall_s", "decision_s_per_round", "solve_s_total"}


def test_the_model_is_e_to_the_log2_k_per_family() -> None:
    eff = ForkEfficiency({"image": 0.8, "lstm-lm": 0.5})
    assert eff.factor(R18, 1) == 1.0
    assert eff.factor(R18, 2) == pytest.approx(0.8)
    assert eff.factor(R18, 4) == pytest.approx(0.64)
    assert eff.factor("ResNet-50 (batch size 16)", 8) == pytest.approx(0.512)
    assert eff.factor("CycleGAN", 3) == pytest.approx(0.8 ** math.log2(3))
    assert eff.factor("LM (batch size 20)", 2) == pytest.approx(0.5)
    assert eff.factor("LSTM-LM (batch size 20)", 4) == pytest.approx(0.25)  # the runtime's own workload
    assert eff.factor("Transformer (batch size 16)", 4) == 1.0  # family not calibrated: the default (1)
    assert eff.factor("Some new model", 4) == 1.0
    assert ForkEfficiency({"image": 0.8}, default=0.9).factor("Transformer (batch size 16)", 2) == pytest.approx(0.9)
    assert IDEAL.ideal and ForkEfficiency(dict.fromkeys(FAMILIES, 1.0)).ideal and not eff.ideal
    assert all(IDEAL.factor(R18, k) == 1.0 for k in range(1, 50))


def _two_copies(cluster, ledger, now):
    rec = ledger.active[0]
    leases = tuple(Lease(0, R18, 4, gpus, rec.remaining, copy=c) for c, gpus in enumerate([(0, 1), (2, 3)]))
    return RoundPlan(now, 360.0, leases)


def test_a_factor_below_one_slows_forked_progress_exactly_as_the_model_says(table) -> None:
    """Two copies (2 V100 on node 0, 2 K80 on node 1) of a ResNet-18 job, e = 0.8 for images: each
    round credits floor(360 x 0.8 x rate) steps per copy, and the job finishes when the credited
    steps reach its size, at start + remaining / (0.8 x (r_v + r_k))."""
    cluster = parse_cluster("v100=2,k80=2", gpus_per_node=2)
    r_v, r_k = table.get(R18, 2, "v100"), table.get(R18, 2, "k80")
    total = 1.5 * 360 * (r_v + r_k)  # 1.5 ideal rounds: 1.875 rounds at 0.8
    ledger = JobLedger(cluster, table, 360.0)
    ledger.add(job(0, job_type=R18, sf=4, steps=total))
    ex = SimulatedExecutor(cluster, table, World(fork_efficiency=ForkEfficiency({"image": 0.8})))
    plan = _two_copies(cluster, ledger, 0.0)
    report = ex.run_round(plan)
    ledger.apply(plan, report)
    first = math.floor(360 * 0.8 * r_v) + math.floor(360 * 0.8 * r_k)
    assert sum(r.steps for r in report.results) == pytest.approx(first)
    assert report.end_s == pytest.approx(360.0, abs=1.0)
    plan = _two_copies(cluster, ledger, report.end_s)
    report2 = ex.run_round(plan)
    assert ledger.apply(plan, report2).ended == (0,)
    assert ledger.records[0].finish_s == pytest.approx(report.end_s + (total - first) / (0.8 * (r_v + r_k)))
    # one copy alone is not forked: full credit
    ledger = JobLedger(cluster, table, 360.0)
    ledger.add(job(0, job_type=R18, sf=4, steps=total))
    alone = RoundPlan(0.0, 360.0, (Lease(0, R18, 4, (0, 1), total),))
    assert ex.run_round(alone).results[0].steps == math.floor(360 * r_v)


def test_four_copies_get_the_factor_squared(table) -> None:
    cluster = parse_cluster("v100=4")
    rate = table.rate_on(R18, 1, "v100")
    leases = tuple(Lease(0, R18, 4, (g,), 1e9, copy=g) for g in range(4))
    report = SimulatedExecutor(cluster, table, World(fork_efficiency=ForkEfficiency({"image": 0.9}))).run_round(
        RoundPlan(0.0, 360.0, leases))
    assert [r.steps for r in report.results] == [math.floor(360 * rate * 0.81)] * 4


def _workload() -> list[Job]:
    kinds = [("ResNet-50 (batch size 64)", 1), ("LM (batch size 20)", 1), ("Transformer (batch size 32)", 2),
             ("Recommendation (batch size 512)", 1), ("A3C", 1), ("CycleGAN", 1)]
    return [Job(i, jt, k, 3e4 * (1 + i % 3), arrival_s=900.0 * i) for i, (jt, k) in enumerate(kinds * 2)]


@pytest.mark.parametrize("policy", ["hadare", "hadar", "max_min_fairness_perf"])
def test_factor_one_leaves_every_summary_unchanged(policy: str) -> None:
    from hadar.model.throughput import ThroughputTable

    table, cluster = ThroughputTable.load(), parse_cluster("4:4:4")
    plain = simulate(_workload(), cluster, table, policy).summary
    ones = simulate(_workload(), cluster, table, policy,
                    **_world(ForkEfficiency(dict.fromkeys(FAMILIES, 1.0), source="ones.json"))).summary
    assert {k: v for k, v in ones.items() if k not in MACHINE} == {k: v for k, v in plain.items() if k not in MACHINE}


def test_a_calibrated_hadare_is_slower_and_says_so() -> None:
    from hadar.model.throughput import ThroughputTable

    table, cluster = ThroughputTable.load(), parse_cluster("4:4:4")
    ideal = simulate(_workload(), cluster, table, "hadare").summary
    cal = simulate(_workload(), cluster, table, "hadare",
                   **_world(ForkEfficiency(dict.fromkeys(FAMILIES, 0.7), source="c.json"))).summary
    assert cal["fork_efficiency"] == "c.json" and "fork_efficiency" not in ideal
    assert cal["avg_jct_s"] > ideal["avg_jct_s"]
    assert cal["ttd_forking_bound_s"] == ideal["ttd_forking_bound_s"]  # the limit stays the ideal one


# ---- the calibration's conversion ------------------------------------------------------------
SAMPLES = [0, 100, 200, 300, 400]
LOSS = [2.0, 0.8, 0.5, 0.3, 0.25]


def test_samples_to_reach_interpolates_on_the_unforked_curve() -> None:
    assert samples_to_reach(SAMPLES, LOSS, 0.4, higher_is_better=False) == pytest.approx(250.0)
    assert samples_to_reach(SAMPLES, LOSS, 0.8, higher_is_better=False) == pytest.approx(100.0)
    assert samples_to_reach(SAMPLES, LOSS, 3.0, higher_is_better=False) == 0.0  # worse than untrained
    assert samples_to_reach(SAMPLES, LOSS, 0.2, higher_is_better=False) is None  # never reached
    acc = [0.1, 0.6, 0.5, 0.9, 0.95]  # a dip: the running best holds 0.6 until 300
    assert samples_to_reach(SAMPLES, acc, 0.7, higher_is_better=True) == pytest.approx(200 + 100 * 0.1 / 0.3)


def test_efficiency_is_the_share_of_the_samples_unforked_training_needs() -> None:
    # the forked run reached 0.4 with 400 samples; unforked needs 250: worth 62.5 %
    assert efficiency(SAMPLES, LOSS, 0.4, 400, higher_is_better=False) == pytest.approx(0.625)
    assert efficiency(SAMPLES, LOSS, 0.2, 400, higher_is_better=False) == 1.0  # better than unforked: capped
    assert efficiency(SAMPLES, LOSS, 0.25, 400, higher_is_better=False) == pytest.approx(1.0)


def test_fit_per_doubling() -> None:
    assert fit_per_doubling({2: 0.8, 4: 0.64}) == pytest.approx(0.8)
    assert fit_per_doubling({2: 0.9, 4: 0.7}) == pytest.approx(math.exp((math.log(0.9) + 2 * math.log(0.7)) / 5))
    assert fit_per_doubling({2: 1.2, 4: 1.0}) == 1.0  # never better than ideal


# ---- the file -----------------------------------------------------------------------------------
def test_the_file_round_trips(tmp_path) -> None:
    p = tmp_path / "eff.json"
    p.write_text(json.dumps({"model": "per_doubling", "families": {"image": {"per_doubling": 0.9, "measured": {}},
                                                                   "rl": {"per_doubling": 0.5}},
                             "job_types": {"A3C": "rl"}, "default": 0.95, "calibration": {"anything": 1}}))
    eff = ForkEfficiency.load(p)
    assert eff.factor("A3C", 2) == 0.5 and eff.factor(R18, 2) == 0.9 and eff.factor("LM (batch size 5)", 2) == 0.95
    assert eff.source == str(p)


@pytest.mark.parametrize(("text", "message"), [
    ("{", "not valid JSON"),
    ("[1]", "expected a JSON object"),
    ('{"families": {}}', "'families' must be a non-empty object"),
    ('{"families": {"image": {"per_doubling": 1.5}}}', "family 'image': per_doubling must be a number in (0, 1]"),
    ('{"families": {"image": {"per_doubling": 0}}}', "per_doubling must be a number in (0, 1]"),
    ('{"families": {"image": 0.9}}', "per_doubling must be a number"),
    ('{"families": {"image": {"per_doubling": 0.9}}, "bogus": 1}', "unknown key(s): bogus"),
    ('{"families": {"image": {"per_doubling": 0.9}}, "job_types": {"A3C": "rl"}}', "not in 'families': rl"),
    ('{"families": {"image": {"per_doubling": 0.9}}, "default": -1}', "default must be a number in (0, 1]"),
    ('{"model": "linear", "families": {"image": {"per_doubling": 0.9}}}', "model must be 'per_doubling'"),
])
def test_bad_files_one_line_exit_2(tmp_path, capsys, text, message) -> None:
    from hadar.cli import main

    p = tmp_path / "eff.json"
    p.write_text(text)
    with pytest.raises(InputError, match=None):
        ForkEfficiency.load(p)
    for cmd in ("simulate", "compare"):
        assert main([cmd, "--trace", "small_test", "--cluster", "4:4:4", "--fork-efficiency", str(p), "--json"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("hadar: error:") and message in err and "\n" not in err, err


def test_a_missing_file_one_line_exit_2(capsys) -> None:
    from hadar.cli import main

    assert main(["simulate", "--trace", "small_test", "--fork-efficiency", "nowhere.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "hadar: error: fork-efficiency file not found: nowhere.json"


def test_compare_adds_a_calibrated_row_for_forking_policies(tmp_path, capsys) -> None:
    from hadar.cli import main

    p = tmp_path / "eff.json"
    p.write_text(json.dumps({"families": {f: {"per_doubling": 0.7} for f in FAMILIES}}))
    assert main(["compare", "--policies", "hadar,hadare", "--trace", "small_test", "--cluster", "4:4:4",
                 "--fork-efficiency", str(p), "--json", "--no-ftf"]) == 0
    rows = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    assert list(rows) == ["hadar", "hadare", "hadare-calibrated"]
    # one world for every row; only the calibrated row's planner is told what a copy is worth there
    assert {r["world"]["fork_efficiency"] for r in rows.values()} == {str(p)}
    # on this workload the planner told the truth does better than one planning as if copies were free
    assert rows["hadare-calibrated"]["avg_jct_s"] < rows["hadare"]["avg_jct_s"] < rows["hadar"]["avg_jct_s"]


def _world(eff: ForkEfficiency) -> dict[str, object]:
    """``hadar simulate --fork-efficiency``: the world credits copies so, and the planner is told the same."""
    from hadar.model.world import World

    return {"world": World(fork_efficiency=eff), "fork_estimate": eff}
