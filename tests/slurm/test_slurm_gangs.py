"""Gangs on Slurm: a lease of several GPUs runs one task per GPU through srun, on one node or across two, with the
process group's rendezvous taken from Slurm's environment; rank 0 alone reports and saves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hadar.clock import WallClock
from hadar.model.job import Job, TrainSpec
from hadar.model.plan import Lease, RoundPlan
from hadar.slurm import script
from hadar.slurm.commands import Slurm
from hadar.slurm.executor import SlurmExecutor, SlurmOptions
from tests.slurm.localcluster import LocalSlurm

pytestmark = pytest.mark.slurm
GANG = Path(__file__).resolve().parent / "jobs" / "gang.py"
ROUND_S = 15.0
GRACE_S = 45.0  # every rank imports torch before its first step: 10-30 s at load 20 on 2 cores (a lease's first step
# always runs, however late: the grace must cover it)


def test_gangs_on_one_node_and_across_two_run_data_parallel_through_srun(slurm_idle: LocalSlurm, tmp_path):
    ex = SlurmExecutor(Slurm(slurm_idle.conf), WallClock(), SlurmOptions(tmp_path / "w", device="cpu",
                                                                              dilation=1.0, grace_s=GRACE_S))
    cluster = ex.cluster
    node = {n.name: i for i, n in enumerate(cluster.nodes)}
    one_node = cluster.gpus_of_node(node["a-v100"])  # 2 V100 on one node
    two_nodes = (cluster.gpus_of_node(node["b-k80"])[0], cluster.gpus_of_node(node["d-k80"])[0])  # 1 K80 on each
    outs = {1: tmp_path / "one", 2: tmp_path / "two"}
    for jid, out in outs.items():
        spec = TrainSpec(entrypoint=f"{GANG}:train", name="gang", args_json=json.dumps({"out": str(out)}))
        ex.register(Job(jid, "gang", 2, 1e6, train=spec))
    report = ex.run_round(RoundPlan(ex.clock.now(), ROUND_S, (Lease(1, "gang", 2, one_node, 1e6),
                                                              Lease(2, "gang", 2, two_nodes, 1e6))))
    assert [r.error for r in report.results if r.failed] == []
    by_job = {r["job"]: r for r in ex.records}
    assert {j: r["state"] for j, r in by_job.items()} == {1: "COMPLETED", 2: "COMPLETED"}
    for jid, nodes in ((1, {"a-v100"}), (2, {"b-k80", "d-k80"})):
        ranks = [json.loads((outs[jid] / f"rank-{r}.json").read_text()) for r in (0, 1)]
        slurm_job = by_job[jid]["slurm_job"]
        port = script.rendezvous_port(slurm_job)
        assert [(e["RANK"], e["WORLD_SIZE"], e["rank"], e["world"], e["group_size"]) for e in ranks] == [
            ("0", "2", 0, 2, 2), ("1", "2", 1, 2, 2)]
        assert {e["MASTER_PORT"] for e in ranks} == {str(port)} and {e["MASTER_ADDR"] for e in ranks} == {"localhost"}
        assert {e["SLURM_JOB_ID"] for e in ranks} == {str(slurm_job)} and {e["SLURMD_NODENAME"] for e in ranks} == nodes
        assert [e["LOCAL_RANK"] for e in ranks] == (["0", "1"] if len(nodes) == 1 else ["0", "0"])
        # the steps are reported once: the lease's iterations are rank 0's, the job's progress counts both ranks'
        result = next(r for r in report.results if r.job_id == jid)
        outcome = script.read_result(Path(next(iter((tmp_path / "w" / "leases").glob(f"*-j{jid}-c0-r0-train")))))
        assert outcome is not None and outcome[0].metrics["sum"] == 3.0  # 1 + 2: both ranks in one process group
        assert outcome[0].iterations == outcome[0].metrics["seen"] > 0 and result.steps == 2 * outcome[0].iterations
        # rank 0 alone wrote the checkpoint
        saved = torch.load(ex.jobs[jid].checkpoint, weights_only=True)
        assert saved["state"] == {"seen": outcome[0].iterations, "writer": 0}
