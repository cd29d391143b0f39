"""``hadar serve --slurm`` on the local Slurm cluster: jobs submitted over HTTP run as Slurm jobs; a kill -9 of
the server mid-round and a restart lose no job and run none twice: the restart waits for the killed server's
leases, commits what they saved, and every job completes once with exactly its steps."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from hadar.runtime import checkpoint
from tests.service.conftest import Server, events, write
from tests.slurm.localcluster import LocalSlurm

pytestmark = [pytest.mark.slurm, pytest.mark.runtime]
JOB_FILE = Path(__file__).resolve().parents[1] / "runtime" / "jobs" / "regression.py"
STEPS = (540, 420, 600, 480)  # about three leases each


def _jobs_yaml(tmp_path: Path) -> Path:
    lines = ["jobs:"]
    for i, steps in enumerate(STEPS):
        mirror = "ResNet-18 (batch size 64)" if i % 2 == 0 else "LM (batch size 20)"
        lines.append(f"  - {{name: reg-{i % 2}, entrypoint: '{JOB_FILE}:train', total_steps: {steps}, "
                     f"emulate_as: '{mirror}', args: {{step_s: 0.02}}}}")
    return write(tmp_path / "jobs.yaml", "\n".join(lines) + "\n")


def _hadar_jobs(cluster: LocalSlurm) -> list[dict]:
    """Every Slurm job hadar submitted that Slurm still knows (its comment is hadar's tag)."""
    out = cluster.run("squeue", "--states=all", "--json")
    return [j for j in json.loads(out.stdout)["jobs"] if str(j.get("comment", "")).startswith("hadar:")]


def _running(cluster: LocalSlurm) -> list[dict]:
    return [j for j in _hadar_jobs(cluster) if j["job_state"] in ("RUNNING", "PENDING")]


def _lease_processes(state: Path) -> list[int]:
    pids = subprocess.run(["pgrep", "-f", f"hadar.slurm.lease {state}"], capture_output=True, text=True,
                          check=False).stdout
    return [int(p) for p in pids.split()]


def test_serve_on_slurm_survives_kill_9_and_runs_every_job_once(slurm_idle: LocalSlurm, tmp_path):
    state = tmp_path / "state"
    server = Server(state, "--slurm", "--partition", "e2e", "--round-s", "20")
    try:
        server.start()
        ids = server.client().submit_file(_jobs_yaml(tmp_path))["ids"]
        assert len(ids) == len(STEPS)

        def mid_round() -> bool:  # a round after the first one in flight: some job has committed progress
            progressed = any(0 < j["done_steps"] < j["total_steps"] for j in server.jobs().values())
            return progressed and any(j["job_state"] == "RUNNING" for j in _running(slurm_idle))

        server.wait_for(mid_round, 300, "a job to make progress and a round's leases to run")
        in_flight = {int(j["job_id"]) for j in _running(slurm_idle)}
        server.kill9()
        assert in_flight and _lease_processes(state), "the killed server's leases run on (Slurm's processes)"

        server.start()  # the same state directory: it adopts the running leases first
        server.wait_for(lambda: all(j["status"] == "done" for j in server.jobs().values()), 600,
                        "every job to finish")
        jobs = server.jobs()
        adopted = re.search(r"adopted the Slurm jobs of the previous run: .* waited for \[(.*)\], committed the "
                            r"checkpoints of jobs \[(.*)\]", server.log.read_text())
    finally:
        server.stop()
    assert sorted(jobs) == sorted(ids)  # nothing lost, nothing duplicated
    # the restart waited for the killed server's leases and committed what they saved, so a job resumed past
    # what the killed server had recorded
    assert adopted is not None and adopted[1] and adopted[2], adopted
    resumed = events(state, "resumed")
    assert all(e["progress"] >= e["recorded"] for e in resumed)
    assert any(e["progress"] > e["recorded"] for e in resumed) or len(adopted[2].split(",")) > len(resumed), resumed
    finished = [e["job"] for e in events(state, "finish")]
    assert sorted(finished) == sorted(ids)  # each job finished exactly once
    for i, steps in zip(ids, STEPS, strict=True):
        assert jobs[i]["done_steps"] == pytest.approx(steps)
        # the job counts the steps on the trajectory it resumed from: its size exactly when every lease
        # resumed from the last committed checkpoint (the adopted leases' included)
        saved = checkpoint.load(checkpoint.checkpoint_path(state / "checkpoints", i))
        assert saved is not None and int(saved["state"]["seen"]) == steps, (i, saved and saved["state"]["seen"])
    assert not _running(slurm_idle)  # nothing of hadar left in squeue
    assert not _lease_processes(state)
    assert in_flight <= {int(j["job_id"]) for j in _hadar_jobs(slurm_idle)}  # (Slurm still keeps their records)


def test_a_users_sbatch_job_is_held_by_the_plugin_and_placed_by_serve(slurm_idle: LocalSlurm, tmp_path):
    # a user's plain sbatch job marked for hadar is held by the shipped job_submit.lua (the test cluster loads
    # it) until `hadar serve --slurm` places it: on the slowest type that fits (e2e: d-k80's K80, next to
    # c-p100's two P100), that node out of hadar's schedule while it runs, its run recorded once it ends
    user = write(tmp_path / "user.sh", f"#!/bin/sh\nsleep 6\necho ran > {tmp_path / 'user.out'}\n")
    out = slurm_idle.run("sbatch", "--parsable", "--comment=hadar", "--gres=gpu:1", "--partition=e2e",
                         f"--output={tmp_path / 'user.log'}", str(user))
    job_id = int(out.stdout.strip())
    plain = slurm_idle.run("sbatch", "--parsable", "--comment=hadar", "--partition=e2e",
                           f"--output={tmp_path / 'plain.log'}", "--wrap=true")
    time.sleep(2.0)
    held = _job(slurm_idle, job_id)
    assert held["job_state"] == "PENDING" and held["priority"] == 0 and held["state_reason"] == "JobHeldUser"
    assert _state(slurm_idle, int(plain.stdout.strip())) == "COMPLETED"  # no GPU asked for: not hadar's
    state = tmp_path / "state"
    server = Server(state, "--slurm", "--partition", "e2e", "--round-s", "20")
    try:
        server.start()
        ids = server.client().submit_file(write(tmp_path / "jobs.yaml", "jobs:\n" + "\n".join(
            f"  - {{name: reg, entrypoint: '{JOB_FILE}:train', total_steps: 100, args: {{step_s: 0.02}}}}"
            for _ in range(2)) + "\n"))["ids"]
        server.wait_for(lambda: all(j["status"] == "done" for j in server.jobs().values())
                        and (state / "user-jobs.jsonl").exists(), 300, "the jobs and the user's job to end")
    finally:
        server.stop()
    assert (tmp_path / "user.out").read_text() == "ran\n"
    (rec,) = [json.loads(line) for line in (state / "user-jobs.jsonl").read_text().splitlines()]
    assert (rec["job_id"], rec["node"], rec["gpu_type"], rec["gpus"], rec["state"]) == (job_id, "d-k80", "k80", 1,
                                                                                        "COMPLETED")
    assert 6 <= rec["seconds"] <= 60 and rec["gpu_seconds"] == rec["seconds"]
    downs = [e["down"] for e in events(state, "cluster")]
    assert ["d-k80"] in downs and downs[-1] == [], downs  # out of hadar's schedule while it ran, then back
    assert len(ids) == 2 and not _running(slurm_idle)


def _job(cluster: LocalSlurm, job_id: int) -> dict:
    (job,) = [j for j in json.loads(cluster.run("squeue", "--states=all", "--json").stdout)["jobs"]
              if j["job_id"] == job_id]  # (squeue --json of Slurm 22.05 lists every job, whatever --jobs says)
    return dict(job)


def _state(cluster: LocalSlurm, job_id: int, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        state = str(_job(cluster, job_id)["job_state"])
        if state in ("COMPLETED", "FAILED", "CANCELLED") or time.monotonic() > deadline:
            return state
        time.sleep(0.2)
