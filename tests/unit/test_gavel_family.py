"""The rest of Gavel's policy family (issue 18, item 3): AlloX, throughput per dollar (with SLOs) and
hierarchical water filling between entities."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hadar.cli import main
from hadar.config import parse_cluster
from hadar.errors import InputError
from hadar.model import Cluster, JobView, SchedulerState, ThroughputTable
from hadar.model.job import Job
from hadar.policies import create
from hadar.policies.profiles import PolicySpec
from hadar.sim.run import simulate
from hadar.sim.trace import read_jobs

TABLE = ThroughputTable({("fast", 1): {"v100": 4.0, "p100": 2.0, "k80": 1.0},
                         ("pair", 2): {"v100": 7.0, "p100": 3.5, "k80": 1.5}}, "family")


def _state(cluster: Cluster, jobs: list[tuple[int, str, int, float, float]], now: float = 100.0,
           memo: dict | None = None, extra: dict | None = None) -> SchedulerState:
    """jobs: (id, type, GPUs, remaining steps, arrival s)."""
    views = tuple(JobView(job_id=i, job_type=jt, scale_factor=sf, priority_weight=1.0, arrival_s=arr,
                          total_steps=rem, remaining_steps=rem, throughputs=TABLE.row(jt, sf, cluster.gpu_types),
                          **(extra or {}).get(i, {}))
                  for i, jt, sf, rem, arr in jobs)
    return SchedulerState(now_s=now, round_s=360.0, cluster=cluster, jobs=views, table=TABLE, memo=memo or {})


# --- AlloX -----------------------------------------------------------------------------------------

def test_allox_starts_the_shortest_job_first_and_never_preempts_it():
    cluster = Cluster.from_counts({"v100": 1})
    a = create("allox").allocate(_state(cluster, [(0, "fast", 1, 4000.0, 0.0), (1, "fast", 1, 400.0, 50.0)]))
    # one GPU, queue positions 1 and 2: the 100 s job ahead of the 1,000 s one costs 1,200 s, not 2,100 s
    assert a.fractions.tolist() == [[0.0], [1.0]]
    assert dict(a.memo["allox"]) == {1: "v100"}
    b = create("allox").allocate(_state(cluster, [(1, "fast", 1, 400.0, 50.0), (2, "fast", 1, 4.0, 90.0)],
                                        memo=dict(a.memo)))
    assert b.fractions.tolist() == [[1.0], [0.0]]  # the started job keeps its GPU; the shorter one waits


def test_allox_moves_a_started_job_to_a_faster_free_type_unless_gavel_compat():
    cluster = Cluster.from_counts({"v100": 1, "k80": 1})
    st = _state(cluster, [(0, "fast", 1, 4000.0, 0.0)], memo={"allox": {0: "k80"}})
    assert create("allox").allocate(st).fractions.tolist() == [[1.0, 0.0]]
    assert create("allox", move_up=False).allocate(st).fractions.tolist() == [[0.0, 1.0]]


def test_allox_starts_a_multi_gpu_job_only_where_its_gang_fits():
    cluster = Cluster.from_counts({"v100": 2, "k80": 1})
    st = _state(cluster, [(0, "pair", 2, 700.0, 0.0), (1, "fast", 1, 40.0, 0.0)])
    x = create("allox").allocate(st).fractions
    # matched: the 2-GPU job (200 GPU-s on V100s) heads one V100, the 1-GPU job (10 s) the other; the gang
    # takes both V100s, so the 1-GPU job waits for the next solve (the round mechanism lends it the idle K80)
    assert x.tolist() == [[1.0, 0.0], [0.0, 0.0]]
    alone = create("allox").allocate(_state(cluster, [(0, "pair", 2, 700.0, 0.0)], memo={"allox": {}}))
    assert alone.fractions.tolist() == [[1.0, 0.0]]
    on_k80 = _state(Cluster.from_counts({"v100": 1, "k80": 2}), [(0, "pair", 2, 700.0, 0.0)])
    assert create("allox").allocate(on_k80).fractions.tolist() == [[0.0, 1.0]]  # 1 V100 cannot hold it


@pytest.mark.parametrize("trace", ["small_test", "artifact_evaluation", "highmem_test"])
def test_allox_runs_mixed_one_and_two_gpu_traces_to_completion(trace):
    s = simulate(read_jobs(trace), parse_cluster("4:4:4"), ThroughputTable.load(), "allox").summary
    assert s["jobs_completed"] == s["jobs"]


def test_allox_medium_test_outside_gavel_compat():
    s = simulate(read_jobs("medium_test"), parse_cluster("4:4:4"), ThroughputTable.load(), "allox").summary
    assert (round(s["avg_jct_s"], 1), round(s["makespan_s"], 1)) == (12639.3, 27947.6)


# --- throughput per dollar -------------------------------------------------------------------------

COST = "max_sum_throughput_normalized_by_cost_perf"


def test_cost_policy_buys_the_most_steps_per_dollar():
    cluster = Cluster.from_counts({"v100": 1, "p100": 1, "k80": 1})
    st = _state(cluster, [(0, "fast", 1, 1e4, 0.0)])
    # Gavel's prices: 4/0.74 = 5.4, 2/0.43 = 4.65, 1/0.135 = 7.4 steps per dollar-second: the K80
    assert create(COST).allocate(st).fractions[0].tolist() == pytest.approx([0.0, 0.0, 1.0], abs=1e-5)
    pricey_k80 = replace(cluster, prices=(("k80", 0.5),))
    assert create(COST).allocate(replace(st, cluster=pricey_k80)).fractions[0].tolist() == \
        pytest.approx([1.0, 0.0, 0.0], abs=1e-5)


def test_slo_variant_gives_a_job_the_rate_its_deadline_needs():
    cluster = Cluster.from_counts({"v100": 1, "k80": 1})
    jobs = [(0, "fast", 1, 4000.0, 0.0), (1, "fast", 1, 4000.0, 0.0)]
    plain = create(COST).allocate(_state(cluster, jobs)).fractions
    # job 0: 1,000 s alone on a V100, SLO factor 1.5 -> deadline 1,500 s; at t=100 it needs 4000/1400 steps/s
    st = _state(cluster, jobs, extra={0: {"slo": 1.5}})
    x = create(COST + "_SLOs").allocate(st).fractions
    rate0 = float(x[0] @ np.array([4.0, 1.0]))
    assert rate0 >= 4000.0 / 1400.0 * (1 - 1e-6)
    assert float(plain[0] @ np.array([4.0, 1.0])) < 4000.0 / 1400.0  # without the SLO it would not get it
    # an SLO no allocation can meet: the allocation without SLOs (Gavel's fallback)
    hopeless = _state(cluster, jobs, extra={0: {"slo": 0.01}, 1: {"slo": 0.01}})
    assert create(COST + "_SLOs").allocate(hopeless).fractions == pytest.approx(plain, abs=1e-6)


def test_slo_fallback_drops_the_fewest_slos_or_all():
    cluster = Cluster.from_counts({"v100": 1})
    jobs = [(0, "fast", 1, 4000.0, 0.0), (1, "fast", 1, 4000.0, 0.0)]
    # each needs 4000 / (1.4 x 1000 - 100) = 3.08 steps/s of the V100's 4: one SLO can be met, not both
    st = _state(cluster, jobs, extra={0: {"slo": 1.4}, 1: {"slo": 1.4}})
    x = create(COST + "_SLOs").allocate(st).fractions[:, 0]
    assert 4.0 * x[1] >= 4000.0 / 1300.0 * (1 - 1e-6)  # equally hard: job 0's is dropped (lowest id first)
    x = create(COST + "_SLOs", slo_fallback="all").allocate(st).fractions[:, 0]
    assert x.tolist() == pytest.approx([0.5, 0.5], abs=1e-5)  # Gavel's: as if there were no SLOs


def test_cluster_file_prices_and_the_runs_cost(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("nodes:\n  - {name: v, gpu_type: v100, gpus: 1}\nprices: {v100: 2.0}\n")
    cluster = parse_cluster(str(f))
    assert cluster.price("v100") == 2.0
    s = simulate([Job(0, "ResNet-50 (batch size 64)", 1, 10_000.0)], cluster, ThroughputTable.load(), COST).summary
    assert s["cost_usd"] == pytest.approx(s["makespan_s"] * 2.0 / 3600.0)
    assert "cost_usd" not in simulate([Job(0, "ResNet-50 (batch size 64)", 1, 10_000.0)], parse_cluster("v100=1"),
                                      ThroughputTable.load(), COST).summary


def test_prices_outlive_node_changes():
    from hadar.mechanism.ledger import JobLedger
    from hadar.model.cluster import Node

    priced = replace(Cluster.from_counts({"v100": 2, "k80": 1}), prices=(("k80", 0.2),))
    ledger = JobLedger(priced, TABLE, 360.0)
    ledger.set_cluster(Cluster(priced.nodes, frozenset({"k80-0"})).with_node(Node("v100-9", "v100", 1)))
    assert ledger.cluster.price("k80") == 0.2 and ledger.cluster.count("v100") == 3


@pytest.mark.parametrize(("prices", "message"), [
    ("{a100: 3}", "c.yaml: prices: unknown GPU type 'a100' (the cluster has v100)"),
    ("{v100: -1}", "c.yaml: prices: v100 must be a positive number of $ per GPU-hour, got -1"),
    ("[1, 2]", "prices must be a mapping of GPU type to $ per GPU-hour"),
])
def test_bad_prices_one_line_exit_2(tmp_path, capsys, prices, message):
    f = tmp_path / "c.yaml"
    f.write_text(f"nodes:\n  - {{name: v, gpu_type: v100, gpus: 1}}\nprices: {prices}\n")
    assert main(["simulate", "--trace", "small_test", "--cluster", str(f), "--policy", COST]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_a_type_without_a_price_is_an_input_error():
    cluster = Cluster.from_counts({"a100": 1})
    table = ThroughputTable({("fast", 1): {"a100": 4.0}}, "a100")
    st = SchedulerState(now_s=0.0, round_s=360.0, cluster=cluster, table=table,
                        jobs=(JobView(0, "fast", 1, 1.0, 0.0, 10.0, 10.0, (4.0,)),))
    with pytest.raises(InputError, match="no price for GPU type 'a100'"):
        create(COST).allocate(st)


# --- hierarchical water filling --------------------------------------------------------------------

def _team_jobs() -> list[Job]:
    jt = "ResNet-50 (batch size 64)"
    steps = ThroughputTable.load().get(jt, 1, "v100") * 3600 * 20  # 20 h alone on a V100
    return [Job(i, jt, 1, steps, entity="a") for i in range(5)] + \
        [Job(5 + i, jt, 1, steps, entity="b") for i in range(10)]


def _gpu_s_until_first_finish(events) -> dict[str, float]:
    first = min(e["t"] for e in events if e["event"] == "finish")
    out = {"a": 0.0, "b": 0.0}
    for e in events:
        if e["event"] == "round" and e["end"] <= first:
            for jid, _copy, gpus, _ext in e["leases"]:
                out["a" if jid < 5 else "b"] += len(gpus) * (e["end"] - e["t"])
    return out


def test_entities_share_gpu_time_in_their_weights_ratio():
    """Team a (weight 2, 5 jobs) and team b (weight 1, 10 jobs) on 6 V100s: a gets 4 GPUs, b 2, until the
    first job finishes; plain water filling splits by job (2 : 4)."""
    profiles = {"teams": PolicySpec("teams", "hierarchical_water_filling_perf", {"entity_weights": {"a": 2, "b": 1}})}
    cluster, table = parse_cluster("v100=6"), ThroughputTable.load()
    teams = simulate(_team_jobs(), cluster, table, "teams", profiles=profiles, record_events=True)
    share = _gpu_s_until_first_finish(teams.events)
    assert share["a"] / share["b"] == pytest.approx(2.0, rel=0.01)
    assert (round(share["a"]), round(share["b"])) == (359613, 180346)
    plain = simulate(_team_jobs(), cluster, table, "max_min_fairness_water_filling_perf", record_events=True)
    share = _gpu_s_until_first_finish(plain.events)
    assert share["a"] / share["b"] == pytest.approx(0.5, rel=0.01)


def test_hierarchical_allocation_levels():
    """Within an entity jobs split its share by priority weight; an entity whose jobs are capped at one
    GPU each gives the rest to the others."""
    cluster = Cluster.from_counts({"v100": 4})
    jobs = [(i, "fast", 1, 1e4, 0.0) for i in range(4)]
    views = {0: {"entity": "a", "priority_weight": 3.0}, 1: {"entity": "a"}, 2: {"entity": "b"}, 3: {"entity": "b"}}
    st = _state(cluster, jobs)
    st = replace(st, jobs=tuple(replace(j, **views[j.job_id]) for j in st.jobs))
    x = create("hierarchical_water_filling_perf", entity_weights={"a": 1, "b": 3}).allocate(st).fractions[:, 0]
    # b: weight 3 of 4 -> 3 GPUs, but 2 jobs hold at most 2; a gets 2: 1.5 : 0.5 by priority weight, capped at 1
    assert x.tolist() == pytest.approx([1.0, 1.0, 1.0, 1.0], abs=1e-4)
    x = create("hierarchical_water_filling_perf", entity_weights={"a": 1, "b": 3}).allocate(
        replace(st, cluster=Cluster.from_counts({"v100": 2}))).fractions[:, 0]
    # 2 GPUs: b 1.5 (0.75 each), a 0.5 split 3:1 -> 0.375, 0.125
    assert x.tolist() == pytest.approx([0.375, 0.125, 0.75, 0.75], abs=1e-4)


def test_entity_columns_in_a_job_list(tmp_path):
    f = tmp_path / "jobs.csv"
    f.write_text("job_type,total_steps,entity,slo\nA3C,100,team-a,2\nA3C,100,,\n")
    jobs = read_jobs(str(f))
    assert [(j.entity, j.slo) for j in jobs] == [("team-a", 2.0), ("", None)]


def test_bad_entity_weight_is_an_input_error():
    with pytest.raises(InputError, match="weight of 'a' must be a positive number"):
        create("hierarchical_water_filling_perf", entity_weights={"a": -1})
    with pytest.raises(InputError, match="entity_weights must be a mapping"):
        create("hierarchical_water_filling_perf", entity_weights=[1])
