"""Running `hadar serve` as a real process for the service tests.

Each server runs in its own session (process group), so a test can SIGKILL
the server alone, as a crash would, and still clean up what Ray left behind
(its agents outlive a killed driver) by the group id.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hadar.service.client import Client

START_TIMEOUT_S = 240.0  # Ray start + worker actors, on a busy 2-core machine
REPO = Path(__file__).resolve().parents[2]


class Server:
    """One `hadar serve` process on a state directory (port chosen by the OS)."""

    cwd: Path | None = None  # where it runs (None: here)

    def __init__(self, state: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.state, self.args = state, args
        self.log = state.parent / f"{state.name}-server.log"
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.groups: list[int] = []

    def command(self) -> list[str]:
        return [sys.executable, "-m", "hadar.cli", "serve", "--state", str(self.state), "--port", "0", "-v",
                *self.args]

    def start(self, wait_running: bool = True) -> Server:
        (self.state / "server.json").unlink(missing_ok=True)
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, env=self.env, cwd=self.cwd)
        self.groups.append(self.proc.pid)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (self.state / "server.json").exists():
            self._check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"server did not start:\n{self.output()}")
            time.sleep(0.2)
        if wait_running:
            self.wait_for(lambda: self.client().request("GET", "/api/health")["state"] == "running",
                          START_TIMEOUT_S, "the scheduler to run")
        return self

    def client(self) -> Client:
        return Client.locate(self.state, None)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def _check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.output()}")

    def wait_for(self, cond: Any, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            self._check_alive()
            if cond():
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}:\n{self.output()}")
            time.sleep(0.5)

    def jobs(self) -> dict[int, dict[str, Any]]:
        return {j["id"]: j for j in self.client().jobs()["jobs"]}

    def kill9(self) -> None:
        """SIGKILL the server process alone (a crash); then clear what Ray left in its group."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        time.sleep(1.0)
        _killpg(self.proc.pid)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        for group in self.groups:
            _killpg(group)


class ApiServer(Server):
    """The API alone (``tests.service.apiserver``): no Ray, no engine; jobs are checked and stored, never run.
    ``-vv``: the server logs everything it would (the tests read its log); ``args``: ``--access-log``."""

    cwd = REPO

    def command(self) -> list[str]:
        return [sys.executable, "-m", "tests.service.apiserver", "--state", str(self.state), "-vv", *self.args]

    def start(self, wait_running: bool = False) -> Server:
        super().start(wait_running=False)
        self.wait_for(lambda: self.client().request("GET", "/api/health")["state"] == "starting", START_TIMEOUT_S,
                      "the API to answer")
        return self


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def snapshot(state: Path) -> dict[str, list[tuple]]:
    """Every row of every table (the database must not change on a rejected request)."""
    import sqlite3

    con = sqlite3.connect(f"file:{state / 'hadar.db'}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: con.execute(f"SELECT * FROM {t}").fetchall() for t in tables}
    finally:
        con.close()


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def events(state: Path, kind: str | None = None) -> list[dict[str, Any]]:
    """The events table of a state directory, oldest first (read directly, as a post-mortem would)."""
    import sqlite3

    con = sqlite3.connect(state / "hadar.db")
    try:
        rows = con.execute("SELECT seq, kind, data FROM events ORDER BY seq").fetchall()
    finally:
        con.close()
    out = [{"seq": seq, **json.loads(data)} for seq, k, data in rows if kind is None or k == kind]
    return out


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Any]:
    servers: list[Server] = []

    def make(*args: str, state: Path | None = None, env: dict[str, str] | None = None) -> Server:
        server = Server(state or tmp_path / "state", *args, env=env)
        servers.append(server)
        return server

    yield make
    for s in servers:
        s.stop()
