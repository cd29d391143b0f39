"""The service's parts without Ray: store, token and state directory, live source, submissions, node
watcher, Ray's token file, and `hadar serve` / client errors that come before anything starts."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import threading
import time
from pathlib import Path

import pytest

from hadar.cli import main
from hadar.clock import VirtualClock
from hadar.errors import InputError
from hadar.model.cluster import Cluster, Node
from hadar.model.job import Job
from hadar.runtime.nodes import NodeWatcher
from hadar.runtime.pool import NodePin, moved
from hadar.service import auth
from hadar.service.source import LiveSource
from hadar.service.specs import check_limits, job_from_spec, parse_job_file, to_new_jobs
from hadar.service.store import NewJob, Store, StoreError


def _new(name: str = "lstm", steps: float = 10.0) -> NewJob:
    return NewJob(name, "LSTM-LM (batch size 20)", 1, steps, {"job_type": "LSTM-LM (batch size 20)",
                  "scale_factor": 1, "total_steps": steps, "arrival_s": 0.0}, 0.0, 0.0)


def test_store_keeps_a_request_once_and_all_or_nothing(tmp_path):
    store = Store(tmp_path)
    first = store.submit([_new(), _new()], "req-00000001")
    again = store.submit([_new()], "req-00000001")
    assert first.ids == (1, 2) and not first.duplicate and again.ids == first.ids and again.duplicate
    with pytest.raises(sqlite3.IntegrityError):
        store.submit([_new(), NewJob("x", None, 1, 1.0, {}, 0.0, 0.0)], "req-00000002")  # type: ignore[arg-type]
    assert store.counts()["jobs"] == 2 and store.counts()["submissions"] == 1  # the bad one left nothing
    assert store.request_cancel(1) == "queued" and store.cancel_requested() == [1]
    assert store.request_cancel(99) is None
    run_id = store.run_id
    store.close()
    again_store = Store(tmp_path)  # reopened: the same run id, the same jobs
    assert again_store.run_id == run_id and [r["id"] for r in again_store.jobs()] == [1, 2]
    con = sqlite3.connect(tmp_path / "hadar.db")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="schema version 99"):
        Store(tmp_path)


def test_token_is_private_stable_and_compared_in_constant_time(tmp_path):
    state = auth.prepare_state_dir(tmp_path / "state")
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    token = auth.ensure_token(state)
    path = state / auth.TOKEN_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(token) >= 40
    os.chmod(path, 0o644)
    assert auth.ensure_token(state) == token and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert auth.token_matches(token, token) and not auth.token_matches(token[:-1] + "x", token)
    assert not auth.token_matches(None, token) and not auth.token_matches("", token)
    lock = auth.lock_state_dir(state)
    with pytest.raises(InputError, match="another hadar server"):
        auth.lock_state_dir(state)
    lock.close()
    auth.lock_state_dir(state).close()
    with pytest.raises(InputError, match="not a directory"):
        auth.prepare_state_dir(path)


def test_live_source_hands_out_arrivals_and_cancellations():
    clock = VirtualClock(100.0)
    src = LiveSource(clock)
    src.add([Job(2, "lstm", 1, 10, arrival_s=100.0), Job(3, "lstm", 1, 10, arrival_s=500.0)])
    assert src.next_arrival() == 100.0
    assert [j.job_id for j in src.pop_arrived(100.0)] == [2]
    assert src.next_arrival() is None  # 400 s ahead: not announced (the engine would sleep through news)
    assert src.cancel(3) is True and src.pop_arrived(1e9) == []  # still waiting here: dropped
    assert src.cancel(2) is False and src.pop_cancelled() == [2] and src.pop_cancelled() == []
    woke = []
    t = threading.Thread(target=lambda: woke.append(src.wait(30.0)))
    t.start()
    time.sleep(0.1)
    src.add([Job(4, "lstm", 1, 10, arrival_s=100.0)])
    t.join(5)
    assert woke == [True] and not src.done(0)
    src.stop()
    assert src.done(0)


def test_submissions_are_read_like_hadar_run_and_limited(tmp_path):
    jobs = parse_job_file("jobs:\n  - {job_type: lstm, total_steps: 10, arrival_s: 5}\n", "mine.yaml")
    assert jobs[0].job_type == "LSTM-LM (batch size 20)"
    (new,) = to_new_jobs(jobs, 1000.0)
    assert new.arrival_s == 1005.0 and new.submitted_s == 1000.0 and new.name == "lstm"
    assert jobs[0].train is not None and jobs[0].train.entrypoint == "hadar.runtime.workloads.language:train_lstm"
    expected = Job(7, "LSTM-LM (batch size 20)", 1, 10, arrival_s=1005.0, origin=jobs[0].origin, train=jobs[0].train)
    assert job_from_spec(7, json.loads(json.dumps(new.spec))) == expected  # as the store keeps it
    (row,) = to_new_jobs(parse_job_file("job_type,total_steps,source_id\nlstm,10,philly-7\n", "t.csv"), 0.0)
    assert job_from_spec(8, json.loads(json.dumps(row.spec))).extra == (("source_id", "philly-7"),)  # CSV extras
    old = {"job_type": "LSTM-LM (batch size 20)", "scale_factor": 1, "total_steps": 10, "arrival_s": 5.0}
    assert job_from_spec(3, old).train == jobs[0].train  # stored before jobs had entrypoints: resolved
    with pytest.raises(InputError, match=r"^mine.yaml: no jobs in file$"):
        parse_job_file("jobs: []\n", "mine.yaml")
    with pytest.raises(InputError, match="finite"):
        check_limits([Job(0, "lstm", 1, float("inf"))], "f")
    with pytest.raises(InputError, match="arrival_s"):
        check_limits([Job(0, "lstm", 1, 5, arrival_s=1e9)], "f")


class FakePool:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.pins = {n.name: NodePin(resource=f"hadar_node:{n.name}") for n in cluster.nodes}
        self.replaced: list[int] = []
        self.grown: list[str] = []

    def follow(self, cluster: Cluster, pins: dict[str, NodePin]) -> None:  # WorkerPool.follow, without Ray
        joined, back = moved(self.cluster, cluster)
        self.grown += [cluster.nodes[n].name for n in joined]
        self.replaced += [g for n in back for g in self.cluster.gpus_of_node(n)]
        self.pins.update(pins)
        self.cluster = cluster


def _ray_node(node_id: str, alive: bool, **resources: float) -> dict:
    return {"NodeID": node_id, "Alive": alive, "NodeManagerAddress": "127.0.0.1", "Resources": resources}


def test_node_watcher_sees_deaths_returns_and_joins():
    cluster = Cluster((Node("a", "v100", 2), Node("b", "p100", 1)))
    records = [_ray_node("1", True, **{"hadar_node:a": 2, "hadar_gpu:v100": 2}),
               _ray_node("2", True, **{"hadar_node:b": 1, "hadar_gpu:p100": 1})]
    pool = FakePool(cluster)
    watch = NodeWatcher(pool, min_interval_s=0.0, list_nodes=lambda: records)  # type: ignore[arg-type]
    assert watch.poll() is None  # nothing changed
    records[1] = {**records[1], "Alive": False}
    down = watch.poll()
    assert down is not None and down.down == frozenset({"b"}) and down.count("p100") == 0
    records.append(_ray_node("3", True, **{"hadar_node:b": 1, "hadar_gpu:p100": 1}))  # b restarted
    back = watch.poll()
    assert back is not None and not back.down and pool.replaced == [2]
    records.append(_ray_node("4", True, **{"hadar_node:c": 2, "hadar_gpu:k80": 2}))  # c joins
    joined = watch.poll()
    assert joined is not None and [n.name for n in joined.nodes] == ["a", "b", "c"] and joined.num_gpus == 5
    assert pool.grown == ["c"] and pool.cluster == joined
    local = NodeWatcher(FakePool(cluster), joins=False, min_interval_s=0.0,  # type: ignore[arg-type]
                        list_nodes=lambda: records)
    assert local.poll() is None  # a local emulated cluster takes no joins


def test_ray_token_file_is_made_private(tmp_path, monkeypatch):
    from hadar.runtime.session import ensure_private_token

    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
        monkeypatch.delenv(var, raising=False)
    ensure_private_token()
    token = tmp_path / ".ray" / "auth_token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(token.read_text()) == 64
    assert stat.S_IMODE(token.parent.stat().st_mode) == 0o700
    os.chmod(token, 0o644)  # as `ray get-auth-token --generate` leaves it
    ensure_private_token()
    assert stat.S_IMODE(token.stat().st_mode) == 0o600


@pytest.mark.parametrize(("argv", "message"), [
    (["serve", "--state", "{tmp}/s", "--round-s", "0"], "--round-s must be a positive number"),
    (["serve", "--state", "{tmp}/s", "--round-s", "nan"], "--round-s must be a positive number"),
    (["serve", "--state", "{tmp}/s", "--policy", "nope"], "nope"),
    (["serve", "--state", "{tmp}/s", "--cluster", "v100=40"], "more than 16"),
    (["serve", "--state", "{tmp}/s", "--port", "70000"], "--port must be in 0..65535"),
    (["serve", "--state", "{tmp}/s", "--fork-efficiency", "{tmp}/nope.json"], "fork-efficiency file not found"),
    (["serve", "--state", "{tmp}/s", "--tenants", "{tmp}/nope.yaml"], "tenants file not found"),
    (["serve", "--state", "{tmp}/s", "--tenants", "{tmp}/bad-type.yaml"], "quota names GPU type 'h100'"),
    (["serve", "--state", "{tmp}/s", "--tenants", "{tmp}/negative.yaml"], "quota of 'k80' must be a whole number"),
    (["serve", "--state", "{tmp}/s", "--tenants", "{tmp}/negative.yaml", "--min-run-s", "-1"], "--min-run-s"),
    (["submit", "{tmp}/jobs.yaml", "--state", "{tmp}/nowhere"], "no server address in"),
    (["status", "--server", "http://127.0.0.1:9"], "HADAR_TOKEN"),
    (["status", "--state", "{tmp}/a", "--server", "http://x"], "not both"),
])
def test_cli_errors_before_anything_starts(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.delenv("HADAR_TOKEN", raising=False)
    (tmp_path / "bad-type.yaml").write_text("teams:\n  a: {quota: {h100: 1}}\n")
    (tmp_path / "negative.yaml").write_text("teams:\n  a: {quota: {k80: -1}}\n")
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hadar: error:") and message in err and "\n" not in err
    assert not (tmp_path / "s" / "hadar.db").exists()


def test_client_reports_an_unreachable_server_in_one_line(tmp_path, capsys, monkeypatch):
    from hadar.service import client

    monkeypatch.setattr(client.time, "sleep", lambda s: None)
    state = auth.prepare_state_dir(tmp_path / "state")
    auth.ensure_token(state)
    auth.write_server_file(state, "http://127.0.0.1:9", 1)  # nothing listens on port 9
    assert main(["status", "--state", str(state)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hadar: error: cannot reach the hadar server at http://127.0.0.1:9") and "\n" not in err
    assert json.loads((state / "server.json").read_text())["url"] == "http://127.0.0.1:9"
    assert Path(state / "token").exists()


def test_serve_without_the_service_extra_says_what_to_install(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fastapi" else real(name, *a))
    assert main(["serve", "--state", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs the service extra (fastapi not installed)" in err and "pip install" in err and "\n" not in err
    assert not (tmp_path / "s").exists()  # checked before anything is made


def test_serve_hands_its_fork_efficiency_to_the_forking_planner(tmp_path, monkeypatch):
    """``hadar serve --fork-efficiency``: the service wires its engine with it (as ``hadar run`` does)."""
    from types import SimpleNamespace

    from hadar.model.fork_efficiency import ForkEfficiency
    from hadar.runtime import builder
    from hadar.service import scheduler

    seen = {}

    def wire(*args, **kw):
        seen.update(kw)
        raise RuntimeError("wired")

    monkeypatch.setattr(builder, "wire", wire)  # the one builder of `hadar run` and `hadar serve`
    calibrated = ForkEfficiency.load("calibrated")
    opts = scheduler.ServeOptions(state_dir=tmp_path, cluster=None, address=None, policy="hadare",
                                  fork_efficiency=calibrated)
    service = scheduler.Service(opts, Store(tmp_path))
    backend = SimpleNamespace(executor=SimpleNamespace(cluster=None, clock=service.clock),
                              tracker=SimpleNamespace(table=lambda: None))
    with pytest.raises(RuntimeError, match="wired"):
        service._wire(backend)
    assert seen["fork_efficiency"] is calibrated
    assert scheduler.ServeOptions(state_dir=tmp_path, cluster=None, address=None).fork_efficiency.ideal
