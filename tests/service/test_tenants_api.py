"""Teams over the API alone (``tests.service.apiserver``: no Ray): users' tokens made and revoked with
``hadar token``, each user seeing and cancelling only their team's jobs (403 on another team's, the job
untouched), an admin seeing all, the tenants file reloaded (an admin call, SIGHUP) only when it passes its
checks, usage over the API, the teams' view and the audit log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hadar.errors import InputError
from hadar.service.client import Client
from tests.service.conftest import ApiServer, snapshot, write

TENANTS = """teams:
  vision: {weight: 2, quota: {v100: 2, p100: 1}, borrow: true}
  nlp:    {weight: 1, quota: {k80: 1}}
users:
  vis1: {team: vision}
  nlp1: {team: nlp}
  ops:  {admin: true}
"""
JOB = {"job_type": "lstm", "total_steps": 10}


def hadar(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hadar.cli", *args], capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.fixture(scope="module")
def teams(tmp_path_factory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("teams")
    tenants = write(root / "tenants.yaml", TENANTS)
    api = ApiServer(root / "state", "--tenants", str(tenants))
    api.start()
    tokens = {}
    for user in ("vis1", "nlp1", "ops"):
        out = hadar("token", "create", user, "--state", str(api.state), "--tenants", str(tenants))
        assert out.returncode == 0, out.stderr
        tokens[user] = out.stdout.strip()
    url = json.loads((api.state / "server.json").read_text())["url"]
    clients = {u: Client(url, t) for u, t in tokens.items()}
    yield {"api": api, "tenants": tenants, "tokens": tokens, "clients": clients, "url": url}
    api.stop()


def _status(call: Any) -> int:
    try:
        call()
    except InputError as e:
        return int(str(e).rsplit("HTTP ", 1)[1].rstrip(")"))
    return 200


def test_each_user_sees_and_cancels_their_teams_jobs_only(teams):
    c = teams["clients"]
    vis = c["vis1"].request("POST", "/api/jobs", {"jobs": [JOB, {**JOB, "entity": "nlp"}]})["ids"]
    nlp = c["nlp1"].request("POST", "/api/jobs", {"jobs": [JOB]})["ids"]
    mine = {j["id"]: j for j in c["vis1"].jobs()["jobs"]}
    assert set(vis) <= set(mine) and not set(nlp) & set(mine)
    assert all(j["team"] == "vision" and j["user"] == "vis1" for j in mine.values())  # the file's entity ignored
    theirs = {j["id"] for j in c["nlp1"].jobs()["jobs"]}
    assert set(nlp) <= theirs and not set(vis) & theirs
    admin = {j["id"] for j in c["ops"].jobs()["jobs"]}
    assert set(vis) | set(nlp) <= admin
    assert {j["id"] for j in teams["api"].client().jobs()["jobs"]} == admin  # the state directory's token: admin
    before = teams["api"].client().job(nlp[0])
    for call in (lambda: c["vis1"].cancel(nlp[0]), lambda: c["vis1"].job(nlp[0]), lambda: c["vis1"].logs(nlp[0])):
        assert _status(call) == 403
    after = teams["api"].client().job(nlp[0])
    assert after["status"] == before["status"] == "queued" and not after["cancel_requested"]  # untouched
    assert c["nlp1"].cancel(nlp[0])["status"] == "cancelled"  # its own team's user may
    assert c["ops"].cancel(vis[1])["status"] == "cancelled"  # an admin may cancel any
    actions = [(e["user"], e["action"]) for e in c["ops"].request("GET", "/api/audit")["entries"]]
    assert ("vis1", "submit") in actions and ("nlp1", "cancel") in actions and ("ops", "cancel") in actions
    assert ("cli", "token create") in actions
    assert _status(lambda: c["vis1"].request("GET", "/api/audit")) == 403


def test_a_revoked_token_gets_401_and_another_users_stays(teams, tmp_path):
    api = teams["api"]
    out = hadar("token", "create", "nlp1", "--state", str(api.state))
    second = Client(teams["url"], out.stdout.strip())
    assert second.request("GET", "/api/whoami")["team"] == "nlp"
    stored = json.dumps(snapshot(api.state)["tokens"])
    assert out.stdout.strip() not in stored and teams["tokens"]["nlp1"] not in stored  # digests only
    assert hadar("token", "revoke", "nlp1", "--state", str(api.state)).stdout.strip() == "nlp1: 2 tokens revoked"
    assert _status(second.jobs) == 401
    assert _status(teams["clients"]["nlp1"].jobs) == 401
    assert _status(teams["clients"]["vis1"].jobs) == 200
    again = hadar("token", "create", "nlp1", "--state", str(api.state)).stdout.strip()
    teams["clients"]["nlp1"] = Client(teams["url"], again)
    bad = hadar("token", "create", "nobody", "--state", str(api.state), "--tenants", str(teams["tenants"]))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "not in" in bad.stderr
    stranger = Client(teams["url"], hadar("token", "create", "nobody", "--state", str(api.state)).stdout.strip())
    assert _status(stranger.jobs) == 401  # a token for a user the file does not name


def test_the_tenants_file_is_replaced_only_by_one_that_passes_its_checks(teams):
    api, path, ops = teams["api"], teams["tenants"], teams["clients"]["ops"]
    assert _status(teams["clients"]["vis1"].reload_tenants) == 403
    for bad, message in (("teams:\n  vision: {quota: {h100: 1}}\n", "GPU type 'h100'"),
                         ("teams:\n  vision: {quota: {v100: -2}}\n", "must be a whole number"),
                         ("teams: [\n", "not valid YAML")):
        path.write_text(bad)
        with pytest.raises(InputError, match=message) as err:
            ops.reload_tenants()
        assert "(HTTP 400)" in str(err.value)
        os.kill(api.proc.pid, signal.SIGHUP)  # the same refusal on SIGHUP: the old file stays
    time.sleep(0.5)
    assert "tenants file not reloaded, the old one stays" in api.output()
    assert teams["clients"]["vis1"].request("GET", "/api/whoami") == {"user": "vis1", "team": "vision", "admin": False,
                                                                      "tenants": True}
    path.write_text(TENANTS.replace("vis1: {team: vision}", "vis1: {team: nlp}"))
    os.kill(api.proc.pid, signal.SIGHUP)
    api.wait_for(lambda: teams["clients"]["vis1"].request("GET", "/api/whoami")["team"] == "nlp", 20, "SIGHUP")
    path.write_text(TENANTS)
    assert ops.reload_tenants()["users"] == ["vis1", "nlp1", "ops"]
    assert teams["clients"]["vis1"].request("GET", "/api/whoami")["team"] == "vision"
    actions = [e["action"] for e in ops.request("GET", "/api/audit")["entries"]]
    assert "tenants reload refused" in actions and "tenants reload" in actions


def test_usage_and_the_teams_view_are_bounded_by_the_users_team(teams):
    c = teams["clients"]
    view = c["ops"].request("GET", "/api/teams")["teams"]
    assert [t["team"] for t in view] == ["vision", "nlp"]
    assert view[0]["quota"] == {"p100": 1, "v100": 2} and view[0]["borrow"] is True and view[0]["waiting"] >= 1
    assert [t["team"] for t in c["vis1"].request("GET", "/api/teams")["teams"]] == ["vision"]
    assert _status(lambda: c["vis1"].usage(team="nlp")) == 403
    mine = c["vis1"].usage()
    assert mine["team"] == "vision" and mine["gpu_s"] == 0.0  # no round ran: nothing to charge
    assert c["ops"].usage(since="2026-01-01")["since_at"] == pytest.approx(1767225600.0)
    assert _status(lambda: c["ops"].usage(since="yesterday")) == 400
    assert c["ops"].usage(fmt="csv").startswith("level,name,team,gpu_type,gpu_s\n")


def test_without_tenants_a_user_token_is_just_a_wrong_token(tmp_path: Path):
    api = ApiServer(tmp_path / "state")
    api.start()
    try:
        made = hadar("token", "create", "vis1", "--state", str(api.state)).stdout.strip()
        url = json.loads((api.state / "server.json").read_text())["url"]
        req = urllib.request.Request(url + "/api/jobs", headers={"Authorization": f"Bearer {made}"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 401 and json.loads(err.value.read()) == {"error": "wrong token"}
        assert api.client().request("GET", "/api/whoami") == {"user": "admin", "team": "", "admin": True,
                                                              "tenants": False}
    finally:
        api.stop()
