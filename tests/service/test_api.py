"""The API of a running `hadar serve`: bad input (a clear 4xx, the client prints one line and exits 2, the
database is unchanged), then a load test (200 submissions from 10 concurrent clients, 1,000 status calls:
nothing lost or duplicated), cancellation and logs."""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hadar.cli import main
from tests.helpers import load_scale
from tests.service.conftest import Server, write

pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("api") / "state", "--round-s", "3")
    s.start()
    yield s
    s.stop()
    assert s.proc is not None and s.proc.returncode == 0, s.output()  # SIGTERM: a graceful stop


def _snapshot(state: Path) -> dict[str, list[tuple]]:
    """Every row of every table (the database must not change on a rejected request)."""
    con = sqlite3.connect(f"file:{state / 'hadar.db'}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: con.execute(f"SELECT * FROM {t}").fetchall() for t in tables}
    finally:
        con.close()


def _settled(state: Path, quiet_s: float = 1.5, timeout_s: float = 60.0) -> dict[str, list[tuple]]:
    """The store's snapshot once it has not changed for ``quiet_s``: the round in which a job ends may still
    write its events after the job reads as done (seen on a loaded machine)."""
    wait_s = timeout_s * load_scale()
    deadline = time.monotonic() + wait_s
    last = _snapshot(state)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = _snapshot(state)
        if now == last:
            return now
        last = now
    raise AssertionError(f"the store kept changing for {wait_s:.0f} s with no job running")


def _raw(server: Server, method: str, path: str, body: bytes | None = None,
         token: str | None = "real") -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {server.client().token if token == 'real' else token}"
    req = urllib.request.Request(server.client().url + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _declared_only(server: Server, length: int) -> tuple[int, dict]:
    """POST headers announcing a ``length``-byte body and read the answer before sending it (the server
    refuses at once; sending the body first would race with its closing the connection)."""
    import http.client
    from urllib.parse import urlsplit

    url = urlsplit(server.client().url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.putrequest("POST", "/api/jobs")
        conn.putheader("Authorization", f"Bearer {server.client().token}")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(length))
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


BAD_FILES = [
    ("malformed.yaml", "jobs:\n  - {job_type: lstm, total_steps: 10\n", 400, "not valid YAML"),
    ("unknown-type.yaml", "jobs:\n  - {job_type: gpt-5, total_steps: 10}\n", 400, "unknown runtime job type 'gpt-5'"),
    ("entrypoint.yaml", "jobs:\n  - {entrypoint: nowhere/train.py:train, gpus: 1, total_steps: 10}\n", 400,
     "entrypoint"),
    ("negative.yaml", "jobs:\n  - {job_type: lstm, total_steps: -5}\n", 400, "total steps must be positive"),
    ("nan.yaml", "jobs:\n  - {job_type: lstm, total_steps: .nan}\n", 400, "total_steps must be a finite number"),
    ("too-big.yaml", "jobs:\n  - {job_type: resnet, total_steps: 10, scale_factor: 8}\n", 422,
     "needs 8 GPUs but the cluster has only"),
    ("late.yaml", "jobs:\n  - {job_type: lstm, total_steps: 10, arrival_s: 1e9}\n", 400, "arrival_s"),
    ("half-good.yaml", "jobs:\n  - {job_type: lstm, total_steps: 10}\n  - {job_type: lstm, total_steps: 0}\n", 400,
     "total steps must be positive"),
    ("jobs.txt", "lstm 10\n", 400, "unknown job file format"),
    ("no-function.yaml", "jobs:\n  - {entrypoint: 'hadar.runtime.workloads.image:nope', total_steps: 10}\n", 400,
     "no function 'nope' defined at the top level"),
    ("emulate.yaml", "jobs:\n  - {job_type: lstm, total_steps: 10, emulate_as: GPT-9}\n", 400, "emulate_as 'GPT-9'"),
]


@pytest.mark.parametrize(("name", "text", "status", "message"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_submission_is_refused_and_stores_nothing(server, tmp_path, capsys, name, text, status, message):
    before = _snapshot(server.state)
    rc = main(["submit", str(write(tmp_path / name, text)), "--state", str(server.state)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("hadar: error:") and "\n" not in err
    assert message in err and f"(HTTP {status})" in err, err
    assert _snapshot(server.state) == before


def test_missing_wrong_token_oversized_and_malformed_bodies(server, tmp_path, capsys, monkeypatch):
    before = _snapshot(server.state)
    good = json.dumps({"jobs": [{"job_type": "lstm", "total_steps": 10}]}).encode()
    code, body = _raw(server, "POST", "/api/jobs", good, token=None)
    assert code == 401 and body["error"].startswith("missing token")
    code, body = _raw(server, "POST", "/api/jobs", good, token="not-the-token")
    assert code == 401 and body["error"] == "wrong token"
    for path in ("/api/jobs", "/api/cluster", "/api/timeline", "/api/health", "/api/jobs/1/logs"):
        assert _raw(server, "GET", path, token=None)[0] == 401
    code, body = _declared_only(server, 3 << 20)
    assert code == 413 and "larger than" in body["error"]
    code, body = _raw(server, "POST", "/api/jobs", b"{not json")
    assert code == 400 and "not JSON" in body["error"]
    code, body = _raw(server, "POST", "/api/jobs", json.dumps({"jobs": "lstm"}).encode())
    assert code == 400 and body["error"].startswith("jobs:")
    code, body = _raw(server, "POST", "/api/jobs", json.dumps({"jobz": []}).encode())
    assert code == 400 and "jobz" in body["error"]
    code, body = _raw(server, "POST", "/api/jobs", json.dumps({"jobs": [{"job_type": "lstm", "total_steps": 5}],
                                                               "request_id": "../../x"}).encode())
    assert code == 400 and "request_id" in body["error"]
    big = {"file": {"name": "big.yaml", "text": "jobs:\n" + "  - {job_type: lstm, total_steps: 10}\n" * 40_000}}
    code, body = _raw(server, "POST", "/api/jobs", json.dumps(big).encode())
    assert code == 400 and "file.text: String should have at most 1048576 characters" in body["error"]
    huge = write(tmp_path / "huge.yaml", "jobs:\n" + "  - {job_type: lstm, total_steps: 10}\n" * 80_000)
    assert main(["submit", str(huge), "--state", str(server.state)]) == 2
    assert "larger than 1048576 bytes" in capsys.readouterr().err
    monkeypatch.setenv("HADAR_TOKEN", "wrong")
    assert main(["status", "--server", server.client().url]) == 2
    assert capsys.readouterr().err.strip() == "hadar: error: wrong token (HTTP 401)"
    monkeypatch.delenv("HADAR_TOKEN")
    assert main(["status", "--server", server.client().url]) == 2
    assert "HADAR_TOKEN" in capsys.readouterr().err
    for argv in (["cancel", "999999"], ["logs", "999999"], ["status", "999999"]):
        assert main([*argv, "--state", str(server.state)]) == 2
        assert capsys.readouterr().err.strip() == "hadar: error: no job 999999 (HTTP 404)"
    assert _snapshot(server.state) == before


COUNTER = """import time


def train(ctx):
    state = ctx.load_state() or {"n": 0}
    for _ in ctx.steps():
        time.sleep(0.02)  # long enough a lease to be measured (0.5 s at least)
        state["n"] += 1
    print(f"counted to {state['n']}")
    ctx.report(n=float(state["n"]))
    ctx.save_state(state)
"""


def test_an_entrypoint_job_runs_and_its_log_has_what_it_printed(server, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "train.py").write_text(COUNTER)
    jobs = write(mine / "jobs.yaml", "jobs:\n  - {name: counter, entrypoint: train.py:train, total_steps: 40}\n")
    assert main(["submit", str(jobs), "--state", str(server.state)]) == 0
    (job_id,) = map(int, capsys.readouterr().out.split())
    server.wait_for(lambda: server.jobs()[job_id]["status"] in ("done", "failed"), 240, "the counter job to end")
    job = server.jobs()[job_id]
    assert job["status"] == "done" and job["name"] == "counter" and job["job_type"] == "counter", job
    assert any(r["kind"] == "measured" for r in job["throughput"].values()), job["throughput"]
    assert main(["logs", str(job_id), "--state", str(server.state)]) == 0
    log = capsys.readouterr().out
    assert "arrived (counter, 1 GPU(s))" in log and "counted to 40" in log and log.strip().endswith("finished"), log
    other = tmp_path / "other"  # another function under the same name: refused, nothing stored
    other.mkdir()
    (other / "train.py").write_text(COUNTER.replace("+= 1", "+= 2"))
    before = _settled(server.state)
    rc = main(["submit", str(write(other / "jobs.yaml", jobs.read_text())), "--state", str(server.state)])
    err = capsys.readouterr().err
    assert rc == 2 and f"job {job_id} is also named 'counter'" in err and "(HTTP 400)" in err, err
    assert _snapshot(server.state) == before


def test_load_200_submissions_from_10_clients_then_1000_status_calls(server):
    client = server.client()
    before = set(server.jobs())

    def submit(n: int) -> list[int]:
        body = {"jobs": [{"job_type": "lstm", "total_steps": 20}], "request_id": f"load-{n:04d}-{uuid.uuid4().hex}"}
        res = client.request("POST", "/api/jobs", body)
        assert not res["duplicate"]
        again = client.request("POST", "/api/jobs", body)  # a retried request: the same ids, nothing stored
        assert again["duplicate"] and again["ids"] == res["ids"]
        return res["ids"]

    with ThreadPoolExecutor(10) as pool:
        ids = [i for got in pool.map(submit, range(200)) for i in got]
    assert len(ids) == 200 and len(set(ids)) == 200
    assert not set(ids) & before

    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: client.jobs(), range(1000)))
    for a in answers[-10:]:
        assert {j["id"] for j in a["jobs"]} == before | set(ids)
        assert all(j["status"] in ("queued", "running", "done", "failed", "cancelled") for j in a["jobs"])
    con = sqlite3.connect(f"file:{server.state / 'hadar.db'}?mode=ro", uri=True)
    try:
        assert con.execute("SELECT count(*) FROM jobs").fetchone()[0] == len(before) + 200
        assert con.execute("SELECT count(*) FROM submissions WHERE request_id LIKE 'load-%'").fetchone()[0] == 200
    finally:
        con.close()


def test_cancel_logs_and_status_json(server, tmp_path, capsys):
    jobs = write(tmp_path / "later.yaml", "jobs:\n  - {job_type: lstm, total_steps: 50, arrival_s: 600}\n")
    assert main(["submit", str(jobs), "--state", str(server.state)]) == 0
    (job_id,) = map(int, capsys.readouterr().out.split())
    assert main(["cancel", str(job_id), "--state", str(server.state)]) == 0
    assert capsys.readouterr().out.strip() == f"job {job_id}: cancelled"  # it had not arrived yet
    assert main(["cancel", str(job_id), "--state", str(server.state)]) == 2
    assert "already ended (cancelled) (HTTP 409)" in capsys.readouterr().err
    assert main(["status", "--json", "--state", str(server.state)]) == 0
    listed = json.loads(capsys.readouterr().out)
    row = next(j for j in listed["jobs"] if j["id"] == job_id)
    assert row["status"] == "cancelled" and row["progress"] == 0.0
    assert {"id", "name", "status", "progress", "submitted_s", "finished_s"} <= set(row)
    assert main(["logs", str(job_id), "--state", str(server.state)]) == 0
    assert capsys.readouterr().out.strip().endswith("cancelled")
