"""Issue 17, item 7: the friction a new user met on real traces, fixed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from hadar.cli import main
from hadar.compare import format_table
from hadar.config import parse_cluster
from hadar.metrics import plots
from hadar.model.throughput import ThroughputTable
from hadar.report import write_report
from hadar.sim.run import SimResult, simulate
from tests.helpers import job
from tests.unit.test_cli import assert_one_line_error, hadar


def _long_jobs() -> list:
    """Three long jobs on a small cluster: HadarE forks them and its copies keep their GPUs."""
    return [job(0, steps=4e6), job(1, "Transformer (batch size 64)", steps=3e6, arrival=100.0),
            job(2, "A3C", steps=2e6, arrival=900.0)]


def test_compare_table_has_a_wall_time_column():
    head = format_table([{"policy": "x", "wall_s": 1.5}]).splitlines()
    assert head[0].split()[-2:] == ["wall", "s"] and head[1].split()[-1] == "1.500"


@pytest.mark.parametrize("policy", ["hadare", "hadar", "max_min_fairness_perf"])
def test_lease_extension_rate_is_a_rate(policy):
    r = simulate(_long_jobs(), parse_cluster("2:2:2", 2), ThroughputTable.load(), policy)
    assert 0.5 < r.summary["lease_extension_rate"] <= 1.0


@pytest.mark.parametrize("policy", ["hadare", "hadar", "max_min_fairness_perf"])
def test_utilization_plot_and_events_agree_with_the_summary(policy):
    cluster = parse_cluster("2:2:2", 2)
    r = simulate(_long_jobs(), cluster, ThroughputTable.load(), policy, record_events=True)
    times = [e["t"] for e in r.events]
    assert times == sorted(times)  # events.jsonl is in time order
    assert [e["event"] for e in r.events].count("finish") == 3
    t, u = plots.utilization_series(r.events, cluster.num_gpus)
    mean = float(np.sum(u[:-1] * np.diff(t)) / (t[-1] - t[0]))
    assert mean == pytest.approx(r.summary["utilization"], rel=1e-9)


def test_a_skipped_placement_timeline_is_said(tmp_path, caplog):
    rounds = [{"t": float(i), "end": i + 1.0, "event": "round", "busy_gpu_s": 1.0, "leases": [[0, 0, [0], False]]}
              for i in range(plots.TIMELINE_MAX_ROUNDS + 1)]
    run = SimResult(summary={}, rows=[], events=rounds)
    with caplog.at_level(logging.WARNING):
        written = plots.write_run_plots(tmp_path, {"p": run}, parse_cluster("1:0:0"))
    assert not any(p.name.startswith("placement") for p in written)
    assert "placement timeline of p not drawn: 401 rounds (drawn up to 400)" in caplog.text


def test_report_reads_a_compare_folder(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", "--trace", "small_test", "--policies", "hadar,max_min_fairness_perf", "--no-ftf",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    written = write_report(out, fmt="both")
    text = (out / "report.md").read_text()
    assert [p.name for p in written] == ["report.md", "report.html"]
    assert "max_min_fairness_perf" in text and (out / "plots" / "utilization.png").is_file()


def test_report_on_a_folder_it_cannot_read_leaves_nothing(tmp_path):
    assert_one_line_error(hadar("report", str(tmp_path)), "none of summary.json (a run), compare.json")
    assert list(tmp_path.iterdir()) == []


def test_compare_says_when_the_isolated_run_for_ftf_fails(tmp_path):
    p = tmp_path / "j.csv"
    p.write_text("job_type,scale_factor,total_steps,arrival_s\nResNet-50 (batch size 64),8,1000,0\n")
    proc = hadar("compare", "--trace", str(p), "--cluster", "4:4:4", "--policies", "hadar")
    assert_one_line_error(proc, "finish-time fairness needs each job run alone (the `isolated` policy)")
    assert "--no-ftf skips it" in proc.stderr
    ok = hadar("compare", "--trace", str(p), "--cluster", "4:4:4", "--policies", "hadar", "--no-ftf", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["results"][0]["jobs_completed"] == 1


def test_jobs_csv_has_one_header(tmp_path: Path):
    assert main(["simulate", "--trace", "small_test", "--out", str(tmp_path), "--json"]) == 0
    assert (tmp_path / "jobs.csv").read_text().splitlines()[0].startswith("job_id,job_type")


def test_a_csvs_own_ids_and_names_come_back_in_jobs_csv(tmp_path: Path):
    """A hand-written CSV's ``job_id`` (hadar numbers jobs by arrival) returns as ``src_job_id``, and a
    ``name`` (a train field a job_type job may carry) as ``name``, next to every other extra column."""
    src = tmp_path / "j.csv"
    src.write_text("job_id,name,job_type,scale_factor,total_steps,arrival_s,team\n"
                   "9,beta,ResNet-18 (batch size 32),2,5000,10,b\n7,alpha,A3C,1,1000,0,a\n")
    assert main(["simulate", "--trace", str(src), "--cluster", "2:2:2", "--out", str(tmp_path / "o"), "--json"]) == 0
    lines = (tmp_path / "o" / "jobs.csv").read_text().splitlines()
    assert lines[0].endswith(",attained_gpu_s,name,src_job_id,team")
    assert [line.split(",")[0] + ":" + ",".join(line.split(",")[-3:]) for line in lines[1:]] == \
        ["0:alpha,7,a", "1:beta,9,b"]
