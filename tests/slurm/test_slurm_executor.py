"""The Slurm executor's pieces on the local cluster: node changes from sinfo, and the job side's signals."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from hadar.clock import WallClock
from hadar.job.lease import LeaseSpec
from hadar.slurm import script
from hadar.slurm.commands import Slurm
from hadar.slurm.executor import SlurmExecutor, SlurmOptions
from tests.slurm.localcluster import LocalSlurm

pytestmark = pytest.mark.slurm
REGRESSION = Path(__file__).resolve().parents[1] / "runtime" / "jobs" / "regression.py"


def test_the_cluster_comes_from_sinfo_and_a_drained_node_is_a_node_change(slurm_idle: LocalSlurm, tmp_path):
    ex = SlurmExecutor(Slurm(slurm_idle.conf), WallClock(), SlurmOptions(tmp_path / "w"))
    assert [(n.name, n.gpu_type, n.gpus) for n in ex.cluster.nodes] == [
        ("a-v100", "v100", 2), ("b-k80", "k80", 2), ("c-p100", "p100", 2), ("d-k80", "k80", 1)]
    assert ex.cluster_view() is None  # nothing changed
    slurm_idle.run("scontrol", "update", "nodename=c-p100", "state=drain", "reason=hadar-test")
    try:
        change = ex.cluster_view()
        assert change is not None and change.table is None  # no new GPU type
        view = change.cluster
        assert view.down == frozenset({"c-p100"}) and view.count("p100") == 0
        assert ex.cluster_view() is None
    finally:
        slurm_idle.run("scontrol", "update", "nodename=c-p100", "state=resume")
    deadline = time.monotonic() + 30  # a resumed node is NOT_RESPONDING until the controller has pinged it
    while (back := ex.cluster_view()) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert back is not None and back.cluster.down == frozenset() and back.cluster.count("p100") == 2


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_a_signalled_lease_saves_and_exits_cleanly(tmp_path, sig):
    spec = LeaseSpec(job_id=4, entrypoint=f"{REGRESSION}:train", rank=0, world=1, max_iterations=10**6, budget_s=0.0,
                     checkpoint=str(tmp_path / "job.pt"), args_json=json.dumps({"step_s": 0.01}), run_id="r",
                     total_steps=1e6)
    folder = tmp_path / "lease"
    path = script.write_lease(folder, spec, time.time() + 600, "cpu", path=(str(Path(script.__file__).parents[2]),))
    proc = subprocess.Popen(["sh", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while b"hadar.slurm.lease" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():  # the script exec'd Python
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    time.sleep(1.0)  # its handlers are in place (before it imports torch); the signal may come before any step
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    res = script.read_result(folder)
    assert res is not None
    outcome, start, end = res
    # it stopped after its current step (the first always runs), saved and returned: far from its 10**6 steps
    assert outcome.ok and 1 <= outcome.iterations < 10**5 and outcome.saved_steps == outcome.iterations
    assert (tmp_path / "job.pt").exists() and end - start < 600
    assert asdict(outcome)["error"] == ""
