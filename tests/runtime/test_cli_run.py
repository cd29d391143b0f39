"""``hadar run``: input errors (no Ray needed), a small real run in-process, and ``--address``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hadar.cli import main
from hadar.policies import available
from tests.helpers import FastestTypePolicy

CLUSTER_YAML = """nodes:
  - {name: node-v100, gpu_type: v100, gpus: 2}
  - {name: node-p100, gpu_type: p100, gpus: 1}
  - {name: node-k80, gpu_type: k80, gpus: 1}
"""
POLICY = "test_fastest_runtime"


@pytest.fixture
def test_policy(monkeypatch):
    """A test-only policy name, registered for one test (other tests never see it)."""
    from hadar.policies import registry

    available()  # load the built-ins first
    monkeypatch.setitem(registry._ENTRIES, POLICY, registry.Entry(POLICY, "test only: each job on its fastest type",
                                                                  FastestTypePolicy))
    return POLICY


def _write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(("jobs", "cluster", "extra", "message"), [
    ("jobs:\n  - {job_type: ResNet-50, total_steps: 10}\n", None, [], "unknown runtime job type 'ResNet-50'"),
    ("jobs:\n  - {job_type: resnet, total_steps: -5}\n", None, [], "total steps must be positive"),
    ("jobs:\n  - {job_type: resnet, total_stepz: 5}\n", None, [], "unknown job field"),
    ("jobs:\n  - {job_type: lstm, total_steps: 10, scale_factor: 4}\n", None, [], "needs 4 GPUs"),
    (None, "nodes:\n  - {name: a, gpu_type: v100, gpus: 0}\n", [], "gpus must be a positive integer"),
    (None, "nodes: 3\n", [], "non-empty 'nodes' list"),
    (None, None, ["--cluster", "v100=40"], "more than 16"),
    (None, None, ["--round-s", "0"], "--round-s must be a positive number"),
    (None, None, ["--address", "127.0.0.1:1", "--dashboard"], "--dashboard applies to the local cluster only"),
    (None, None, ["--jobs", "/nonexistent/jobs.yaml"], "trace file not found"),
])
def test_bad_inputs_give_one_line_and_exit_2(tmp_path, capsys, jobs, cluster, extra, message):
    argv = ["run"]
    if jobs is not None:
        argv += ["--jobs", _write(tmp_path, "jobs.yaml", jobs)]
    if cluster is not None:
        argv += ["--cluster", _write(tmp_path, "cluster.yaml", cluster)]
    assert main(argv + extra) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hadar: error:") and message in err and "\n" not in err


@pytest.mark.runtime
def test_hadar_run_json_and_out(ray_session, test_policy, tmp_path, capsys, monkeypatch):
    import hadar.cli

    monkeypatch.setattr(hadar.cli, "show_progress", lambda args: True)  # as on a terminal
    jobs = _write(tmp_path, "jobs.yaml", "jobs:\n  - {job_type: lstm, total_steps: 400}\n"
                  "  - {job_type: recoder, total_steps: 800, arrival_s: 1}\n")
    cluster = _write(tmp_path, "cluster.yaml", CLUSTER_YAML)
    out = tmp_path / "out"
    rc = main(["run", "--cluster", cluster, "--jobs", jobs, "--policy", test_policy, "--round-s", "3",
               "--json", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["jobs_completed"] == 2 and summary["policy"] == test_policy  # the name the run used
    assert {q["metric"] for q in summary["quality"]} == {"perplexity", "recall@10"}
    assert {q["status"] for q in summary["quality"]} == {"done"} and summary["jobs_failed"] == 0
    assert "round" in captured.err and "done" in captured.err  # live progress on stderr (a terminal)
    for name in ("summary.json", "jobs.csv", "events.jsonl", "throughputs.json"):
        assert (out / name).is_file()
    assert (out / "checkpoints" / "job-0.pt").is_file()
    header = (out / "jobs.csv").read_text().splitlines()[0]
    assert header.startswith("job_id,job_type") and "quality_final" in header and ",metrics," in header
    # the measured table reads back as a Gavel table (it can seed the next run or a simulation)
    from hadar.model.throughput import ThroughputTable

    table = ThroughputTable.load(out / "throughputs.json")
    assert table.has("LSTM-LM (batch size 20)", 1)


@pytest.mark.runtime
def test_hadar_starts_an_arriving_job_mid_round_on_idle_gpus(ray_session, tmp_path, capsys):
    # job 0 keeps one GPU busy well past the arrival (2,000 steps, it ran 42 s in all at load 11);
    # job 1 arrives at 2 s while three GPUs idle: Hadar's 10 s round ends at the arrival (cut_rounds)
    # and job 1 starts then
    jobs = _write(tmp_path, "jobs.yaml", "jobs:\n  - {job_type: recoder, total_steps: 2000}\n"
                  "  - {job_type: resnet, total_steps: 100, arrival_s: 2}\n")
    cluster = _write(tmp_path, "cluster.yaml", CLUSTER_YAML)
    rc = main(["run", "--cluster", cluster, "--jobs", jobs, "--policy", "hadar", "--round-s", "10", "--json",
               "--no-progress", "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert json.loads(captured.out)["jobs_completed"] == 2
    events = [json.loads(line) for line in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    rounds = [e for e in events if e["event"] == "round"]
    # cut at the arrival, not at 10 s: the plan's length (its leases' last step may end past it on a loaded machine)
    assert rounds[0]["planned_s"] < 3.0
    assert {lease[0] for lease in rounds[1]["leases"]} == {0, 1}  # both run from the arrival on


@pytest.mark.runtime
def test_hadar_run_joins_an_existing_cluster_with_address(ray_session, tmp_path):
    import ray

    gcs = ray.get_runtime_context().gcs_address
    jobs = _write(tmp_path, "jobs.yaml", "jobs:\n  - {job_type: recoder, total_steps: 300}\n")
    cluster = _write(tmp_path, "cluster.yaml", CLUSTER_YAML)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "hadar.cli", "run", "--address", gcs, "--cluster", cluster,
                           "--jobs", jobs, "--policy", "hadar", "--round-s", "3", "--json", "--no-progress"],
                          check=False, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["jobs_completed"] == 1 and summary["ray_auth"] == "token"
    assert summary["emulated"] is True  # the session's nodes have no real GPUs
