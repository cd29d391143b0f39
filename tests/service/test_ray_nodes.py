"""A real multi-node Ray cluster on this machine (`ray start`: a head and worker nodes, each its own raylet):
docs/run.md's `--address` recipe, run as written; then `hadar serve --address` while a node is
killed (its raylet, agents and workers: SIGKILL) and another joins.

Isolation: HOME is a scratch folder (the token goes to its ~/.ray), Ray's temp folder and every port are
the test's own, every node's processes are in their own process group, and the nodes report dead
quickly (short health checks on the head)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.service.conftest import Server, events, write

pytestmark = pytest.mark.runtime
README = Path(__file__).resolve().parents[2] / "docs/run.md"
BIN = Path(sys.executable).parent
HEALTH = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "4",
          "RAY_health_check_timeout_ms": "1000", "RAY_health_check_initial_delay_ms": "1000"}
STARTUP_TIMEOUT = "timed out during startup"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def recipe() -> list[str]:
    """The commands of the README's `--address` block (comments dropped)."""
    text = README.read_text()
    block = text[text.index("## A real Ray cluster (`--address`)"):]
    block = block[block.index("```bash") + 7:]
    block = block[:block.index("```")]
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _procs() -> list[tuple[int, int, int, str]]:
    """(pid, parent pid, process group, command line) of every process, from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        out.append((int(entry.name), int(stat_fields[1]), int(stat_fields[2]), cmd))
    return out


def _sigkill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


class RayNodes:
    """The nodes of one `ray start` cluster, each in its own process group."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.home.mkdir()
        self.temp = Path(f"/tmp/hdr-{os.getpid()}-{root.name[-6:]}")  # Ray's socket paths must stay short
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.groups: dict[str, int] = {}
        self.env = {**os.environ, "HOME": str(self.home), "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
        for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS"):
            self.env.pop(var, None)

    def sh(self, line: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", line], check=False, env={**self.env, **extra}, capture_output=True,
                              text=True,
                              timeout=300, cwd=self.root)

    def start(self, line: str, name: str) -> None:
        """A documented `ray start` line, made local: this test's port, temp folder and loopback address."""
        line = line.replace("HEAD:6379", self.address).replace("--port=6379", f"--port={self.port}")
        own = ["--node-ip-address=127.0.0.1", "--num-cpus=1", f"--dashboard-agent-listen-port={_free_port()}",
               f"--metrics-export-port={_free_port()}"]
        if "--head" in line:
            own += [f"--temp-dir={self.temp}", "--include-dashboard=false", f"--ray-client-server-port={_free_port()}",
                    f"--dashboard-port={_free_port()}"]
        for attempt in range(2):  # Ray gives a raylet 30 s (fixed) to register; a loaded machine can miss it once
            proc = subprocess.Popen(["bash", "-c", line + " " + " ".join(own)], env={**self.env, **HEALTH},
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                    cwd=self.root)
            self.groups[name] = proc.pid
            text = proc.communicate(timeout=180)[0].decode(errors="replace")
            if proc.returncode == 0 or attempt or STARTUP_TIMEOUT not in text or "--head" in line:
                break
            self.kill(name, require_raylet=False)
        assert proc.returncode == 0, text[-3000:]

    def add_node(self, name: str, gpu_type: str, gpus: int) -> None:
        res = json.dumps({f"hadar_node:{name}": gpus, f"hadar_gpu:{gpu_type}": gpus})
        self.start(f"RAY_AUTH_MODE=token ray start --address=HEAD:6379 --resources='{res}'", name)

    def kill(self, name: str, require_raylet: bool = True) -> None:
        """SIGKILL every process of one node: its group (raylet, agents) and the raylet's workers."""
        pgid = self.groups.pop(name)
        procs = _procs()
        victims = {pid for pid, _, group, _ in procs if group == pgid}
        grew = True
        while grew:  # and their descendants (workers start sessions of their own)
            more = {pid for pid, parent, _, _ in procs if parent in victims} - victims
            victims |= more
            grew = bool(more)
        assert not require_raylet or any("raylet" in cmd for pid, _, _, cmd in procs if pid in victims), \
            f"no raylet of {name} to kill"
        for pid in victims:
            _sigkill(pid)

    def close(self) -> None:
        for name in list(self.groups):
            with contextlib.suppress(AssertionError):
                self.kill(name)
        for pid, _, _, cmd in _procs():  # what outlived its group, found by this cluster's temp folder
            if str(self.temp) in cmd:
                _sigkill(pid)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nodes = RayNodes(tmp_path_factory.mktemp("raynodes"))
    yield nodes
    nodes.close()


def test_the_readme_address_recipe_works_as_written(cluster):
    lines = recipe()
    assert [ln.split()[0] for ln in lines] == ["ray", "chmod", "RAY_AUTH_MODE=token", "RAY_AUTH_MODE=token", "hadar"]
    gen, chmod, head, worker, driver = lines
    assert cluster.sh(gen).returncode == 0
    token = cluster.home / ".ray" / "auth_token"
    assert cluster.sh(chmod).returncode == 0
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    cluster.start(head, "node-a")
    cluster.start(worker, "node-b")
    jobs = write(cluster.root / "jobs.yaml", "jobs:\n  - {job_type: lstm, total_steps: 300}\n"
                 "  - {job_type: recoder, total_steps: 600}\n")
    run = driver.replace("HEAD:6379", cluster.address).replace("jobs.yaml", shlex.quote(str(jobs)))
    run = run.replace("/shared/hadar-ckpt", shlex.quote(str(cluster.root / "ckpt"))) + " --json --round-s 3"
    done = cluster.sh(run)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["jobs_completed"] == 2 and summary["ray_auth"] == "token"


def _gpus_of(server: Server, node: str) -> list[int]:
    view = server.client().request("GET", "/api/cluster")
    return [g["id"] for n in view["nodes"] if n["name"] == node for g in n["gpus"]]


def _node_up(server: Server, node: str) -> bool | None:
    view = server.client().request("GET", "/api/cluster")
    return next((n["up"] for n in view["nodes"] if n["name"] == node), None)


def test_serve_survives_a_dead_node_and_uses_a_joined_one(cluster, tmp_path):
    if "node-a" not in cluster.groups:  # run alone: build the README's two nodes
        test_the_readme_address_recipe_works_as_written(cluster)
    server = Server(tmp_path / "state", "--address", cluster.address, "--round-s", "3",
                    env={"HOME": str(cluster.home)})
    try:
        server.start()
        assert _gpus_of(server, "node-a") == [0, 1] and _gpus_of(server, "node-b") == [2]  # ids follow names
        jobs = "jobs:\n" + "  - {job_type: lstm, total_steps: 1200}\n" * 3
        ids = server.client().submit_file(write(tmp_path / "jobs.yaml", jobs))["ids"]

        def on_b() -> int | None:
            return next((j["id"] for j in server.jobs().values() if j["held_gpus"] == [2] and j["done_steps"] > 0),
                        None)

        server.wait_for(lambda: on_b() is not None, 240, "a job to make progress on node-b")
        victim = on_b()
        cluster.kill("node-b")
        killed_at = time.monotonic()
        server.wait_for(lambda: _node_up(server, "node-b") is False, 60, "node-b to leave the cluster view")
        assert time.monotonic() - killed_at < 30
        server.wait_for(lambda: all(server.jobs()[i]["status"] == "done" for i in ids), 400, "every job to finish")
        leases = [e for e in events(server.state, "lease") if e["job"] == victim]
        moved = [e for e in leases if 2 not in e["gpus"]]
        assert moved and moved[0]["progress_from"] > 0 and moved[0]["restored"], leases  # from its checkpoint
        assert any(e["event"] == "cluster" and "node-b" in e["down"] for e in events(server.state, "cluster"))

        cluster.add_node("node-c", "v100", 1)  # a node joins
        server.wait_for(lambda: _node_up(server, "node-c") is True, 60, "node-c to join the cluster view")
        assert _gpus_of(server, "node-c") == [3]
        more = server.client().submit_file(write(tmp_path / "more.yaml", "jobs:\n" + "  - {job_type: lstm, "
                                                 "total_steps: 400}\n" * 3))["ids"]
        server.wait_for(lambda: all(server.jobs()[i]["status"] == "done" for i in more), 300, "the new jobs")
        assert any(3 in e["gpus"] for e in events(server.state, "lease") if e["job"] in more), "node-c unused"
    finally:
        server.stop()


def test_recipe_lines_have_no_stray_placeholders():
    for line in recipe():
        assert not re.search(r"<[A-Z_]+>", line), line
