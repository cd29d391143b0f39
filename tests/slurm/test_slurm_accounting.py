"""GPU-seconds from sacct's typed records: ``hadar run --slurm`` on a local Slurm that keeps accounting (MariaDB and
slurmdbd, ``tests.slurm.accounting``). A cluster of its own: the session's keeps none (slurmdbd adds to every
job's start and end, and the executor contract's timings hold without it)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hadar.cli import main
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
