"""A restart is complete: a replay through the service's store, stopped (or killed) mid-way and resumed
from the store, ends with the same jobs.csv, byte for byte, as the uninterrupted run."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hadar.config import parse_cluster
from hadar.model.throughput import ThroughputTable
from hadar.service.replay import ReplayOptions, replay
from hadar.sim.generate import JobGenerator
from hadar.sim.run import SimResult, write_outputs

TABLE = ThroughputTable.load()
CLUSTER = parse_cluster("8:8:8", 4)
#: Jobs that arrive over time and queue (so the policy's memory, the planner's counters and the cadence matter).
JOBS = tuple(j for _, j in zip(range(24), JobGenerator(TABLE, 6.0, seed=11, multi_gpu=True), strict=False))


def _csv(tmp: Path, result) -> bytes:
    write_outputs(SimResult(result.summary, result.rows), tmp)
    return (tmp / "jobs.csv").read_bytes()


@pytest.mark.parametrize("policy", ["fifo_perf", "allox", "max_min_fairness_perf", "hadar"])
def test_a_replay_stopped_every_few_rounds_ends_as_the_uninterrupted_one(tmp_path, policy):
    whole = replay(ReplayOptions(tmp_path / "whole", JOBS, CLUSTER, TABLE, policy=policy))
    assert whole.finished and not whole.resumed
    assert all(r.finish_s is not None for r in whole.rows)
    runs = 0
    while True:
        part = replay(ReplayOptions(tmp_path / "parts", JOBS, CLUSTER, TABLE, policy=policy, stop_after=12))
        runs += 1
        assert part.resumed == (runs > 1)
        if part.finished:
            break
        assert runs < 200
    assert runs >= 3  # it really was cut, and resumed more than once
    assert _csv(tmp_path / "a", whole) == _csv(tmp_path / "b", part)


def test_a_replay_of_other_settings_is_refused(tmp_path):
    replay(ReplayOptions(tmp_path, JOBS[:3], CLUSTER, TABLE, policy="fifo_perf"))
    from hadar.errors import InputError

    with pytest.raises(InputError, match=r"holds another replay \(policy fifo_perf"):
        replay(ReplayOptions(tmp_path, JOBS[:3], CLUSTER, TABLE, policy="hadar"))


def _rounds(state: Path) -> int:
    db = state / "hadar.db"
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0) as con:
            return int(con.execute("SELECT count(*) FROM rounds").fetchone()[0])
    except sqlite3.Error:  # not created yet
        return 0


def test_kill_9_mid_replay_and_the_rerun_gives_the_same_jobs_csv(tmp_path):
    """The CLI as an operator runs it: ``kill -9`` once the store has some rounds, then the same command again."""
    args = ["--trace", "max_min_fairness", "--policy", "max_min_fairness_perf", "--no-progress", "-q"]
    cmd = [sys.executable, "-m", "hadar.cli", "replay"]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    subprocess.run([*cmd, "--state", str(tmp_path / "whole"), "--out", str(tmp_path / "a"), *args], check=True,
                   env=env, timeout=600)
    state = tmp_path / "killed"
    proc = subprocess.Popen([*cmd, "--state", str(state), *args], env=env)
    try:
        deadline = time.monotonic() + 300
        while _rounds(state) < 40 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the replay ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL and 40 <= _rounds(state) < 173
    subprocess.run([*cmd, "--state", str(state), "--out", str(tmp_path / "b"), *args], check=True, env=env,
                   timeout=600)
    assert (tmp_path / "a" / "jobs.csv").read_bytes() == (tmp_path / "b" / "jobs.csv").read_bytes()
