"""Issue 40 item 4: the noise-scale fork model: its numbers, where the world applies it, its settings."""

from __future__ import annotations

import json
import math

import pytest

from hadar.cli import main
from hadar.config import parse_cluster
from hadar.errors import InputError
from hadar.mechanism.ledger import JobLedger
from hadar.model import fork_model
from hadar.model.efficiency import Efficiency
from hadar.model.fork_efficiency import ForkEfficiency
from hadar.model.fork_model import ForkModel
from hadar.model.job import Job
from hadar.model.plan import Lease, RoundPlan
from hadar.model.world import World
from hadar.sim.executor import SimulatedExecutor
from hadar.sim.run import simulate

R18 = "ResNet-18 (batch size 64)"  # family default: Bn 290 from progress 0, 1,900 from 0.1, ..., 7,400 from 0.5


def test_scale_out_is_data_parallelism_at_the_summed_batch_times_rho() -> None:
    m = ForkModel()
    assert m.factor(R18, 1, 0.0) == 1.0
    assert m.factor(R18, 2, 0.0) == pytest.approx(0.8 * (290 + 64) / (290 + 2 * 64))  # rho 0.8 early
    assert m.factor(R18, 4, 0.5) == pytest.approx(1.0 * (7400 + 64) / (7400 + 4 * 64))  # rho 1 from a quarter on
    assert m.factor(R18, 3, 0.24) == pytest.approx(0.8 * (1900 + 64) / (1900 + 3 * 64))
    # no noise scale known (A3C names no batch): Bn = 0, k copies worth one
    assert m.factor("A3C", 4, 0.5) == pytest.approx(0.25)
    # a profile gives the world the job's own noise scale and batch
    prof = Efficiency(16.0, 32.0, ((0.0, 100.0), (0.5, math.inf)))
    assert m.factor(R18, 2, 0.1, prof) == pytest.approx(0.8 * (100 + 32) / (100 + 64))
    assert m.factor(R18, 2, 0.6, prof) == 1.0  # Bn infinite: no loss to the summed batch
    # ... never a policy's estimate: the family default stands in
    est = m.for_estimate()
    assert est.factor(R18, 2, 0.1, prof) == pytest.approx(0.8 * (1900 + 64) / (1900 + 128))
    # a late fork is worth more than an early one (Bn grows over training)
    assert m.factor(R18, 4, 0.0) < m.factor(R18, 4, 0.3) < m.factor(R18, 4, 0.8)


def test_split_keeps_the_jobs_batch_credited_rho() -> None:
    m = ForkModel(mode="split")
    assert m.factor(R18, 1, 0.0) == 1.0
    assert m.factor(R18, 4, 0.0) == 0.8 and m.factor(R18, 2, 0.9) == 1.0
    assert m.factor("A3C", 3, 0.0) == 0.8


def test_a_policys_rate_factor_takes_off_the_merge_time() -> None:
    m = ForkModel(merge_s=36.0)
    assert m.rate_factor(R18, 2, 0.0, 360.0) == pytest.approx(0.9 * m.factor(R18, 2, 0.0))
    assert m.rate_factor(R18, 1, 0.0, 360.0) == 1.0


def _two_copies(ledger: JobLedger, now: float, jt: str = R18) -> RoundPlan:
    rec = ledger.active[0]
    leases = tuple(Lease(0, jt, 4, gpus, rec.remaining, copy=c) for c, gpus in enumerate([(0, 1), (2, 3)]))
    return RoundPlan(now, 360.0, leases)


def test_the_world_credits_copies_by_the_model_after_the_merge(table) -> None:
    """Two copies (2 V100, 2 K80) of a ResNet-18 job at progress 0: each copy steps from 5 s on (the merge), its
    steps credited rho 0.8 x (290 + 64) / (290 + 128); the round ends when the slower copy's last step does."""
    cluster = parse_cluster("v100=2,k80=2", gpus_per_node=2)
    r_v, r_k = table.get(R18, 2, "v100"), table.get(R18, 2, "k80")
    eff = 0.8 * 354 / 418
    ledger = JobLedger(cluster, table, 360.0)
    ledger.add(Job(0, R18, 4, 1e7))
    ex = SimulatedExecutor(cluster, table, World(fork_efficiency=ForkModel()))
    ex.admit([Job(0, R18, 4, 1e7)])
    report = ex.run_round(_two_copies(ledger, 0.0))
    n_v, n_k = math.floor(eff * r_v * 355), math.floor(eff * r_k * 355)
    assert [r.steps for r in report.results] == [n_v, n_k]
    assert [r.end_s for r in report.results] == pytest.approx([5 + n_v / (eff * r_v), 5 + n_k / (eff * r_k)])
    split = SimulatedExecutor(cluster, table, World(fork_efficiency=ForkModel(mode="split", merge_s=0.0)))
    split.admit([Job(0, R18, 4, 1e7)])
    assert [r.steps for r in split.run_round(_two_copies(ledger, 0.0)).results] == [
        math.floor(0.8 * r_v * 360), math.floor(0.8 * r_k * 360)]


def test_late_in_training_the_world_reads_the_jobs_progress(table) -> None:
    """The same job 60 % done: Bn 7,400 and rho 1, so the copies get (7400 + 64) / (7400 + 128) of their steps."""
    cluster = parse_cluster("v100=2,k80=2", gpus_per_node=2)
    r_v = table.get(R18, 2, "v100")
    ledger = JobLedger(cluster, table, 360.0)
    ledger.add(Job(0, R18, 4, 1e7))
    ex = SimulatedExecutor(cluster, table, World(fork_efficiency=ForkModel(merge_s=0.0)))
    ex.admit([Job(0, R18, 4, 1e7)])
    plan = RoundPlan(0.0, 360.0, tuple(Lease(0, R18, 4, g, 4e6, copy=c) for c, g in enumerate([(0, 1), (2, 3)])))
    assert ex.run_round(plan).results[0].steps == math.floor(7464 / 7528 * r_v * 360)


def test_a_profiled_job_gets_its_own_noise_scale_and_r(table) -> None:
    """A profiled job (reference batch 16, batch 64, Bn 290): the copies' table steps x rho x eff(2) x r(64)."""
    cluster = parse_cluster("v100=2,k80=2", gpus_per_node=2)
    r_v = table.get(R18, 2, "v100")
    prof = Efficiency(16.0, 64.0, ((0.0, 290.0),))
    j = Job(0, R18, 4, 1e7, efficiency=prof)
    ledger = JobLedger(cluster, table, 360.0)
    ledger.add(j)
    ex = SimulatedExecutor(cluster, table, World(fork_efficiency=ForkModel(merge_s=0.0)))
    ex.admit([j])
    gain = 4 * (290 + 16) / (290 + 64)
    assert ex.run_round(_two_copies(ledger, 0.0)).results[0].steps == math.floor(
        0.8 * 354 / 418 * gain * r_v * 360)


def test_names_and_files(tmp_path) -> None:
    assert fork_model.load("noise-scale") == ForkModel()
    assert fork_model.load("noise-scale-split").mode == "split"
    assert isinstance(fork_model.load("calibrated"), ForkEfficiency)
    f = tmp_path / "m.json"
    f.write_text(json.dumps({"model": "noise_scale", "mode": "split", "rho": [[0, 0.5], [0.5, 1.2]], "merge_s": 2}))
    m = fork_model.load(f)
    assert isinstance(m, ForkModel) and m.rho == ((0.0, 0.5), (0.5, 1.2)) and m.merge_s == 2.0
    assert m.rho_at(0.49) == 0.5 and m.rho_at(0.5) == 1.2
    for bad, says in [({"model": "noise_scale", "rho": [[0.1, 0.5]]}, "first rho point"),
                      ({"model": "noise_scale", "rho": [[0, 2.0]]}, "(0, 1.5]"),
                      ({"model": "noise_scale", "merge_s": -1}, "merge_s"),
                      ({"model": "noise_scale", "mode": "sideways"}, "mode"),
                      ({"model": "noise_scale", "rh0": 1}, "unknown key")]:
        f.write_text(json.dumps(bad))
        with pytest.raises(InputError, match=says.replace("(", r"\(").replace("]", r"\]").replace("[", r"\[")):
            fork_model.load(f)


def test_a_bad_model_file_is_one_line_exit_2(tmp_path, capsys) -> None:
    f = tmp_path / "m.json"
    f.write_text(json.dumps({"model": "noise_scale", "merge_s": "soon"}))
    assert main(["simulate", "--fork-efficiency", str(f), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "merge_s" in err[0]


def _workload() -> list[Job]:
    kinds = [("ResNet-50 (batch size 64)", 1), ("LM (batch size 20)", 1), ("Transformer (batch size 32)", 2),
             ("Recommendation (batch size 512)", 1), ("A3C", 1), ("ResNet-18 (batch size 32)", 1)]
    return [Job(i, jt, k, 3e4 * (1 + i % 3), arrival_s=900.0 * i) for i, (jt, k) in enumerate(kinds * 2)]


def test_a_noise_scale_world_is_recorded_and_costs_an_ideal_planner() -> None:
    from hadar.model.throughput import ThroughputTable

    table, cluster = ThroughputTable.load(), parse_cluster("4:4:4")
    ideal = simulate(_workload(), cluster, table, "hadare").summary
    world = World(fork_efficiency=ForkModel())
    got = simulate(_workload(), cluster, table, "hadare", world=world).summary
    assert got["fork_efficiency"] == "noise-scale"
    assert got["world"]["fork_model"] == {"model": "noise-scale", "mode": "scale-out", "rho": [[0.0, 0.8], [0.25, 1.0]],
                                          "merge_s": 5.0}
    assert got["avg_jct_s"] > ideal["avg_jct_s"]
    # a world without forks (Hadar) is the same in every fork setting
    plain = simulate(_workload(), cluster, table, "hadar").summary
    again = simulate(_workload(), cluster, table, "hadar", world=world).summary
    assert again["avg_jct_s"] == plain["avg_jct_s"] and again["makespan_s"] == plain["makespan_s"]


@pytest.mark.parametrize("name", ["noise-scale", "noise-scale-split"])
def test_compare_in_a_noise_scale_world(name: str, capsys) -> None:
    assert main(["compare", "--policies", "hadar,hadare", "--trace", "small_test", "--cluster", "4:4:4",
                 "--fork-efficiency", name, "--no-ftf"]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[0] for line in out.splitlines()[1:5]]
    assert rows == ["policy", "hadar", "hadare", "hadare-calibrated"]
    mode = "split" if name.endswith("split") else "scale-out"
    assert f"world: {mode} forks credited as data parallelism" in out
