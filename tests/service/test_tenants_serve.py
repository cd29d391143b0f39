"""`hadar serve --tenants` with two teams and an admin, on Ray with real training: a user cancelling the
other team's job gets 403 and the job runs on; a user's status lists their team's jobs only; a revoked
token gets 401; on every recorded round no team holds more GPUs of a type than its quota while the other
team has a job waiting for them (but for a borrowing job inside its minimum run time); the borrowing job
is reclaimed only after that time and resumes from its checkpoint; ``hadar usage --json`` sums, per team
and type, to the GPU-seconds the rounds recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hadar.errors import InputError
from hadar.service.client import Client
from tests.service.conftest import events, write

TENANTS = """teams:
  vision: {weight: 1, quota: {v100: 1}, borrow: true}
  nlp:    {weight: 1, quota: {v100: 1}}
users:
  vis1: {team: vision}
  nlp1: {team: nlp}
  ops:  {admin: true}
"""
MIN_RUN_S = 8.0
ROUND_S = 2.0


def hadar(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hadar.cli", *args], capture_output=True, text=True, timeout=120,
                          check=False, env={**os.environ, **(env or {})})


def _team_gpus(leases: list[list[int]], team: dict[int, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for job_id, _copy, gpus, *_ in leases:
        out[team[job_id]] = out.get(team[job_id], 0) + len(gpus)
    return out


@pytest.mark.runtime
def test_two_teams_and_an_admin_on_one_cluster(server_factory, tmp_path):
    tenants = write(tmp_path / "tenants.yaml", TENANTS)
    server = server_factory("--tenants", str(tenants), "--cluster", "v100=2", "--policy", "fifo_perf",
                            "--round-s", str(ROUND_S), "--min-run-s", str(MIN_RUN_S)).start()
    state = str(server.state)
    tokens = {u: hadar("token", "create", u, "--state", state).stdout.strip() for u in ("vis1", "nlp1", "ops")}
    url = server.client().url
    c = {u: Client(url, t) for u, t in tokens.items()}
    vis = c["vis1"].request("POST", "/api/jobs", {"jobs": [{"job_type": "lstm", "total_steps": 4000}] * 2})["ids"]
    server.wait_for(lambda: all(j["status"] == "running" for j in c["ops"].jobs()["jobs"]), 120,
                    "both vision jobs to run (one on a borrowed GPU)")
    nlp = c["nlp1"].request("POST", "/api/jobs", {"jobs": [{"job_type": "lstm", "total_steps": 300}]})["ids"]
    with pytest.raises(InputError, match=r"HTTP 403"):
        c["vis1"].cancel(nlp[0])
    listed = hadar("status", "--json", "--state", state, env={"HADAR_TOKEN": tokens["nlp1"]})
    assert {j["id"] for j in json.loads(listed.stdout)["jobs"]} == set(nlp), listed.stderr
    server.wait_for(lambda: all(j["status"] == "done" for j in c["ops"].jobs()["jobs"]), 400, "every job to finish")
    assert all(j["done_steps"] == pytest.approx(j["total_steps"]) for j in c["ops"].jobs()["jobs"])  # ran on
    assert hadar("token", "revoke", "vis1", "--state", state).returncode == 0
    with pytest.raises(InputError, match=r"HTTP 401"):
        c["vis1"].jobs()

    team = {**dict.fromkeys(vis, "vision"), **dict.fromkeys(nlp, "nlp")}
    rounds = c["ops"].request("GET", "/api/timeline?limit=5000")["rounds"]
    arrived = next(e["t"] for e in events(server.state, "arrival") if e["job"] == nlp[0])
    finished = next(e["t"] for e in events(server.state, "finish") if e["job"] == nlp[0])
    started: dict[int, float] = {}  # job -> when its current run began
    reclaimed_at = None
    for r in rounds:
        running = {le[0] for le in r["leases"]}
        started = {j: started.get(j, r["start_s"]) for j in running}
        per = _team_gpus(r["leases"], team)
        assert per.get("nlp", 0) <= 1
        waiting = arrived <= r["start_s"] and nlp[0] not in running and r["start_s"] < finished
        if waiting and per.get("vision", 0) > 1:  # borrowing past the quota while the owner waits: only
            borrower = max((j for j in running if team[j] == "vision"), key=lambda j: (started[j], j))
            assert r["start_s"] - started[borrower] < MIN_RUN_S + ROUND_S, r  # inside the minimum run time
        if reclaimed_at is None and nlp[0] in running:
            reclaimed_at = r["start_s"]
    assert reclaimed_at is not None
    first_vision = min(r["start_s"] for r in rounds if any(team[le[0]] == "vision" for le in r["leases"]))
    assert reclaimed_at - first_vision >= MIN_RUN_S - 1e-6  # not before the minimum run time
    leases = events(server.state, "lease")
    resumed = [e for e in leases if team.get(e["job"]) == "vision" and e["progress_from"] > 0]
    assert resumed, "the reclaimed job resumed from its checkpoint"

    usage = json.loads(hadar("usage", "--json", "--state", state).stdout)
    expect: dict[tuple[str, str], float] = {}
    for r in rounds:
        for job_id, _copy, gpus, *_ in r["leases"]:
            key = (team[job_id], "v100")
            expect[key] = expect.get(key, 0.0) + len(gpus) * (r["end_s"] - r["start_s"])
    got = {(t, gt): s for t, rec in usage["teams"].items() for gt, s in rec["by_type"].items()}
    assert got.keys() == expect.keys() and all(got[k] == pytest.approx(expect[k]) for k in expect)
    assert usage["users"]["vis1"]["gpu_s"] == pytest.approx(expect["vision", "v100"])
    mine = json.loads(hadar("usage", "--json", "--state", state, env={"HADAR_TOKEN": tokens["nlp1"]}).stdout)
    assert set(mine["teams"]) == {"nlp"}
