"""GPU-seconds from sacct's typed records: ``hadar run --slurm`` and ``hadar serve --slurm`` on a local Slurm that
keeps accounting (MariaDB and slurmdbd, ``tests.slurm.accounting``). A cluster of its own: the session's keeps none
(slurmdbd adds to every job's start and end, and the executor contract's timings hold without it)."""

from __future__ import annotations

import csv
import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from hadar.cli import main
from hadar.slurm.accounting import parse
from tests.service.conftest import Server, write
from tests.slurm.localcluster import LocalSlurm, NodeSpec, start

pytestmark = pytest.mark.slurm
JOB_FILE = Path(__file__).resolve().parents[1] / "runtime" / "jobs" / "regression.py"
LAYOUT = (NodeSpec("q-v100", "v100", 1), NodeSpec("r-k80", "k80", 1))


@pytest.fixture(scope="module")
def accounted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    cluster = start(tmp_path_factory.mktemp("slurm-acct"), LAYOUT, accounting_db=True)
    try:
        yield cluster
    finally:
        cluster.stop()


def test_gpu_seconds_per_job_and_type_come_from_sacct(accounted: LocalSlurm, tmp_path, capsys, monkeypatch):
    # 3 one-GPU jobs on 2 GPUs of two types: one waits each round, so jobs move between the types
    monkeypatch.setenv("SLURM_CONF", str(accounted.conf))
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n" + "".join(
        f"  - {{name: reg, entrypoint: '{JOB_FILE}:train', total_steps: {n}, args: {{step_s: 0.02}}}}\n"
        for n in (200, 240, 220)))
    out = tmp_path / "out"
    code = main(["run", "--slurm", "--jobs", str(jobs), "--round-s", "20", "--out", str(out), "--json",
                 "--no-progress"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["jobs_completed"] == 3, summary.get("failed_jobs")
    leases = [json.loads(line) for line in (out / "leases.jsonl").read_text().splitlines()]
    usage = list(csv.DictReader((out / "accounting.csv").open()))
    # one sacct record per lease, on the lease's node and GPU type, at least as long as the lease trained in it
    assert sorted(int(u["slurm_job"]) for u in usage) == sorted(rec["slurm_job"] for rec in leases)
    for u in usage:
        (rec,) = [r for r in leases if r["slurm_job"] == int(u["slurm_job"])]
        assert (int(u["job"]), u["nodes"], u["gpu_type"], int(u["gpus"]), u["state"]) == (
            rec["job"], rec["node"], rec["gpu_type"], 1, "COMPLETED")
        assert float(u["gpu_s"]) == float(u["elapsed_s"]) >= int(rec["seconds"])
    sacct = summary["sacct_gpu_seconds"]
    assert set(sacct) == {"0", "1", "2"}
    for job, by_type in sacct.items():
        mine = [u for u in usage if u["job"] == job]
        assert by_type == {t: sum(float(u["gpu_s"]) for u in mine if u["gpu_type"] == t)
                           for t in {u["gpu_type"] for u in mine}}
    moved = [j for j, by_type in sacct.items() if len(by_type) == 2]
    assert moved, f"no job ran on two GPU types: {sacct}"
    assert sorted(sacct[moved[0]]) == ["k80", "v100"]


def test_serve_keeps_sacct_usage_in_its_store_once_across_a_kill_9(accounted: LocalSlurm, tmp_path):
    # hadar serve --slurm reads sacct's typed records of its ended leases into its store; `hadar usage` then
    # reports them (source: sacct); a kill -9 and a restart read the same records again and count none twice
    state = tmp_path / "state"
    server = Server(state, "--slurm", "--round-s", "15", env={"SLURM_CONF": str(accounted.conf)})
    try:
        server.start()
        ids = server.client().submit_file(write(tmp_path / "jobs.yaml", "jobs:\n" + "".join(
            f"  - {{name: reg, entrypoint: '{JOB_FILE}:train', total_steps: {n}, args: {{step_s: 0.02}}}}\n"
            for n in (200, 240, 220))))["ids"]
        server.wait_for(lambda: all(j["status"] == "done" for j in server.jobs().values()), 300, "every job to end")
        leases = _own_sacct(accounted, state)
        server.wait_for(lambda: len(_stored(state)) == len(leases), 60, "sacct's records in the store")
        before = server.client().usage()
        server.kill9()
        restarted = time.time()
        server.start()
        server.wait_for(lambda: float(_meta(state, "sacct_since")) > restarted, 60, "the restart to read sacct")
        after = server.client().usage()
    finally:
        server.stop()
    assert before["source"] == "sacct" and before == after  # nothing counted twice
    # every lease's record once, as sacct itself gives it: elapsed x GPUs per job and GPU type
    assert sorted(_stored(state)) == sorted(leases)
    want: dict[int, dict[str, float]] = {}
    for _slurm_job, job, gpu_type, gpu_s in leases:
        want.setdefault(job, {}).setdefault(gpu_type, 0.0)
        want[job][gpu_type] += gpu_s
    assert {j["id"]: j["by_type"] for j in after["jobs"]} == want and sorted(want) == sorted(ids)
    assert after["gpu_s"] == pytest.approx(sum(u[3] for u in leases)) and after["gpu_s"] > 0
    assert any(len(by_type) == 2 for by_type in want.values()), want  # some job ran on both types


def _own_sacct(cluster: LocalSlurm, state: Path) -> list[tuple[int, int, str, float]]:
    """(Slurm job, hadar job, GPU type, GPU-seconds) of the service's leases, from sacct itself."""
    run = _meta(state, "run_id")[:8]
    data = json.loads(cluster.run("sacct", "--json", "--allusers", "--starttime=now-1hours").stdout)
    out = []
    for rec in data["jobs"]:
        if str(rec["name"]).startswith(f"hadar-{run}-j"):
            job = int(str(rec["name"]).split("-j")[1].split("-")[0])
            out += [(u.slurm_job, job, u.gpu_type, u.gpu_s) for u in parse(rec, {int(rec["job_id"]): job})]
    return out


def _stored(state: Path) -> list[tuple[int, int, str, float]]:
    with closing(sqlite3.connect(state / "hadar.db")) as con:
        rows = con.execute("SELECT slurm_job, job_id, gpu_type, elapsed_s * gpus FROM slurm_usage").fetchall()
    return [(int(a), int(b), str(c), float(d)) for a, b, c, d in rows]


def _meta(state: Path, key: str) -> str:
    with closing(sqlite3.connect(state / "hadar.db")) as con:
        row = con.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return "0" if row is None else str(row[0])
