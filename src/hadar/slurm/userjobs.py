"""Users' own sbatch jobs handed to hadar: held by the shipped ``job_submit.lua``, placed by ``hadar serve --slurm``.

A user marks a GPU job with ``--comment=hadar`` (rigid) or ``--comment=hadar:sigterm`` (its script declares
that it saves on SIGTERM and resumes when requeued); the plugin holds it (priority 0). At every round
boundary the service places each held, marked job of its partition, oldest first, on a whole node: the up
node, not running hadar's leases or another user job, with enough GPUs, of the GPU type the bundled
table rates slowest on average (fast GPUs stay with the jobs hadar measures and moves), then the fewest
GPUs, then the name; it pins the job there (``NodeList``) and releases it. While the job is pending or
running there, its node is out of hadar's schedule (down, to the planner); when it ends, the node comes
back. Such a job is never preempted (the ``hadar:sigterm`` mark is recorded, not acted on yet). What it
ran is recorded when it ends: its node, GPU type, GPUs and seconds (``user-jobs.jsonl`` in the state
directory). Everything is read from squeue, so a restarted service finds the user jobs it placed.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hadar.model.cluster import Cluster
from hadar.slurm.commands import ENDED, Slurm, SlurmError

log = logging.getLogger(__name__)
#: A user's comment -> whether the job declares that it checkpoints on SIGTERM.
MARKS = {"hadar": False, "hadar:sigterm": True}
_GPUS = re.compile(r"gres:gpu(?::[^:,]+)?:(\d+)")
_HELD = ("JobHeldUser", "JobHeldAdmin")
RECORDS = "user-jobs.jsonl"


@dataclass(frozen=True, slots=True)
class UserJob:
    """One marked job as squeue shows it (``node``: where it runs or was pinned; "" while held)."""

    job_id: int
    user: str
    partition: str
    state: str
    held: bool
    gpus: int
    node: str
    checkpoints: bool
    start: float
    end: float
    ended: bool


def parse(rec: Mapping[str, Any]) -> UserJob | None:
    """The marked job of one ``squeue --json`` record (None: not marked, or asks for no GPU)."""
    comment = str(rec.get("comment", "") or "").strip()
    if comment not in MARKS:
        return None
    gpus = sum(int(m) for field in ("tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket")
               for m in _GPUS.findall(str(rec.get(field, "") or "")))
    if gpus <= 0:
        return None
    state = str(rec.get("job_state", ""))
    flags = {str(f) for f in rec.get("flags") or []}
    held = state == "PENDING" and (int(rec.get("priority", 1) or 0) == 0 or str(rec.get("state_reason")) in _HELD)
    node = str(rec.get("nodes", "") or "") or str(rec.get("required_nodes", "") or "")
    return UserJob(int(rec["job_id"]), str(rec.get("user_name", "")), str(rec.get("partition", "")), state, held,
                   gpus, "" if held else node, MARKS[comment], float(rec.get("start_time", 0) or 0),
                   float(rec.get("end_time", 0) or 0), state in ENDED and "COMPLETING" not in flags)


def read(slurm: Slurm) -> list[UserJob]:
    """Every marked GPU job Slurm knows, by id."""
    data = slurm.json("squeue", "--states=all")
    found = (parse(rec) for rec in data.get("jobs") or [])
    return sorted((j for j in found if j is not None), key=lambda j: j.job_id)


def busy(jobs: Iterable[UserJob]) -> frozenset[str]:
    """Nodes held by released user jobs that have not ended (pending on their pinned node, or running)."""
    return frozenset(j.node for j in jobs if j.node and not j.held and not j.ended)


def choose(job: UserJob, cluster: Cluster, taken: frozenset[str], slowness: Callable[[str], float],
           members: Mapping[str, tuple[str, ...]]) -> str | None:
    """The node for ``job`` (see the module docstring), None if none fits now; ``slowness(type)``: lower first;
    ``members``: node -> its partitions (the job's must be one)."""
    fits = [n for n in cluster.nodes if n.name not in cluster.down and n.name not in taken and n.gpus >= job.gpus
            and job.partition in members.get(n.name, (job.partition,))]
    if not fits:
        return None
    return min(fits, key=lambda n: (slowness(n.gpu_type), n.gpus, n.name)).name


class UserJobs:
    """The service's side of users' marked jobs: place the held ones, know the nodes they hold, record the
    ended ones once (``folder / user-jobs.jsonl``)."""

    def __init__(self, slurm: Slurm, partition: str | None, folder: Path) -> None:
        self.slurm, self.partition, self.path = slurm, partition, Path(folder) / RECORDS
        self.jobs: list[UserJob] = []
        self.recorded = self._recorded()

    def _recorded(self) -> set[int]:
        try:
            return {int(json.loads(line)["job_id"]) for line in self.path.read_text().splitlines() if line.strip()}
        except (OSError, ValueError, KeyError):
            return set()

    def refresh(self) -> frozenset[str]:
        """Read the marked jobs again (of the partition, where one is given); the nodes they hold."""
        try:
            jobs = read(self.slurm)
        except SlurmError as e:  # the controller restarting: as they were
            log.warning("reading users' jobs from squeue failed: %s", e)
            return busy(self.jobs)
        self.jobs = [j for j in jobs if self.partition is None or j.partition == self.partition]
        return busy(self.jobs)

    def place(self, cluster: Cluster, slowness: Callable[[str], float],
              members: Mapping[str, tuple[str, ...]]) -> list[int]:
        """Pin and release every held job that fits on a free node of ``cluster`` now, oldest first; the ids
        released."""
        taken = set(busy(self.jobs))
        type_of = {n.name: n.gpu_type for n in cluster.nodes}
        released = []
        for job in (j for j in self.jobs if j.held):
            node = choose(job, cluster, frozenset(taken), slowness, members)
            if node is None:
                continue
            try:
                self.slurm.update(job.job_id, {"NodeList": node})
                self.slurm.release([job.job_id])
            except SlurmError as e:
                log.warning("placing user job %d on %s failed: %s", job.job_id, node, e)
                continue
            taken.add(node)
            released.append(job.job_id)
            log.info("user job %d (%d GPUs) released on %s (%s)", job.job_id, job.gpus, node, type_of.get(node, "?"))
        return released

    def record_ended(self, type_of: Mapping[str, str]) -> list[dict[str, Any]]:
        """One record per user job that ended since the last call: its node, GPU type, GPUs, seconds."""
        out = []
        for j in self.jobs:
            if not j.ended or j.job_id in self.recorded or not j.node or j.start <= 0:
                continue
            rec = {**asdict(j), "gpu_type": type_of.get(j.node, ""), "seconds": max(0.0, j.end - j.start)}
            rec["gpu_seconds"] = rec["seconds"] * j.gpus
            out.append(rec)
            self.recorded.add(j.job_id)
        if out:
            with self.path.open("a") as f:
                for rec in out:
                    f.write(json.dumps(rec) + "\n")
        return out
