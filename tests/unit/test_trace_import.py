"""``hadar trace import philly|csv`` (issue 17, item 1) and the CSV reader's extra columns."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from hadar.cli import main
from hadar.errors import InputError
from hadar.model.throughput import ThroughputTable
from hadar.sim.importers import PHILLY, Selection, assign_type, import_trace, nearest_count
from hadar.sim.trace import read_jobs
from tests.unit.test_cli import assert_one_line_error, hadar

HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
#: a small Philly-shaped table: two virtual clusters, out of order, GPU counts the table lacks
PHILLY_ROWS = [
    "2017-10-02 10:00:00,600.0,1,600.0,aaaaaa",
    "2017-10-01 09:00:00,1200.0,3,3600.0,aaaaaa",
    "2017-10-01 09:30:00,900.0,1,900.0,bbbbbb",
    "2017-10-01 09:00:00,1800.0,16,28800.0,aaaaaa",
    "2017-10-01 12:00:00,300.0,6,1800.0,aaaaaa",
]


@pytest.fixture
def philly(tmp_path: Path) -> Path:
    p = tmp_path / "philly.csv"
    p.write_text(HEADER + "\n".join(PHILLY_ROWS) + "\n")
    return p


@pytest.mark.parametrize(("gpus", "want"), [(1, 1), (2, 2), (3, 4), (5, 4), (6, 8), (7, 8), (16, 8), (128, 8),
                                            (0.5, 1)])
def test_gpu_counts_round_to_the_nearest_count_the_table_has(gpus, want):
    assert nearest_count(gpus, (1, 2, 4, 8)) == want


def test_job_types_are_a_seeded_hash_of_the_row():
    table = ThroughputTable.load()
    types = [assign_type(table, 1, 0, row) for row in range(2, 200)]
    assert types == [assign_type(table, 1, 0, row) for row in range(2, 200)]
    assert len(set(types)) > 10  # spread over the table's one-GPU types
    assert types != [assign_type(table, 1, 1, row) for row in range(2, 200)]
    multi = {assign_type(table, 8, 0, row) for row in range(2, 200)}
    assert multi and all(table.has(t, 8) for t in multi)
    assert not any(t.startswith(("Recommendation", "A3C", "CycleGAN")) for t in multi)


def test_philly_import_keeps_arrivals_counts_durations_and_fields(philly):
    table = ThroughputTable.load()
    rows = import_trace(philly, PHILLY, Selection(where=(("cluster", "aaaaaa"),)), table)
    assert [r["source_row"] for r in rows] == ["3", "5", "6", "2"]  # by submission time, ties by line
    assert [float(r["arrival_s"]) for r in rows] == [0.0, 0.0, 3 * 3600.0, 25 * 3600.0]
    assert [r["scale_factor"] for r in rows] == ["4", "8", "8", "1"]
    for r in rows:
        best = max(table.get(r["job_type"], int(r["scale_factor"]), t) for t in table.gpu_types)
        assert float(r["total_steps"]) / best == pytest.approx(float(r["duration"]), rel=1e-12)
        assert r["cluster"] == "aaaaaa" and r["job_type"] == assign_type(table, int(r["scale_factor"]), 0,
                                                                          int(r["source_row"]))


@pytest.mark.parametrize(("selection", "rows"), [
    (Selection(days=0.5), ["3", "5", "4", "6"]),
    (Selection(jobs=2), ["3", "5"]),
    (Selection(start="2017-10-01 09:15"), ["4", "6", "2"]),
    (Selection(start="2017-10-01 09:15", days=1), ["4", "6"]),
])
def test_windows(philly, selection, rows):
    got = import_trace(philly, PHILLY, selection, ThroughputTable.load())
    assert [r["source_row"] for r in got] == rows
    assert float(got[0]["arrival_s"]) == 0.0


def test_imported_list_runs_and_jobs_csv_keeps_the_source_fields(philly, tmp_path):
    out = tmp_path / "t.csv"
    assert main(["trace", "import", "philly", str(philly), "--vc", "aaaaaa", "--out", str(out)]) == 0
    jobs = read_jobs(out)
    assert [dict(j.extra)["source_row"] for j in jobs] == ["3", "5", "6", "2"]
    assert dict(jobs[0].extra)["timestamp"] == "2017-10-01 09:00:00"
    assert main(["simulate", "--trace", str(out), "--cluster", "8:8:8", "--policy", "hadar", "--json",
                 "--out", str(tmp_path / "run")]) == 0
    with (tmp_path / "run" / "jobs.csv").open() as f:
        written = list(csv.DictReader(f))
    assert [r["source_row"] for r in written] == ["3", "5", "6", "2"]
    assert {r["cluster"] for r in written} == {"aaaaaa"} and written[0]["jct_s"]


def test_compare_on_an_imported_trace(philly, tmp_path, capsys):
    out = tmp_path / "t.csv"
    assert main(["trace", "import", "philly", str(philly), "--days", "2", "--seed", "3", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["compare", "--trace", str(out), "--cluster", "16:16:16", "--json",
                 "--policies", "hadar,max_min_fairness_perf,hadare"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert [r["jobs_completed"] for r in results] == [5, 5, 5]


def test_generic_csv_import_with_a_column_mapping(tmp_path):
    src = tmp_path / "pai.csv"
    src.write_text("job_name,submit_time,gpu_num,runtime,status,job_type\n"
                   "a,1000,1,50,Terminated,x\nb,400,2,70,Failed,y\nc,700,1,30,Terminated,z\n")
    out = tmp_path / "t.csv"
    assert main(["trace", "import", "csv", str(src), "--map", "arrival=submit_time,gpus=gpu_num,duration=runtime",
                 "--where", "status=Terminated", "--out", str(out)]) == 0
    jobs = read_jobs(out)
    assert [(dict(j.extra)["job_name"], j.arrival_s) for j in jobs] == [("c", 0.0), ("a", 300.0)]
    assert dict(jobs[0].extra)["src_job_type"] == "z"  # a name hadar reads is kept under src_


def test_csv_reader_carries_extra_columns_and_keeps_yaml_strict(tmp_path):
    (tmp_path / "j.csv").write_text("job_type,name_of_run,total_steps,arrival_s,note\nA3C,run-1,100,5,\n"
                                    "CycleGAN,run-2,200,0,x\n")
    jobs = read_jobs(tmp_path / "j.csv")
    assert [j.extra for j in jobs] == [(("name_of_run", "run-2"), ("note", "x")),
                                       (("name_of_run", "run-1"), ("note", ""))]
    (tmp_path / "j.yaml").write_text("jobs:\n  - {job_type: A3C, total_steps: 10, note: x}\n")
    with pytest.raises(InputError, match="unknown job field"):
        read_jobs(tmp_path / "j.yaml")


@pytest.mark.parametrize(("rows", "args", "fragment"), [
    (PHILLY_ROWS, ["--vc", "cccccc"], "no jobs with cluster=cccccc"),
    (PHILLY_ROWS, ["--start", "2018-01-01"], "no jobs in the selected window"),
    (PHILLY_ROWS, ["--start", "yesterday"], "--start: the start must be seconds or an ISO date"),
    (PHILLY_ROWS, ["--days", "0"], "--days must be positive"),
    (PHILLY_ROWS, ["--jobs", "0"], "--jobs must be at least 1"),
    (PHILLY_ROWS, ["--days", "1", "--jobs", "3"], "not allowed with argument"),
    (PHILLY_ROWS, ["--throughputs", "nowhere.json"], "throughputs file not found"),
    (["2017-10-01 09:00:00,600.0,x,600.0,a"], [], "philly.csv:2: num_gpus must be a number, got 'x'"),
    (["2017-10-01 09:00:00,-5,1,600.0,a"], [], "philly.csv:2: duration must be positive"),
    (["2017-10-01 09:00:00,600.0,1,600.0"], [], "philly.csv:2: expected 5 cells"),
    (["soon,600.0,1,600.0,a"], [], "philly.csv:2: timestamp must be seconds or an ISO date and time, got 'soon'"),
])
def test_bad_input_one_line_exit_2(tmp_path, rows, args, fragment):
    p = tmp_path / "philly.csv"
    p.write_text(HEADER + "\n".join(rows) + "\n")
    proc = hadar("trace", "import", "philly", str(p), *args, "--out", str(tmp_path / "t.csv"))
    assert_one_line_error(proc, fragment)


@pytest.mark.parametrize(("args", "fragment"), [
    (["philly", "missing.csv"], "trace file not found: missing.csv"),
    (["csv", "{src}", "--map", "arrival=a,gpus=b"], "--map: missing duration"),
    (["csv", "{src}", "--map", "when=a,gpus=b,duration=c"], "--map: expected KEY=COLUMN"),
    (["csv", "{src}", "--map", "arrival=t,gpus=g,duration=nope"], "no column 'nope' (columns: t, g, d)"),
    (["csv", "{src}", "--map", "arrival=t,gpus=g,duration=d", "--where", "x"], "--where: expected COLUMN=VALUE"),
    (["csv", "{src}", "--map", "arrival=t,gpus=g,duration=d,job_type=t"], "job type '5' on 1 GPU(s) is not in"),
])
def test_bad_generic_input_one_line_exit_2(tmp_path, args, fragment):
    src = tmp_path / "src.csv"
    src.write_text("t,g,d\n5,1,10\n")
    args = [a.replace("{src}", str(src)) for a in args]
    assert_one_line_error(hadar("trace", "import", *args, "--out", str(tmp_path / "t.csv")), fragment)
