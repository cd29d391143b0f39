"""`hadar serve` survives kill -9: every job ends done, none runs twice from scratch, at most the round in
flight is lost, and a job that had finished never runs again."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hadar.runtime import checkpoint
from tests.service.conftest import events, write

JOBS = """jobs:
  - {job_type: lstm, total_steps: 150}
  - {job_type: lstm, total_steps: 750}
  - {job_type: recoder, total_steps: 1500}
  - {job_type: transformer, total_steps: 450}
  - {job_type: resnet, total_steps: 350, arrival_s: 1}
"""


def _committed(state: Path) -> tuple[int, dict[int, tuple[str, float]]]:
    """(last event seq, job id -> (status, done steps)) as the killed server left them on disk."""
    con = sqlite3.connect(state / "hadar.db")
    try:
        seq = con.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]
        jobs = {i: (s, d) for i, s, d in con.execute("SELECT id, status, done_steps FROM jobs")}
    finally:
        con.close()
    return int(seq), jobs


@pytest.mark.runtime
def test_kill_9_and_restart_resumes_every_job(server_factory, tmp_path):
    state = tmp_path / "state"
    server = server_factory("--round-s", "3", state=state).start()
    ids = server.client().submit_file(write(tmp_path / "jobs.yaml", JOBS))["ids"]
    assert len(ids) == 5

    def mid_run() -> bool:
        jobs = server.jobs()
        short_done = jobs[ids[0]]["status"] == "done"
        started = [j for j in jobs.values() if j["status"] != "done" and j["done_steps"] > 0]
        return short_done and len(started) >= 2

    server.wait_for(mid_run, 240, "the short job to finish and two others to make progress")
    server.kill9()

    boundary, before = _committed(state)
    ckpt = {i: checkpoint.load(checkpoint.checkpoint_path(state / "checkpoints", i)) for i in ids}
    ckpt_steps = {i: float(checkpoint.meta_of(c).get("steps", 0.0)) for i, c in ckpt.items()}
    assert before[ids[0]][0] == "done"
    in_flight = [i for i in ids if before[i][0] != "done" and before[i][1] > 0]
    assert in_flight, before

    server.start()  # the same state directory
    server.wait_for(lambda: all(j["status"] == "done" for j in server.jobs().values()), 400, "every job to finish")

    jobs = server.jobs()
    assert sorted(jobs) == sorted(ids)  # nothing lost, nothing duplicated
    leases = events(state, "lease")
    resumed = {e["job"]: e for e in events(state, "resumed")}
    for i in ids:
        mine = [e for e in leases if e["job"] == i]
        after = [e for e in mine if e["seq"] > boundary]
        assert sum(1 for e in mine if e["progress_from"] == 0) == 1, (i, mine)  # started from scratch once
        assert jobs[i]["done_steps"] == pytest.approx(jobs[i]["total_steps"])
        if before[i][0] == "done":
            assert not after, f"job {i} had finished before the kill and ran again: {after}"
            continue
        if before[i][1] > 0:
            # resumed from its checkpoint: what the store had committed, or more (a lease that wrote its
            # checkpoint but was not committed before the kill; or a worker that outlived the killed server
            # by a moment and finished its lease); so at most the round in flight is lost
            assert ckpt_steps[i] >= before[i][1] - 1e-6
            assert resumed[i]["progress"] >= ckpt_steps[i] - 1e-6
            assert after[0]["progress_from"] == pytest.approx(resumed[i]["progress"]) and after[0]["restored"]
    assert set(resumed) >= set(in_flight)
