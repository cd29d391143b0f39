"""``hadar run --slurm`` on the local Slurm cluster: a whole run end to end, and bad input as one line, exit 2."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from hadar.cli import main
from tests.slurm.localcluster import LocalSlurm

pytestmark = pytest.mark.slurm
JOB_FILE = Path(__file__).resolve().parents[1] / "runtime" / "jobs" / "regression.py"


def _reg(name: str, mirror: str, steps: int) -> str:
    return (f"  - {{name: {name}, entrypoint: '{JOB_FILE}:train', total_steps: {steps}, emulate_as: '{mirror}', "
            "args: {step_s: 0.02}}\n")


def _lease_processes(work: Path) -> list[int]:
    """PIDs of lease processes of this run still alive."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "hadar.slurm.lease" in cmd and str(work) in cmd:
            out.append(int(proc.name))
    return out


def test_jobs_move_across_gpu_types_and_resume_from_their_checkpoints(slurm_idle: LocalSlurm, tmp_path, capsys):
    # 4 one-GPU jobs of two kinds (two Gavel rows) on 3 GPUs of two types (partition e2e: 2 P100, 1 K80): one job
    # waits every round, so leases move between GPUs and types; each lease resumes from the last checkpoint. Rounds
    # of 24 s: each lease imports torch first (10-15 s at load 20 on 2 cores, when 14 s rounds made 1 step a lease).
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n" + _reg("reg-resnet", "ResNet-18 (batch size 64)", 220)
                    + _reg("reg-lm", "LM (batch size 20)", 160) + _reg("reg-resnet", "ResNet-18 (batch size 64)", 180)
                    + _reg("reg-lm", "LM (batch size 20)", 200))
    out = tmp_path / "out"
    code = main(["run", "--slurm", "--jobs", str(jobs), "--partition", "e2e", "--round-s", "24", "--out", str(out),
                 "--json", "--no-progress"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0, summary.get("failed_jobs")
    assert summary["jobs_completed"] == 4 and summary["jobs_failed"] == 0
    # the regression job counts the steps on the trajectory it resumed from: exactly its size when every lease
    # started from the previous one's committed checkpoint
    assert {j: m["seen"] for j, m in summary["job_metrics"].items()} == {"0": 220, "1": 160, "2": 180, "3": 200}
    leases = [json.loads(line) for line in (out / "leases.jsonl").read_text().splitlines()]
    by_job: dict[int, list[dict]] = {}
    for rec in leases:
        by_job.setdefault(rec["job"], []).append(rec)
    assert all(rec["state"] == "COMPLETED" for rec in leases)
    assert len({rec["slurm_job"] for rec in leases}) == len(leases), "one Slurm job per lease"
    moved = [j for j, recs in by_job.items() if len({r["gpu_type"] for r in recs}) > 1]
    assert moved, f"no job ran on two GPU types: {by_job}"
    for recs in by_job.values():
        assert not recs[0]["restored"]
        assert all(r["restored"] for r in recs[1:]), "a later lease did not resume from the checkpoint"
    assert set(summary["gpu_seconds"]) == {"0", "1", "2", "3"}
    assert {t for by_type in summary["gpu_seconds"].values() for t in by_type} <= {"p100", "k80"}
    # this cluster keeps no accounting: the summary says what sacct answered (test_slurm_accounting has sacct's)
    assert summary["sacct_gpu_seconds"] is None and summary["sacct_error"].startswith("sacct"), summary["sacct_error"]
    assert not (out / "accounting.csv").exists()
    # nothing of hadar or its jobs is left running
    assert not _lease_processes(out / "slurm")
    running = slurm_idle.run("squeue", "-h", "--states=PENDING,RUNNING,COMPLETING,CONFIGURING", "-o", "%i").stdout
    assert running.strip() == ""


def _fake_sinfo(tmp_path: Path, nodes: list[dict]) -> Path:
    """A folder whose ``sinfo`` prints ``nodes`` (and whose other Slurm commands do nothing), first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "nodes.json").write_text(json.dumps({"nodes": nodes, "errors": []}))
    for name in ("sbatch", "scontrol", "scancel", "squeue", "sinfo"):
        body = f"cat {tmp_path / 'nodes.json'}\n" if name == "sinfo" else "exit 0\n"
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def _node(name: str, gres: str) -> dict:
    return {"name": name, "gres": gres, "state": "idle", "state_flags": [], "partitions": ["gpu"]}


@pytest.mark.parametrize(("case", "message"), [
    ("partition", "unknown partition 'nope'"),
    ("too_big", "needs 3"),
    ("untyped", "its GPUs have no type"),
    ("controller", "sinfo"),
    ("no_slurm", "Slurm's commands are not on PATH"),
])
def test_bad_input_gives_one_line_and_exit_2(slurm_cluster: LocalSlurm, tmp_path, capsys, monkeypatch, case,
                                             message):
    jobs = tmp_path / "jobs.yaml"
    size = 3 if case == "too_big" else 1
    jobs.write_text(f"jobs:\n  - {{name: r, entrypoint: '{JOB_FILE}:train', total_steps: 10, scale_factor: {size}}}\n")
    argv = ["run", "--slurm", "--jobs", str(jobs), "--checkpoint-dir", str(tmp_path / "w")]
    if case == "partition":
        argv += ["--partition", "nope"]
    elif case == "too_big":
        argv += ["--partition", "contract"]  # 2 V100 + 2 K80: no type has 3
    elif case == "untyped":
        bin_dir = _fake_sinfo(tmp_path, [_node("n1", "gpu:v100:2"), _node("n2", "gpu:4")])
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    elif case == "controller":  # a configuration whose controller is on a port nothing listens on
        conf = tmp_path / "slurm.conf"
        text = slurm_cluster.conf.read_text().replace(f"SlurmctldPort={slurm_cluster.ctld_port}", "SlurmctldPort=9")
        conf.write_text(text.replace("MessageTimeout=10", "MessageTimeout=2"))
        monkeypatch.setenv("SLURM_CONF", str(conf))
    elif case == "no_slurm":
        monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "w" / "leases").exists() or not any((tmp_path / "w" / "leases").iterdir())


def test_a_slurmd_killed_mid_run_its_jobs_resume_elsewhere(slurm_idle: LocalSlurm, tmp_path):
    from hadar.sim.trace import read_jobs
    from hadar.slurm.run import SlurmRun, run_on_slurm

    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n" + _reg("reg-a", "ResNet-18 (batch size 64)", 160)
                    + _reg("reg-b", "LM (batch size 20)", 120) + _reg("reg-a", "ResNet-18 (batch size 64)", 140))
    killed: list[int] = []

    def on_event(e: dict) -> None:
        if e["event"] == "round" and not killed:  # after the first round: node d-k80 dies
            slurm_idle.kill_node("d-k80")
            killed.append(len(killed))

    try:
        res = run_on_slurm(read_jobs(str(jobs)), "max_min_fairness_perf",
                           SlurmRun(tmp_path / "w", partition="e2e", round_s=24.0, grace_s=10.0), on_event=on_event)
    finally:
        slurm_idle.start_node("d-k80")
        slurm_idle.wait_idle()
    summary = res.result.summary
    assert killed and summary["jobs_completed"] == 3 and summary["jobs_failed"] == 0
    assert {j: m["seen"] for j, m in summary["job_metrics"].items()} == {"0": 160, "1": 120, "2": 140}
    later = [r for r in res.leases if r["round"] >= 1 and r["node"] == "d-k80"]
    assert all(r["state"] != "COMPLETED" for r in later), later  # a lease there failed (or none went there)
    # a job that lost its lease with the node, or ran on after a finished lease, resumes from its checkpoint:
    # every lease that ran, of a job after one that completed having stepped, restores it (on a quiet machine the
    # jobs may all end in their first leases, so which jobs had a later lease depends on the machine's speed; a
    # lease placed on the dead node before Slurm marks it down never starts, so it restores nothing and reports
    # no result; on a loaded machine a lease may start past its round's end and save nothing to restore)
    completed: set[int] = set()
    for r in sorted(res.leases, key=lambda r: (r["round"], r["job"], r["copy"])):
        if r["job"] in completed and r["state"] == "COMPLETED":
            assert r["restored"], r
        if r["state"] == "COMPLETED" and r["iterations"] > 0:
            completed.add(r["job"])
    assert not _lease_processes(tmp_path / "w")


def test_a_controller_restarted_mid_run_is_waited_for(slurm_idle: LocalSlurm, tmp_path):
    import threading

    from hadar.sim.trace import read_jobs
    from hadar.slurm.run import SlurmRun, run_on_slurm

    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n" + _reg("reg-a", "ResNet-18 (batch size 64)", 120)
                    + _reg("reg-b", "LM (batch size 20)", 90))
    threads: list[threading.Thread] = []

    def restart() -> None:
        time.sleep(2.0)  # into the second round: its leases are running, hadar is polling squeue
        slurm_idle.restart_controller(down_s=5.0)

    def on_event(e: dict) -> None:
        if e["event"] == "round" and not threads:
            threads.append(threading.Thread(target=restart))
            threads[0].start()

    try:
        res = run_on_slurm(read_jobs(str(jobs)), "max_min_fairness_perf",
                           SlurmRun(tmp_path / "w", partition="e2e", round_s=24.0, grace_s=10.0), on_event=on_event)
    finally:
        for t in threads:
            t.join()
        slurm_idle.wait_idle()
    summary = res.result.summary
    assert threads and summary["jobs_completed"] == 2 and summary["jobs_failed"] == 0
    assert {j: m["seen"] for j, m in summary["job_metrics"].items()} == {"0": 120, "1": 90}
    assert not _lease_processes(tmp_path / "w")
