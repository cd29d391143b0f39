"""The batch script hadar writes for one lease, and the files the lease reads and writes in its folder.

A lease's folder (``WORK/leases/<tag>``) holds:

- ``lease.json``: what to run (``LeaseSpec`` fields), the lease's deadline as a wall-clock time
  (``deadline``, seconds since the epoch: the round's end, however late Slurm started the job) and
  the device (``cpu``, ``cuda`` or ``auto``);
- ``job.sh``: the batch script sbatch runs: it sets ``PYTHONPATH``, ignores SIGUSR1 until the lease's
  handler takes over, and execs ``python -m hadar.slurm.lease lease.json`` (so Slurm's signals reach the
  lease's process);
- ``result.json``: what the lease did (``LeaseOutcome``'s fields, plus ``start``/``end`` wall times),
  written atomically by the lease when it ends; none if it was killed;
- ``out.log``: the job's stdout and stderr (Slurm writes it).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from hadar.job.lease import LeaseOutcome, LeaseSpec

SPEC = "lease.json"
SCRIPT = "job.sh"
RESULT = "result.json"
LOG = "out.log"
PORT_BASE, PORT_SPAN = 20000, 12000  # a gang's MASTER_PORT: PORT_BASE + job id % PORT_SPAN (20000-31999)


def write_lease(folder: Path, spec: LeaseSpec, deadline: float, device: str,
                python: str = sys.executable, path: tuple[str, ...] = ()) -> Path:
    """Write ``folder``'s spec and batch script; the script's path."""
    folder.mkdir(parents=True, exist_ok=True)
    body = {"spec": asdict(spec), "deadline": deadline, "device": device}
    (folder / SPEC).write_text(json.dumps(body))
    for old in (folder / RESULT, *folder.glob("rank-*.json")):
        old.unlink(missing_ok=True)
    pythonpath = os.pathsep.join(dict.fromkeys(p for p in path if p))
    lease = f"{shlex.quote(python)} -m hadar.slurm.lease {shlex.quote(str(folder / SPEC))}"
    lines = ["#!/bin/sh",
             f"# hadar: one lease of job {spec.job_id} (copy {spec.copy}); written by hadar, run by sbatch",
             f"export PYTHONPATH={shlex.quote(pythonpath)}${{PYTHONPATH:+:$PYTHONPATH}}",
             "trap '' USR1  # until the lease's own handler is in place (a stop asked for this early is moot)",
             *(_gang_lines(lease) if spec.world > 1 else [f"exec {lease}"]), ""]
    script = folder / SCRIPT
    script.write_text("\n".join(lines))
    script.chmod(0o755)
    return script


def _gang_lines(lease: str) -> list[str]:
    """A gang's batch script: the rendezvous from Slurm's environment, then one task per GPU through srun."""
    return ["# the gang's rendezvous: rank 0's store on the job's first node, on a port derived from the job id",
            'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            "addr=$(scontrol show node \"$first\" | tr ' ' '\\n' | sed -n 's/^NodeAddr=//p' | head -n 1)",
            'export MASTER_ADDR="${addr:-$first}"',
            f"export MASTER_PORT=$(({PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN}))",
            "# each task ignores USR1 until its handler is in place, as this script does; a failing rank ends them all",
            f"exec srun --kill-on-bad-exit=1 sh -c 'trap \"\" USR1; exec \"$@\"' sh {lease}"]


def rendezvous_port(job_id: int) -> int:
    """The port of a gang's rendezvous (``MASTER_PORT``): derived from its Slurm job id, below Linux's ephemeral
    ports, so that gangs running at once never share one (unless ``PORT_SPAN`` job ids apart)."""
    return PORT_BASE + job_id % PORT_SPAN


def read_lease(path: Path) -> tuple[LeaseSpec, float, str]:
    """(spec, deadline, device) of a ``lease.json``."""
    body = json.loads(Path(path).read_text())
    raw = dict(body["spec"])
    for name in ("search_path",):
        raw[name] = tuple(raw.get(name) or ())
    if raw.get("rendezvous") is not None:
        raw["rendezvous"] = (str(raw["rendezvous"][0]), int(raw["rendezvous"][1]))
    return LeaseSpec(**raw), float(body["deadline"]), str(body.get("device", "auto"))


def write_result(folder: Path, outcome: LeaseOutcome, start: float, end: float, rank: int = 0) -> None:
    """``result.json`` (rank 0's; a gang's other ranks write ``rank-<r>.json``), atomically (a reader never
    sees half of it)."""
    name = RESULT if rank == 0 else f"rank-{rank}.json"
    tmp = folder / (name + ".tmp")
    tmp.write_text(json.dumps({**asdict(outcome), "start": start, "end": end}))
    os.replace(tmp, folder / name)


def read_result(folder: Path) -> tuple[LeaseOutcome, float, float] | None:
    """(outcome, start, end) of the lease: rank 0's, failed with another rank's error if one failed; None if
    rank 0 wrote no (readable) result."""
    head = _read(folder / RESULT)
    if head is None:
        return None
    outcome = head[0]
    for path in sorted(folder.glob("rank-*.json")) if outcome.ok else ():
        other = _read(path)
        if other is not None and not other[0].ok:
            outcome.ok, outcome.error, outcome.traceback = False, other[0].error, other[0].traceback
            break
    return head


def _read(path: Path) -> tuple[LeaseOutcome, float, float] | None:
    try:
        raw: dict[str, Any] = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    known = {f.name for f in fields(LeaseOutcome)}
    outcome = LeaseOutcome(**{k: v for k, v in raw.items() if k in known})
    return outcome, float(raw.get("start", 0.0)), float(raw.get("end", 0.0))


def tail(path: Path, limit: int = 4000) -> str:
    """The last ``limit`` characters of a text file ("" if there is none)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-limit:]
