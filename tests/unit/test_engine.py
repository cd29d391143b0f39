from __future__ import annotations

import math

import pytest

from hadar import engine
from hadar.config import parse_cluster
from hadar.errors import InfeasibleError, InputError
from hadar.mechanism.events import Batching
from hadar.policies.base import PolicyTraits
from hadar.sim.run import simulate
from tests.helpers import FastestTypePolicy, job

R50 = "ResNet-50 (batch size 64)"


def test_single_job_jct_is_steps_over_rate(table):
    rate = table.get(R50, 1, "v100")
    steps = 1000 * rate  # about 2.8 rounds of 360 s
    r = simulate([job(0, steps=steps)], parse_cluster("1:0:0"), table, FastestTypePolicy())
    assert r.summary["jobs_completed"] == 1
    assert r.summary["avg_jct_s"] == pytest.approx(1000.0, rel=1e-9)
    assert r.summary["rounds"] == math.ceil(1000 / 360)
    assert r.summary["utilization"] == pytest.approx(1.0)
    assert r.summary["lease_extension_rate"] == pytest.approx(1.0)  # kept its GPU every round


def test_job_finishes_exactly_when_progress_reaches_steps(table):
    rate = table.get(R50, 1, "v100")
    steps = math.floor(rate * 360) * 2  # exactly two full rounds
    r = simulate([job(0, steps=steps)], parse_cluster("1:0:0"), table, FastestTypePolicy(), record_events=True)
    rounds = [e for e in r.events if e["event"] == "round"]
    assert len(rounds) == 2
    assert r.rows[0].finish_s == pytest.approx(steps / rate)


def test_arrival_mid_round_waits_for_boundary_and_counts_from_arrival(table):
    rate = table.get(R50, 1, "v100")
    jobs = [job(0, steps=rate * 360 * 3), job(1, steps=rate * 100, arrival=100.0)]
    r = simulate(jobs, parse_cluster("2:0:0"), table, FastestTypePolicy())
    by_id = {row.job_id: row for row in r.rows}
    first_round_end = math.floor(rate * 360) / rate  # rounds end at the last micro-task's end
    assert by_id[1].first_start_s == pytest.approx(first_round_end)
    assert by_id[1].queuing_delay_s == pytest.approx(first_round_end - 100.0)


class AdmittingPolicy(FastestTypePolicy):
    traits = PolicyTraits(cut_rounds=True, resolve="every_round")


def test_cut_rounds_starts_a_job_on_idle_gpus_at_once(table):
    rate = table.get(R50, 1, "v100")
    jobs = [job(0, steps=rate * 360 * 3), job(1, steps=rate * 100, arrival=100.0)]
    r = simulate(jobs, parse_cluster("2:0:0"), table, AdmittingPolicy(), record_events=True)
    by_id = {row.job_id: row for row in r.rows}
    assert by_id[1].first_start_s == pytest.approx(100.0) and by_id[1].queuing_delay_s == 0.0
    assert by_id[1].jct_s == pytest.approx(100.0, abs=1 / rate)
    # job 0 lost nothing: the cut round is extended on the same GPU, and it finishes as if alone
    assert by_id[0].jct_s == pytest.approx(360 * 3, abs=2 / rate)
    assert r.summary["restarts"] == 0


def test_cut_rounds_hands_a_finished_jobs_gpu_to_a_waiting_job_at_once(table):
    rate = table.get(R50, 1, "v100")
    # job 1 keeps its GPU busy all round; job 0 finishes at 100 s; job 2 (arrived at 10 s) waits for a GPU
    jobs = [job(0, steps=math.floor(rate * 100)), job(1, steps=rate * 360 * 3), job(2, steps=rate * 360, arrival=10.0)]
    cut = {row.job_id: row for row in simulate(jobs, parse_cluster("2:0:0"), table, AdmittingPolicy()).rows}
    assert cut[2].first_start_s == pytest.approx(cut[0].finish_s, abs=1e-6)
    whole = {row.job_id: row for row in simulate(jobs, parse_cluster("2:0:0"), table, FastestTypePolicy()).rows}
    assert whole[2].first_start_s > 300.0  # Gavel's mechanism: the freed GPU idles until the round ends


def test_cut_rounds_keeps_whole_rounds_when_no_gpu_is_idle(table):
    rate = table.get(R50, 1, "v100")
    jobs = [job(0, steps=rate * 360 * 3), job(1, steps=rate * 100, arrival=100.0)]
    r = simulate(jobs, parse_cluster("1:0:0"), table, AdmittingPolicy(), record_events=True)
    first = next(e for e in r.events if e["event"] == "round")
    assert first["end"] - first["t"] == pytest.approx(math.floor(rate * 360) / rate)  # not cut at t = 100
    assert {row.job_id: row for row in r.rows}[1].first_start_s > 100.0


def test_an_arrival_ends_a_round_no_sooner_than_the_spacing(table, monkeypatch):
    """The batching of arrivals (engine.BATCHING, the default of Engine's ``batching``): from 0 active jobs,
    100 s per active job and one job active, an arrival at 50 s on an idle GPU starts at 100 s, one at
    150 s at once."""
    monkeypatch.setattr(engine, "BATCHING", Batching(from_jobs=0, s_per_job=100.0))
    rate = table.get(R50, 1, "v100")
    jobs = [job(0, steps=rate * 360 * 3), job(1, steps=rate * 10, arrival=50.0)]
    rows = {row.job_id: row for row in simulate(jobs, parse_cluster("2:0:0"), table, AdmittingPolicy()).rows}
    assert rows[1].first_start_s == pytest.approx(100.0)
    jobs[1] = job(1, steps=rate * 10, arrival=150.0)
    rows = {row.job_id: row for row in simulate(jobs, parse_cluster("2:0:0"), table, AdmittingPolicy()).rows}
    assert rows[1].first_start_s == pytest.approx(150.0)


def test_a_completion_a_waiting_job_needs_ends_the_round_within_the_spacing(table, monkeypatch):
    """The batching holds arrivals back, not a waiting job: it gets the GPU the moment a job finishes."""
    monkeypatch.setattr(engine, "BATCHING", Batching(from_jobs=0, s_per_job=100.0))
    rate = table.get(R50, 1, "v100")
    jobs = [job(0, steps=math.floor(rate * 30)), job(1, steps=rate * 360 * 3), job(2, steps=rate * 360, arrival=10.0)]
    rows = {row.job_id: row for row in simulate(jobs, parse_cluster("2:0:0"), table, AdmittingPolicy()).rows}
    assert rows[0].finish_s < 31.0
    assert rows[2].first_start_s == pytest.approx(rows[0].finish_s, abs=1e-6)


def test_multi_gpu_job_with_fewer_steps_than_gpus_is_not_dropped(table):
    # Gavel drops such a job after 5 "failed" micro-tasks; we must finish it.
    r = simulate([job(0, sf=4, steps=3)], parse_cluster("4:0:0"), table, FastestTypePolicy())
    assert r.summary["jobs_completed"] == 1 and r.rows[0].jct_s > 0


def test_idle_gap_jumps_to_next_arrival(table):
    rate = table.get(R50, 1, "v100")
    jobs = [job(0, steps=rate * 10), job(1, steps=rate * 10, arrival=5000.0)]
    r = simulate(jobs, parse_cluster("1:0:0"), table, FastestTypePolicy())
    assert [row.jct_s for row in r.rows] == pytest.approx([10.0, 10.0])
    assert r.summary["makespan_s"] == pytest.approx(5010.0)


def test_job_no_gpu_can_run_is_rejected(table):
    with pytest.raises(InfeasibleError, match="needs 8 GPUs but the cluster has only 4"):
        simulate([job(0, sf=8)], parse_cluster("4:4:4"), table, FastestTypePolicy())


def test_unknown_job_type_and_gpu_type(table):
    with pytest.raises(InputError, match="unknown job type for 'NoSuchModel'"):
        simulate([job(0, job_type="NoSuchModel")], parse_cluster("1:0:0"), table, FastestTypePolicy())
    with pytest.raises(InputError, match="unknown GPU type"):
        simulate([job(0)], parse_cluster("h100=2"), table, FastestTypePolicy())
    with pytest.raises(InputError, match="scale factor 3"):
        simulate([job(0, sf=3)], parse_cluster("4:0:0"), table, FastestTypePolicy())


def test_the_loop_leaves_the_garbage_collector_as_it_is(table):
    """No process-wide side effect: the engine never changes the collector's thresholds."""
    import gc

    seen: list[tuple[int, int, int]] = []

    class Watching(FastestTypePolicy):
        def allocate(self, state):
            seen.append(gc.get_threshold())
            return super().allocate(state)

    before = gc.get_threshold()
    simulate([job(0, steps=2000.0), job(1, steps=500.0, arrival=100.0)], parse_cluster("1:1:0"), table, Watching())
    assert seen and set(seen) == {before} and gc.get_threshold() == before

