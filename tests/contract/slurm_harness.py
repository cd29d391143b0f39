"""The Slurm executor under the executor contract: what ``test_executor_contract.slurm_executor`` is built from.

``SlurmExecutor`` runs on the session's local Slurm cluster (``slurm_cluster``), in its partition
``contract`` (two nodes: 2 V100 + 2 K80, the contract's shape), with a job whose steps sleep ``STEP_S``
(emulated GPU speeds and dilation stretch them, as in the Ray harness). Every lease is a new process (a
Slurm batch job), so the job imports no torch (``tests/slurm/jobs/sleeper.py``): its 1-GPU leases start
in well under a second; a gang's still imports torch.distributed for its process group (seconds on a
busy machine). The rates come from warm-up rounds on each type with 1 and 2 GPUs (the executor's
``mean_table``), as in the Ray harness. A lease is made to fail by cancelling its Slurm job once it is
submitted (``scancel``): a cancelled Slurm job is a failed lease.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from hadar.clock import WallClock
from hadar.model.job import Job, TrainSpec
from hadar.model.plan import Lease, RoundPlan
from hadar.model.throughput import ThroughputTable
from hadar.slurm.commands import Slurm
from hadar.slurm.executor import SlurmExecutor, SlurmOptions

JOB_FILE = Path(__file__).resolve().parent.parent / "slurm" / "jobs" / "sleeper.py"
JOB_TYPE = "contract-sleeper"
STEP_S = 0.02
SPEC = TrainSpec(entrypoint=f"{JOB_FILE}:train", name=JOB_TYPE, args_json=json.dumps({"step_s": STEP_S}))

PARTITION = "contract"
WARM_UP_S = {1: 6.0, 2: 16.0}  # a gang spends seconds importing torch.distributed before its first step
GRACE_S = 40.0  # a gang's ranks each import torch (srun starts one process per GPU): 25 s at load 30 on 2 cores
ROUND_S = 24.0  # a gang's lease spends up to ~8 s starting (torch.distributed) on 2 busy cores


@dataclass
class Doom:
    """GPUs whose next lease is cancelled as soon as it is submitted."""

    slurm: Slurm
    gpus: set[int]

    def __call__(self, round_no: int, submitted: list[tuple[Lease, int]]) -> None:
        hit = [job for lease, job in submitted if self.gpus & set(lease.gpus)]
        for lease, _ in submitted:
            self.gpus -= set(lease.gpus)
        self.slurm.cancel(hit)


def resolve(job: Job) -> Job:
    return replace(job, train=SPEC)


def executor(conf: Path, work: Path, given: ThroughputTable | None) -> tuple[SlurmExecutor, Doom]:
    slurm = Slurm(conf)
    doom = Doom(slurm, set())
    options = SlurmOptions(work, partition=PARTITION, given=given, grace_s=GRACE_S, dilation="auto", device="cpu")
    ex = SlurmExecutor(slurm, WallClock(), options, on_submitted=doom)
    return ex, doom


def warm_table(conf: Path, work: Path) -> ThroughputTable:
    """The job's rates on both types with 1 and 2 GPUs, measured by two warm-up rounds."""
    ex, _ = executor(conf, work, given=None)
    cluster = ex.cluster
    ones = tuple(Lease(g, JOB_TYPE, 1, (g,), 1e12) for g in range(cluster.num_gpus))
    twos = tuple(Lease(10 + n, JOB_TYPE, 2, cluster.gpus_of_node(n), 1e12) for n in range(len(cluster.nodes)))
    for k, leases in ((1, ones), (2, twos)):
        for le in leases:
            ex.register(resolve(Job(le.job_id, JOB_TYPE, le.scale_factor, le.max_steps)))
        report = ex.run_round(RoundPlan(ex.clock.now(), WARM_UP_S[k], leases))
        failed = [r.error for r in report.results if r.failed]
        assert not failed, f"a warm-up lease failed: {failed}"
        unmeasured = [(k, t, r.metrics.get("train_s")) for r in report.results
                      for t in [cluster.gpu_type_of[r.gpus[0]]] if ex.tracker.kind(JOB_TYPE, k, t) != "measured"]
        assert not unmeasured, f"warm-up leases too short to measure (GPUs, type, train_s): {unmeasured}"
    return ex.tracker.mean_table()
