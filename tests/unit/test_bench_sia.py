"""bench/bench_sia.py's stored Sia results (issue 20, item 3; docs/sia.md), without Sia.

Sia's folder is faked: the tiny Sia-format fixture of test_sia_import.py plus a `simulator_config.py`
and a `multi_simulator.py` that write, as Sia's log does, one JSON line whose `submitted_jobs` give
each job a fixed JCT per policy (Gavel 3600 s, Sia 1800 s; 2700 s when the workload has a
`category` column of `rigid`, as the bench's `sia-rigid` writes it).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from hadar.errors import HadarError
from tests.helpers import load_bench

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).parent / "data" / "sia"
FAKE_SIM = '''
import csv, json, sys
args = sys.argv[1:]
with open(args[0], newline="") as f:
    rows = list(csv.DictReader(f))
category = {r.get("category") for r in rows}
sia = {frozenset({"rigid"}): 2700.0, frozenset({"scale-gpus"}): 2160.0}.get(frozenset(category), 1800.0)
jct = {"gavel": 3600.0, "sia": sia}[next(a[9:] for a in args if a.startswith("--policy="))]
jct *= SCALE
out = next(a[9:] for a in args if a.startswith("--output="))
jobs = [{"submission_time": float(r["time"]), "completion_time": float(r["time"]) + jct, "num_restarts": i}
        for i, r in enumerate(rows)]
with open(out, "w") as f:
    f.write(json.dumps({"submitted_jobs": []}) + "\\n" + json.dumps({"submitted_jobs": jobs}) + "\\n")
'''


bench = load_bench("bench_sia")


@pytest.fixture(autouse=True)
def _scratch(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run without --out writes under the temp folder: pytest's, not the machine's /tmp."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path_factory.mktemp("scratch")))


def fake_sia(tmp_path: Path, scale: float = 1.0) -> Path:
    sia = tmp_path / "sia"
    if not sia.exists():
        shutil.copytree(FIXTURE, sia)
    (sia / "simulator_config.py").write_text("sia_solver_num_threads = 8\nsia_solver_verbose = True\n")
    (sia / "multi_simulator.py").write_text(f"SCALE = {scale}\n" + FAKE_SIM)
    return sia


def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["bench_sia.py", "--workloads", "tiny", "--policies",
                                      "max_sum_throughput_perf", *args])
    rc = bench.cli()
    out, err = capsys.readouterr()
    return rc, out, err


def tiny_row(out: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if line.startswith("tiny "))


def test_sia_runs_are_stored_and_reused_without_sia(tmp_path, monkeypatch, capsys):
    sia, store = fake_sia(tmp_path), tmp_path / "sia_results.json"
    rc, out, _ = run(monkeypatch, capsys, "--sia-dir", str(sia), "--sia-python", sys.executable,
                     "--sia-results", str(store), "--out", str(tmp_path / "o1"))
    assert rc == 0
    ms, gavel, adaptive, rigid, calib = tiny_row(out)[1:]
    assert (gavel, adaptive, rigid) == ("1.000", "0.500", "0.750")
    assert calib == f"{float(ms) / 1.0:.3f}"
    runs = json.loads(store.read_text())["runs"]["tiny"]
    assert sorted(runs) == ["gavel", "sia", "sia-rigid"]
    assert runs["sia"]["avg_jct_h"] == 0.5 and runs["sia"]["makespan_h"] == (30 + 1800) / 3600
    assert runs["gavel"]["restarts"] == 0 + 1 + 2
    assert runs["gavel"]["args"] == ["workloads/tiny.csv", "--policy=gavel", "--interval=360"]
    assert runs["sia-rigid"]["args"][0] == "workloads/tiny.csv with a category column of rigid"
    assert runs["sia"]["sia_code_sha256"] == bench.sia_code_hash(sia) and runs["sia"]["date"].endswith("Z")
    assert "stored" not in runs["sia"]
    # Sia is gone: its columns come from the file alone, the hadar side runs again
    (sia / "multi_simulator.py").unlink()
    rc, again, _ = run(monkeypatch, capsys, "--sia-dir", str(sia), "--sia-results", str(store))
    assert rc == 0 and tiny_row(again) == tiny_row(out)
    assert "sia:" not in again.splitlines()[-1]  # stored runs are not counted as this run's wall time


def test_sia_scale_gpus_runs_the_workload_with_every_job_of_that_category(tmp_path, monkeypatch, capsys):
    store = tmp_path / "s.json"
    rc, out, _ = run(monkeypatch, capsys, "--sia-dir", str(fake_sia(tmp_path)), "--sia-python", sys.executable,
                     "--sia-policies", "gavel,sia-scale-gpus", "--sia-results", str(store))
    assert rc == 0 and tiny_row(out)[2:4] == ["1.000", "0.600"]  # 2,160 s over Gavel's 3,600 s
    runs = json.loads(store.read_text())["runs"]["tiny"]
    assert runs["sia-scale-gpus"]["args"][0] == "workloads/tiny.csv with a category column of scale-gpus"
    assert runs["sia-scale-gpus"]["args"][1:] == runs_args("sia")


def runs_args(policy: str) -> list[str]:
    return list(bench.SIA_ARGS[policy])


def test_a_stored_run_is_reused_unless_rerun(tmp_path, monkeypatch, capsys):
    store = tmp_path / "s.json"
    fake_sia(tmp_path)
    run(monkeypatch, capsys, "--sia-dir", str(tmp_path / "sia"), "--sia-python", sys.executable,
        "--sia-policies", "gavel", "--sia-results", str(store))
    sia = fake_sia(tmp_path, scale=2.0)
    rc, out, _ = run(monkeypatch, capsys, "--sia-dir", str(sia), "--sia-python", sys.executable,
                     "--sia-policies", "gavel,sia", "--sia-results", str(store))
    assert rc == 0 and tiny_row(out)[2:4] == ["1.000", "1.000"]  # gavel stored (1 h), sia run now (1 h)
    runs = json.loads(store.read_text())["runs"]["tiny"]
    assert runs["gavel"]["avg_jct_h"] == 1.0 and runs["sia"]["avg_jct_h"] == 1.0
    rc, out, _ = run(monkeypatch, capsys, "--sia-dir", str(sia), "--sia-python", sys.executable,
                     "--sia-policies", "gavel", "--sia-results", str(store), "--sia-rerun")
    assert json.loads(store.read_text())["runs"]["tiny"]["gavel"]["avg_jct_h"] == 2.0


def test_store_orders_workloads_by_set_and_number(tmp_path):
    store = tmp_path / "s.json"
    for name in ("saturn/workload-1", "philly/workload-10", "philly/workload-2"):
        bench.store_sia_result(store, name, "gavel", {"avg_jct_h": 1.5})
    bench.store_sia_result(store, "philly/workload-2", "sia", {"avg_jct_h": 0.5})
    data = json.loads(store.read_text())
    assert list(data["runs"]) == ["philly/workload-2", "philly/workload-10", "saturn/workload-1"]
    assert data["runs"]["philly/workload-2"] == {"gavel": {"avg_jct_h": 1.5}, "sia": {"avg_jct_h": 0.5}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]
    assert bench.load_sia_results(tmp_path / "missing.json") == {}


@pytest.mark.parametrize("text", ["not json", '{"rows": {}}', '{"runs": {"w": {"pollux": {"avg_jct_h": 1.0}}}}',
                                  '{"runs": {"w": {"gavel": {"avg_jct_h": "1"}}}}'])
def test_a_bad_results_file_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, text):
    store = tmp_path / "s.json"
    store.write_text(text)
    with pytest.raises(HadarError, match="--sia-results"):
        bench.load_sia_results(store)
    rc, _, err = run(monkeypatch, capsys, "--sia-dir", str(fake_sia(tmp_path)), "--sia-results", str(store))
    assert rc == 2 and err.startswith("bench_sia: --sia-results") and len(err.strip().splitlines()) == 1


def test_results_file_in_a_missing_folder_is_exit_2(tmp_path, monkeypatch, capsys):
    rc, _, err = run(monkeypatch, capsys, "--sia-dir", str(fake_sia(tmp_path)),
                     "--sia-results", str(tmp_path / "nope" / "s.json"))
    assert rc == 2 and "its folder does not exist" in err


def test_jobs_runs_each_kind_against_the_rigid_baseline(tmp_path, monkeypatch, capsys):
    """--jobs rigid,scale-gpus,adaptive: hadar on each kind's import, every ratio over rigid max-sum."""
    monkeypatch.setattr(sys, "argv", ["bench_sia.py", "--workloads", "tiny", "--policies",
                                      "max_sum_throughput_perf,hadar", "--sia-dir", str(FIXTURE),
                                      "--jobs", "scale-gpus,adaptive", "--out", str(tmp_path / "o")])
    assert bench.cli() == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split() == ["workload", "ms", "h", "hadar", "hadar:sg", "hadar:ad"]
    ratios = [float(x) for x in tiny_row(out)[2:]]
    assert len(ratios) == 3 and all(0 < r < 1.5 for r in ratios)
    assert (tmp_path / "o" / "tiny" / "adaptive" / "trace.csv").is_file()
    monkeypatch.setattr(sys, "argv", ["bench_sia.py", "--workloads", "tiny", "--sia-dir", str(FIXTURE),
                                      "--jobs", "elastic"])
    assert bench.cli() == 2 and "--jobs" in capsys.readouterr().err
