"""User jobs (functions written only against the documented job API) on the real runtime, with bundled ones:
completion under Gavel, Hadar and HadarE, failures and retries, and measured vs estimated throughputs."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hadar.cli import main
from hadar.model.state import Allocation, SchedulerState
from hadar.runtime.demo import demo_cluster
from hadar.runtime.run import run
from hadar.sim.trace import read_jobs
from tests.runtime.test_cli_run import CLUSTER_YAML

pytestmark = pytest.mark.runtime
JOBS = Path(__file__).parent / "jobs"


def _files(tmp_path: Path, jobs: str) -> tuple[str, str]:
    (tmp_path / "jobs.yaml").write_text(jobs)
    (tmp_path / "cluster.yaml").write_text(CLUSTER_YAML)
    return str(tmp_path / "jobs.yaml"), str(tmp_path / "cluster.yaml")


def _run_cli(tmp_path: Path, jobs: str, policy: str, capsys: Any) -> tuple[int, dict[str, Any], list[dict[str, str]]]:
    job_file, cluster = _files(tmp_path, jobs)
    out = tmp_path / "out"
    rc = main(["run", "--cluster", cluster, "--jobs", job_file, "--policy", policy, "--round-s", "4", "--json",
               "--no-progress", "--out", str(out)])
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    with (out / "jobs.csv").open() as f:
        rows = list(csv.DictReader(f))
    return rc, summary, rows


@pytest.mark.parametrize("policy", ["max_min_fairness_perf", "hadar", "hadare"])
def test_a_job_file_mixing_a_user_job_with_bundled_ones_runs_to_completion(ray_session, tmp_path, capsys, policy):
    rc, summary, rows = _run_cli(tmp_path, f"""jobs:
  - name: regression
    entrypoint: {JOBS}/regression.py:train
    total_steps: 500
    quality: -loss
  - {{job_type: resnet, total_steps: 200}}
  - {{job_type: recoder, total_steps: 500, arrival_s: 1}}
""", policy, capsys)
    assert rc == 0
    assert summary["jobs_completed"] == 3 and summary["jobs_failed"] == 0 and summary["failed_leases"] == 0
    mine = summary["job_metrics"]["0"]  # the user job's reported metrics, in the summary ...
    assert mine["loss"] < 1.0 and mine["seen"] > 0
    user = next(r for r in rows if r["name"] == "regression")  # ... and in jobs.csv
    assert user["status"] == "done" and user["job_type"] == "regression"
    assert json.loads(user["metrics"])["loss"] == pytest.approx(mine["loss"])
    assert user["metric"] == "loss" and float(user["quality_final"]) == pytest.approx(mine["loss"])
    if policy != "hadare":  # forked copies each count their own steps in "seen"
        assert mine["seen"] == 500
    else:
        assert summary["forked_job_rounds"] >= 1
    assert "lease done" in (tmp_path / "out" / "logs" / "job-0.log").read_text()  # what the function printed
    assert {r["status"] for r in rows} == {"done"}


def test_a_job_with_a_target_ends_when_its_quality_metric_reaches_it(ray_session, tmp_path, capsys):
    """Time to accuracy: the job's reported score reaches its target long before its steps are done."""
    rc, summary, rows = _run_cli(tmp_path, f"""jobs:
  - name: scored
    entrypoint: {JOBS}/scored.py:train
    total_steps: 100000
    quality: score
    target: 40
  - {{name: plain, entrypoint: "{JOBS}/scored.py:train", total_steps: 60, quality: score}}
""", "max_min_fairness_perf", capsys)
    assert rc == 0 and summary["jobs_completed"] == 2
    by_name = {r["name"]: r for r in rows}
    assert {r["status"] for r in rows} == {"done"}
    assert json.loads(by_name["scored"]["metrics"])["score"] == 40.0  # it stopped at the step that reached 40
    assert json.loads(by_name["scored"]["metrics"])["finished"] == 1.0  # ctx.finished was True in that lease
    assert json.loads(by_name["plain"]["metrics"])["score"] == 59.0  # without a target: all its steps


def test_failures_retry_from_the_last_checkpoint_and_end_at_max_failures(ray_session, tmp_path, capsys):
    marker = tmp_path / "marker"
    rc, summary, rows = _run_cli(tmp_path, f"""jobs:
  - {{name: fails-first, entrypoint: {JOBS}/regression.py:train, total_steps: 300,
      args: {{fail: first, marker: "{marker}-a"}}}}
  - {{name: fails-on-resume, entrypoint: {JOBS}/regression.py:train, total_steps: 1000,
      args: {{fail: resume, marker: "{marker}-b", lr: 0.01, step_s: 0.01}}}}
  - {{name: fails-always, entrypoint: {JOBS}/regression.py:train, total_steps: 300, max_failures: 2,
      args: {{fail: always}}}}
  - {{name: missing-dependency, entrypoint: {JOBS}/missingdep.py:train, total_steps: 100, max_failures: 2}}
  - {{name: never-saves, entrypoint: {JOBS}/notsaving.py:train, total_steps: 200}}
  - {{job_type: recoder, total_steps: 400}}
""", "max_min_fairness_perf", capsys)
    by_name = {r["name"]: r for r in rows}
    assert rc == 1  # the run ended; some jobs failed
    assert summary["jobs_completed"] == 4 and summary["jobs_failed"] == 2
    # raising on the first lease: retried (from scratch: nothing was saved yet) and completed
    assert by_name["fails-first"]["status"] == "done" and by_name["fails-first"]["failures"] == "1"
    # raising after saving, in a lease that resumed: that save is not committed; the retry resumes from the last
    # committed checkpoint, so the state's own step count ends exactly at the job's steps (none lost, none twice)
    assert by_name["fails-on-resume"]["status"] == "done" and by_name["fails-on-resume"]["failures"] == "1"
    assert json.loads(by_name["fails-on-resume"]["metrics"])["seen"] == 1000
    # raising every time: failed after max_failures, with the full reason (both lines, no colour codes)
    always = by_name["fails-always"]
    assert always["status"] == "failed" and always["failures"] == "2"
    assert "failed 2 time(s), max_failures 2; last error: RuntimeError: the job's code failed\nsecond line" \
        in always["error"] and "\x1b" not in always["error"]
    log = Path(always["log"]).read_text()
    assert log.count("Traceback (most recent call last)") == 2 and "regression.py" in log
    # not the user's code: a dependency the workers lack; the job ends, with the import error as its reason
    missing = by_name["missing-dependency"]
    assert missing["status"] == "failed" and "No module named 'hadar_test_no_such_package'" in missing["error"]
    assert summary["failed_jobs"][missing["job_id"]] == missing["error"]
    # a job that never saves: it completes, with a warning (in its log too)
    assert by_name["never-saves"]["status"] == "done"
    assert "without calling ctx.save_state" in Path(by_name["never-saves"]["log"]).read_text()
    events = [json.loads(line) for line in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    assert sorted(e["job"] for e in events if e["event"] == "job_failed") == sorted(
        int(by_name[n]["job_id"]) for n in ("fails-always", "missing-dependency"))


class _Recording:
    """Wraps a policy; keeps the throughput matrix of every state it is asked to decide on."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.traits = inner, inner.name, inner.traits
        self.seen: list[tuple[tuple[int, ...], np.ndarray]] = []

    def allocate(self, state: SchedulerState) -> Allocation:
        self.seen.append((state.job_ids, state.throughput_matrix()))
        return self.inner.allocate(state)


def test_throughputs_start_as_estimates_become_measurements_and_the_policy_never_sees_a_hole(ray_session, tmp_path):
    from hadar.build import policy_for_run

    (tmp_path / "jobs.yaml").write_text(f"""jobs:
  - {{name: profiled, entrypoint: {JOBS}/regression.py:train, total_steps: 1000, profile: true,
     args: {{step_s: 0.003}}}}
  - {{name: plain, entrypoint: {JOBS}/regression.py:train, total_steps: 1000, args: {{lr: 0.02, step_s: 0.003}}}}
""")
    policy = _Recording(policy_for_run("max_min_fairness_perf").policy)
    res = run(read_jobs(tmp_path / "jobs.yaml"), demo_cluster(), policy, round_s=4.0, checkpoint_dir=tmp_path / "c")
    assert res.summary["jobs_completed"] == 2
    assert len(policy.seen) >= 2
    for _, matrix in policy.seen:  # a full matrix at every decision: every job, every type, a positive rate
        assert matrix.shape[1] == 3 and np.all(np.isfinite(matrix)) and np.all(matrix > 0)
    ids, first = policy.seen[0]
    assert ids == (0, 1)
    prior = res.prior  # what the run started from: estimates only
    assert first.tolist() == [[prior.get(jt, 1, t) for t in demo_cluster().gpu_types] for jt in ("profiled", "plain")]
    kinds = {(e["job_type"], e["gpu_type"]): e["kind"] for e in res.throughputs}
    ran_on = {jt: {demo_cluster().gpu_type_of[g] for e in res.events if e["event"] == "lease" and e["job"] == jid
                   for g in e["gpus"]} for jid, jt in ((0, "profiled"), (1, "plain"))}
    for jt in ("profiled", "plain"):
        for t in ran_on[jt]:
            assert kinds[(jt, t)] == "measured"  # every type a job ran on is measured
    # the profiled job is measured on every type, also those it never ran on (profiling leases on idle GPUs)
    assert all(kinds[("profiled", t)] == "measured" for t in demo_cluster().gpu_types)
    profiled = {e["gpu_type"] for e in res.events if e["event"] == "measured" and e["profile"]}
    assert profiled and res.summary["profiling_leases"] >= len(profiled)
    assert not any(e["profile"] for e in res.events if e["event"] == "measured" and e["job"] == 1)
    assert res.summary["throughput_entries"]["measured"] >= 4
