"""Acceptance of hadar on Slurm, on a cluster layout the tests never use (prints a pass/fail table, writes JSON).

Starts a throwaway local Slurm with accounting (``tests/slurm/localcluster.py``: munge, MariaDB, slurmdbd,
slurmctld with hadar's ``job_submit.lua``, one slurmd per node, on loopback ports in a temporary folder; the
daemons must be installed: ``.ci/install-slurm.sh``) of the layout ``--layout`` gives, then:

1. ``hadar run --slurm --jobs FILE --policy hadar`` (the real command line, as a subprocess) on a job file
   mixing bundled workloads and a user's ``train(ctx)`` job: every job completed; some job ran on two GPU
   types (sacct's typed records: ``summary.json``'s ``sacct_gpu_seconds``); jobs were preempted (unfinished,
   a round without a lease, or the next lease on another node) and resumed from their checkpoints (the user
   jobs' saved step count is exactly their size: every lease went on from the last); nothing of hadar's left
   in squeue or the process table.
2. ``hadar serve --slurm --policy hadar``: the same file submitted over HTTP, a user's plain ``sbatch
   --comment=hadar`` job held by the plugin, the server killed with SIGKILL while a round runs and started
   again on the same state, then slurmctld stopped for 5 s while a round runs: every job done and finished
   exactly once, the user's job run by hadar's release (recorded once), ``hadar usage`` from sacct, nothing
   left afterwards. The server and its leases run with Ray blocked (a ``ray`` package that fails to import
   comes first on their path): no Ray is needed.

Run: ``.venv/bin/python bench/slurm_acceptance.py [--layout v100:1x2,p100:1x1,k80:1x2] [--round-s 30]
[--json FILE]`` (about 10 minutes on 2 busy cores; the cluster is stopped at the end). ``--layout``:
``TYPE:GPUSxNODES,...``. Exit status 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from itertools import pairwise
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.slurm.localcluster: the local cluster the tests use

from hadar.runtime import checkpoint  # noqa: E402
from hadar.service.client import Client  # noqa: E402
from tests.slurm import accounting  # noqa: E402
from tests.slurm.localcluster import LocalSlurm, NodeSpec, start  # noqa: E402

#: The tests use one node per type (tests/slurm); this has two nodes of two types, 5 GPUs (on a small machine
#: each GPU is a lease process at once, each importing torch).
LAYOUT = "v100:1x2,p100:1x1,k80:1x2"
PY = sys.executable
USER_JOB = '''"""A user's job against hadar's job API: counts its steps on the trajectory it resumes from."""
import time


def train(ctx):
    state = ctx.load_state()
    seen = 0 if state is None else int(state["seen"])
    for _ in ctx.steps():
        time.sleep(float(ctx.args.get("step_s", 0.02)))
        seen += 1
    ctx.report(seen=seen)
    ctx.save_state({"seen": seen})
'''
USER_SBATCH = "#!/bin/sh\nsleep 8\necho ran on $SLURMD_NODENAME with $CUDA_VISIBLE_DEVICES > {out}\n"
Check = dict[str, Any]


def parse_layout(text: str) -> list[NodeSpec]:
    nodes: list[NodeSpec] = []
    for part in text.split(","):
        gpu_type, _, shape = part.strip().partition(":")
        gpus, _, count = shape.partition("x")
        for _ in range(int(count or 1)):
            nodes.append(NodeSpec(f"n{len(nodes)}-{gpu_type}", gpu_type, int(gpus)))
    return nodes


def job_file(folder: Path) -> tuple[Path, dict[int, int]]:
    """The jobs: two bundled workloads (small: a step of theirs takes seconds on a busy CPU) and five of the
    user's job (7 jobs on the default layout's 5 GPUs); (the file, user job index -> its steps)."""
    (folder / "userjob.py").write_text(USER_JOB)
    user = {2: 900, 3: 1100, 4: 1000, 5: 1200, 6: 800}
    lines = ["jobs:", "  - {job_type: lstm, total_steps: 4}", "  - {job_type: recoder, total_steps: 20}"]
    lines += [f"  - {{name: counter, entrypoint: userjob.py:train, total_steps: {n}, args: {{step_s: 0.02}}}}"
              for n in user.values()]
    path = folder / "jobs.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path, user


def check(name: str, ok: bool, detail: Any) -> Check:
    return {"check": name, "ok": bool(ok), "detail": detail}


def hadar_env(cluster: LocalSlurm, no_ray: Path | None = None) -> dict[str, str]:
    """hadar's environment; with ``no_ray``, a folder whose ``ray`` package fails to import comes first."""
    first = [] if no_ray is None else [str(no_ray)]
    return {**cluster.env, "PYTHONPATH": os.pathsep.join([*first, str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}


def block_ray(folder: Path) -> Path:
    """A folder with a ``ray`` package that cannot be imported (as if Ray were not installed)."""
    (folder / "ray").mkdir(parents=True)
    (folder / "ray" / "__init__.py").write_text('raise ImportError("ray is not installed (blocked)")\n')
    return folder


def leftovers(cluster: LocalSlurm, folder: Path) -> Check:
    """Nothing of hadar's on Slurm (a hadar job not ended) or in the process table (anything run from
    ``folder``: servers, leases, the user's script)."""
    jobs = json.loads(cluster.run("squeue", "--states=all", "--json").stdout)["jobs"]
    live = [j["job_id"] for j in jobs if j["job_state"] in ("PENDING", "RUNNING", "COMPLETING")
            and (str(j.get("comment", "")).startswith("hadar") or str(j.get("name", "")).startswith("hadar"))]
    daemons = {p.pid for p in cluster.procs.values()} | {os.getpid()}
    found = subprocess.run(["pgrep", "-f", str(folder)], capture_output=True, text=True, check=False).stdout.split()
    procs = [cmdline(int(p)) for p in found if int(p) not in daemons]
    procs = [c for c in procs if c]  # (gone meanwhile)
    return check("nothing left in squeue or the process table", not live and not procs,
                 {"slurm_jobs": live, "processes": procs})


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def saved_seen(work: Path, job_id: int) -> int | None:
    saved = checkpoint.load(checkpoint.checkpoint_path(work / "checkpoints", job_id))
    return None if saved is None else int(saved["state"]["seen"])


def preempted_and_resumed(leases: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Jobs that lost their GPU while unfinished: a round without a lease between two leases (``waited``), or
    the next lease on another node (``moved``: its node went to another job); jobs whose later lease
    restored the checkpoint the earlier one saved (``resumed``)."""
    by_job: dict[int, list[dict[str, Any]]] = {}
    for rec in sorted(leases, key=lambda r: int(r["round"])):
        if rec.get("mode", "train") == "train":
            by_job.setdefault(int(rec["job"]), []).append(rec)
    waited, moved = [], []
    for job, recs in sorted(by_job.items()):
        pairs = list(pairwise(recs))
        if any(int(b["round"]) - int(a["round"]) > 1 for a, b in pairs):
            waited.append(job)
        if any(a["node"] != b["node"] for a, b in pairs):
            moved.append(job)
    resumed = sorted({j for j, recs in by_job.items() if any(r.get("restored") for r in recs[1:])})
    return {"waited": waited, "moved": moved, "resumed": resumed}


def run_part(cluster: LocalSlurm, folder: Path, round_s: float) -> tuple[list[Check], dict[str, Any]]:
    jobs, user = job_file(folder / "run")  # (folder made by the caller)
    out = folder / "run" / "out"
    t0 = time.monotonic()
    proc = subprocess.run([PY, "-m", "hadar.cli", "run", "--slurm", "--jobs", str(jobs), "--policy", "hadar",
                           "--round-s", str(round_s), "--out", str(out), "--json", "--no-progress"],
                          env=hadar_env(cluster), capture_output=True, text=True, timeout=3600, check=False)
    wall = time.monotonic() - t0
    try:
        summary = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return [check("hadar run --slurm completes every job", False, proc.stderr[-2000:])], {"wall_s": wall}
    leases = [json.loads(line) for line in (out / "leases.jsonl").read_text().splitlines()]
    sacct = summary.get("sacct_gpu_seconds") or {}
    two = {j: sorted(t) for j, t in sacct.items() if len(t) >= 2}
    pre = preempted_and_resumed(leases)
    seen = {i: saved_seen(out / "slurm", i) for i in user}
    checks = [
        check("run: every job completed", proc.returncode == 0 and summary["jobs_completed"] == 2 + len(user),
              {"exit": proc.returncode, "completed": summary.get("jobs_completed"), "rounds": summary.get("rounds")}),
        check("run: a job ran on two GPU types (sacct)", bool(two), two or summary.get("sacct_error")),
        check("run: jobs preempted and resumed from checkpoints",
              bool(set(pre["waited"] + pre["moved"]) & set(pre["resumed"])), pre),
        check("run: the user's jobs' steps continue across leases", seen == user, {"saved": seen, "size": user}),
    ]
    return checks, {"wall_s": round(wall, 1), "leases": len(leases), "rounds": summary.get("rounds"),
                    "sacct_gpu_seconds": sacct, "makespan_s": summary.get("makespan_s")}


class Serve:
    """One ``hadar serve --slurm`` process on ``state`` (its own session: SIGKILL ends it alone)."""

    def __init__(self, cluster: LocalSlurm, state: Path, round_s: float) -> None:
        self.cmd = [PY, "-m", "hadar.cli", "serve", "--slurm", "--state", str(state), "--port", "0", "--policy",
                    "hadar", "--round-s", str(round_s), "-v"]
        self.env, self.state = hadar_env(cluster, block_ray(state.parent / "noray")), state
        self.log = state.parent / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Client:
        (self.state / "server.json").unlink(missing_ok=True)
        with self.log.open("ab") as f:
            self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        wait_for((self.state / "server.json").exists, 120, "the server to start", self)
        client = Client.locate(self.state, None)
        wait_for(lambda: client.request("GET", "/api/health")["state"] == "running", 120, "the scheduler", self)
        return client

    def alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"the server exited ({self.proc.returncode}): {self.log.read_text()[-3000:]}")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc is not None else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9


def wait_for(cond: Callable[[], bool], timeout_s: float, what: str, server: Serve | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if server is not None:
            server.alive()
        try:
            if cond():
                return
        except (OSError, ValueError, KeyError):
            pass  # the server not answering yet
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.5)


def hadar_running(cluster: LocalSlurm) -> list[int]:
    jobs = json.loads(cluster.run("squeue", "--states=all", "--json").stdout)["jobs"]
    return [j["job_id"] for j in jobs if j["job_state"] == "RUNNING" and str(j.get("comment", "")).startswith("hadar:")]


def db_rows(state: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(state / "hadar.db")) as con:
        return list(con.execute(sql).fetchall())


def serve_part(cluster: LocalSlurm, folder: Path, round_s: float) -> tuple[list[Check], dict[str, Any]]:
    jobs, user = job_file(folder / "serve")
    state = folder / "serve" / "state"
    script = folder / "serve" / "user.sh"
    script.write_text(USER_SBATCH.format(out=folder / "serve" / "user.out"))
    sbatch = cluster.run("sbatch", "--parsable", "--comment=hadar", "--gres=gpu:1",
                         f"--output={folder / 'serve' / 'user.log'}", str(script))
    user_slurm = int(sbatch.stdout.strip())
    server = Serve(cluster, state, round_s)
    t0, ctld_restarted = time.monotonic(), False
    try:
        client = server.start()
        ids = client.submit_file(jobs)["ids"]

        def mid_round() -> bool:
            rows = client.jobs()["jobs"]
            return any(0 < j["done_steps"] < j["total_steps"] for j in rows) and bool(hadar_running(cluster))

        wait_for(mid_round, 900, "progress and a round in flight", server)
        in_flight = hadar_running(cluster)
        server.kill9()
        killed_at = time.monotonic() - t0
        client = server.start()
        wait_for(lambda: bool(hadar_running(cluster)), 600, "a round in flight after the restart", server)
        cluster.restart_controller(down_s=5.0)  # slurmctld stopped while the leases run, back 5 s later
        ctld_restarted = True
        wait_for(lambda: all(j["status"] == "done" for j in client.jobs()["jobs"])
                 and (state / "user-jobs.jsonl").exists(), 1800, "every job and the user's job to end", server)
        wait_for(lambda: client.usage()["source"] == "sacct" and len(client.usage()["jobs"]) == len(ids), 120,
                 "sacct's records in the store", server)
        usage = client.usage()
        final = {j["id"]: j for j in client.jobs()["jobs"]}
    finally:
        code = server.stop()
    wall = time.monotonic() - t0
    checks = serve_checks(state, ids, user, final, usage, user_slurm, in_flight, code)
    checks.insert(1, check("serve: a slurmctld restarted mid-round is waited for", ctld_restarted, "jobs ended after"))
    return checks, {
        "wall_s": round(wall, 1), "killed_at_s": round(killed_at, 1), "leases_in_flight_at_kill": in_flight,
        "usage_by_job": {j["id"]: j["by_type"] for j in usage["jobs"]}}


def serve_checks(state: Path, ids: list[int], user: dict[int, int], final: dict[int, dict[str, Any]],
                 usage: dict[str, Any], user_slurm: int, in_flight: list[int], code: int) -> list[Check]:
    finished = db_rows(state, "SELECT job_id, count(*) FROM events WHERE kind = 'finish' GROUP BY job_id")
    steps_ok = {i: abs(final[i]["done_steps"] - final[i]["total_steps"]) < 1e-6 for i in ids}
    seen = {ids[i]: saved_seen(state, ids[i]) for i in user}
    recs = [json.loads(line) for line in (state / "user-jobs.jsonl").read_text().splitlines()]
    two = {j["id"]: sorted(j["by_type"]) for j in usage["jobs"] if len(j["by_type"]) >= 2}
    adopted = "adopted the Slurm jobs of the previous run" in (state.parent / "server.log").read_text()
    return [
        check("serve: killed mid-round, restarted, adopted its leases", bool(in_flight) and adopted,
              {"in_flight": in_flight, "adopted": adopted}),
        check("serve: every job done, finished exactly once", sorted(final) == sorted(ids) and all(
            final[i]["status"] == "done" for i in ids) and sorted(finished) == [(i, 1) for i in sorted(ids)]
              and all(steps_ok.values()), {"finish_events": finished, "steps_exact": steps_ok}),
        check("serve: the user's jobs' steps continue across the restart", seen == {ids[i]: n for i, n in user.items()},
              seen),
        check("serve: the user's sbatch job held by job_submit.lua, run by hadar, recorded once",
              [(r["job_id"], r["state"]) for r in recs] == [(user_slurm, "COMPLETED")], recs),
        check("serve: hadar usage from sacct, a job on two GPU types", usage["source"] == "sacct" and bool(two),
              {"source": usage["source"], "two_types": two}),
        check("serve: graceful stop (SIGTERM) exits 0", code == 0, code),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layout", default=LAYOUT, help=f"TYPE:GPUSxNODES,... (default {LAYOUT})")
    ap.add_argument("--round-s", type=float, default=30.0)
    ap.add_argument("--parts", default="run,serve", help="run, serve or both (default run,serve)")
    ap.add_argument("--json", type=Path, help="write the results here (default: FOLDER/acceptance.json)")
    args = ap.parse_args()
    layout = parse_layout(args.layout)
    accounting.TRES = ",".join(["gres/gpu", *sorted({f"gres/gpu:{n.gpu_type}" for n in layout})])  # sacct's types
    folder = Path(tempfile.mkdtemp(prefix="hadar-accept-"))
    t0 = time.monotonic()
    cluster = start(folder / "slurm", layout, accounting_db=True)
    checks: list[Check] = []
    facts: dict[str, Any] = {"layout": args.layout, "nodes": [n.__dict__ for n in layout], "round_s": args.round_s}
    try:
        for part, fn in (("run", run_part), ("serve", serve_part)):
            if part in args.parts.split(","):
                (folder / part).mkdir()
                try:
                    got, facts[part] = fn(cluster, folder, args.round_s)
                except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                    got = [check(f"{part}: ran to the end", False, str(e)[-2000:])]
                checks += got
                checks.append(leftovers(cluster, folder))
    finally:
        cluster.stop()
    facts["wall_s"] = round(time.monotonic() - t0, 1)
    out = args.json or folder / "acceptance.json"
    out.write_text(json.dumps({"checks": checks, "facts": facts, "folder": str(folder)}, indent=1, default=str))
    width = max(len(c["check"]) for c in checks)
    for c in checks:
        print(f"{'PASS' if c['ok'] else 'FAIL'}  {c['check']:<{width}}  {json.dumps(c['detail'], default=str)[:160]}")
    print(f"layout {args.layout}, rounds of {args.round_s:g} s, {facts['wall_s']:.0f} s in all; wrote {out}")
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
