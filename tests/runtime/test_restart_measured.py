"""The runtime measures each job's restart cost (issue 20, item 1) and reports it where a simulation can read it."""

from __future__ import annotations

import csv

import pytest

from hadar.cli import main
from hadar.sim.trace import read_jobs
from tests.runtime.test_cli_run import CLUSTER_YAML, _write


@pytest.mark.runtime
def test_jobs_csv_reports_a_measured_restart_s_that_a_simulation_reads_back(ray_session, tmp_path, capsys):
    # a job's first lease measures its restart cost (its start to its first step): a few rounds each are enough
    jobs = _write(tmp_path, "jobs.yaml", "jobs:\n  - {job_type: lstm, total_steps: 60}\n"
                  "  - {job_type: recoder, total_steps: 120, arrival_s: 1}\n")
    cluster = _write(tmp_path, "cluster.yaml", CLUSTER_YAML)
    out = tmp_path / "out"
    assert main(["run", "--cluster", cluster, "--jobs", jobs, "--policy", "fifo", "--round-s", "3",
                 "--out", str(out)]) == 0, capsys.readouterr().err
    with (out / "jobs.csv").open() as f:
        rows = list(csv.DictReader(f))
    measured = [float(r["restart_s"]) for r in rows]
    assert len(measured) == 2 and all(0 < s < 60 for s in measured)  # building the model and its state: > 0
    # the run's jobs.csv is a job list: the measured figure becomes each job's restart_s
    back = read_jobs(out / "jobs.csv")
    assert [j.restart_s for j in back] == pytest.approx(measured)
    rc = main(["simulate", "--trace", str(out / "jobs.csv"), "--throughputs", str(out / "throughputs.json"),
               "--cluster", cluster, "--policy", "fifo", "--json"])
    assert rc == 0, capsys.readouterr().err
