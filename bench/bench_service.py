"""Latency of the service's API under load (prints; no asserts).

Starts `hadar serve` on the emulated demo cluster (a fresh state directory),
then: 200 submissions (one job each) from 10 concurrent clients, then 1,000
status calls (`GET /api/jobs`, the full list: 200 jobs) from 10 concurrent
clients, then 1,000 more from one client, while the scheduler runs the jobs
(its training workers take the machine's cores). Checks that no submission was
lost or duplicated, and prints the p50/p99 latency of submit and status.
Goal: p99 status under 50 ms with 200 jobs. The latencies include a new
HTTP connection per call (the client's urllib).

Run: ``.venv/bin/python bench/bench_service.py [--submissions 200] [--status-calls 1000] [--clients 10]
[--policy max_min_fairness_perf]`` (about 1-2 minutes on 2 cores, most of it starting Ray).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hadar.errors import HadarError
from hadar.service.client import Client


def start_server(state: Path, policy: str) -> subprocess.Popen[bytes]:
    log = open(state.parent / "server.log", "wb")  # noqa: SIM115 - the server's output, kept for a post-mortem
    proc = subprocess.Popen([sys.executable, "-m", "hadar.cli", "serve", "--state", str(state), "--port", "0",
                             "--policy", policy, "--round-s", "5"], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while True:
        if proc.poll() is not None:
            sys.exit(f"the server exited; see {state.parent / 'server.log'}")
        if (state / "server.json").exists() and _running(state):
            return proc
        if time.monotonic() > deadline:
            sys.exit("the server did not start in 300 s")
        time.sleep(0.5)


def _running(state: Path) -> bool:
    try:
        return Client.locate(state, None).request("GET", "/api/health")["state"] == "running"
    except HadarError:  # not listening yet
        return False


def timed(fn, *args):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--submissions", type=int, default=200)
    ap.add_argument("--status-calls", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--policy", default="max_min_fairness_perf")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hadar-bench-") as tmp:
        state = Path(tmp) / "state"
        proc = start_server(state, args.policy)
        try:
            run(state, args)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # what Ray may leave behind


def run(state: Path, args: argparse.Namespace) -> None:
    clients = [Client.locate(state, None) for _ in range(args.clients)]

    def submit(n: int) -> tuple[float, list[int]]:
        body = {"jobs": [{"job_type": "lstm", "total_steps": 200}], "request_id": f"bench-{uuid.uuid4().hex}"}
        dt, res = timed(clients[n % len(clients)].request, "POST", "/api/jobs", body)
        return dt, res["ids"]

    def status(n: int) -> tuple[float, int]:
        dt, res = timed(clients[n % len(clients)].jobs)
        return dt, len(res["jobs"])

    with ThreadPoolExecutor(args.clients) as pool:
        subs = list(pool.map(submit, range(args.submissions)))
    ids = [i for _, got in subs for i in got]
    with ThreadPoolExecutor(args.clients) as pool:
        stats = list(pool.map(status, range(args.status_calls)))
    alone = [status(0) for _ in range(args.status_calls)]
    listed = {j["id"] for j in clients[0].jobs()["jobs"]}
    lost = len(set(ids) - listed)
    dup = len(ids) - len(set(ids))
    print(f"{args.submissions} submissions from {args.clients} clients: {len(set(ids))} jobs stored, "
          f"{lost} lost, {dup} duplicated")
    for name, samples in ((f"submit, {args.clients} clients", [dt for dt, _ in subs]),
                          (f"status, {args.clients} clients", [dt for dt, _ in stats]),
                          ("status, 1 client", [dt for dt, _ in alone])):
        ms = [1000 * s for s in samples]
        print(f"{name:>18}: {len(ms)} calls, p50 {percentile(ms, 50):6.1f} ms, p99 {percentile(ms, 99):6.1f} ms, "
              f"max {max(ms):6.1f} ms")
    print(f"status calls listed {min(n for _, n in stats)}-{max(n for _, n in stats)} jobs; goal: p99 status "
          "< 50 ms with 200 jobs")


if __name__ == "__main__":
    main()
