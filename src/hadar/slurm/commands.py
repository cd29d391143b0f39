"""Slurm's command-line tools, as hadar drives them: sbatch, scontrol, scancel, squeue, sinfo (JSON).

Slurm is found as its own tools find it: the commands on ``PATH`` and the configuration in
``SLURM_CONF`` (or the build's default), so ``Slurm(conf=...)`` only sets ``SLURM_CONF`` for the
commands it runs. Every failure is a ``SlurmError`` (an ``InputError``: one line on stderr, exit 2)
naming the command and what it said; the controller not answering is ``ControllerDown``, which a
running executor waits out (``retry_s``: a restarting slurmctld) where a starting run fails at once.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hadar.errors import InputError

COMMANDS = ("sbatch", "scontrol", "scancel", "squeue", "sinfo")
log = logging.getLogger(__name__)
TIMEOUT_S = 30.0
#: Job states after which a job runs no more (squeue's ``job_state``).
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                   "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED"})
_UNREACHABLE = ("unable to contact slurm controller", "connection refused", "socket timed out",
                "zero bytes were transmitted", "communication connection failure")


class SlurmError(InputError):
    """A Slurm command failed (its message in one line)."""


class ControllerDown(SlurmError):
    """slurmctld did not answer."""


class _Unreachable(ControllerDown):
    """slurmctld could not be contacted (nothing was carried out: the command may be repeated)."""


@dataclass(frozen=True, slots=True)
class JobState:
    """One Slurm job as squeue reports it."""

    job_id: int
    name: str
    state: str  # PENDING, RUNNING, COMPLETING (flag), COMPLETED, FAILED, CANCELLED, ...
    reason: str
    nodes: str
    exit_code: int
    comment: str
    restarts: int
    completing: bool

    @property
    def ended(self) -> bool:
        return self.state in ENDED and not self.completing


class Slurm:
    """Runs Slurm's commands with ``SLURM_CONF`` = ``conf`` (None: as the environment says)."""

    def __init__(self, conf: str | Path | None = None, timeout_s: float = TIMEOUT_S) -> None:
        missing = [c for c in COMMANDS if shutil.which(c) is None]
        if missing:
            raise SlurmError(f"Slurm's commands are not on PATH (missing {', '.join(missing)}): install Slurm's "
                             "client tools or put them on PATH")
        conf = conf if conf is not None else os.environ.get("SLURM_CONF")
        self.conf = str(conf) if conf else None
        if self.conf is not None and not Path(self.conf).is_file():
            raise SlurmError(f"SLURM_CONF {self.conf}: no such file")
        self.env = dict(os.environ)
        if self.conf is not None:
            self.env["SLURM_CONF"] = self.conf
        self.timeout_s = timeout_s
        self.retry_s = 0.0  # how long a command waits for a controller that cannot be contacted

    def waiting(self, retry_s: float) -> Slurm:
        """The same commands, each waiting up to ``retry_s`` for a controller that cannot be contacted."""
        other = copy.copy(self)
        other.env, other.retry_s = dict(self.env), retry_s
        return other

    def run(self, *cmd: str) -> str:
        """``cmd``'s stdout; ``SlurmError`` (``ControllerDown`` when slurmctld does not answer) if it fails.

        While the controller cannot be contacted (it is restarting), the command is tried again every
        second for up to ``retry_s`` seconds (0: never); a command that timed out is never repeated (it
        may have been carried out)."""
        deadline = time.monotonic() + self.retry_s
        while True:
            try:
                return self._once(*cmd)
            except _Unreachable as e:
                if time.monotonic() >= deadline:
                    raise ControllerDown(str(e)) from None
                log.warning("%s; trying again", e)
                time.sleep(1.0)

    def _once(self, *cmd: str) -> str:
        try:
            out = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=self.timeout_s,
                                 check=False)
        except subprocess.TimeoutExpired:
            raise ControllerDown(f"{cmd[0]}: no answer within {self.timeout_s:.0f} s") from None
        if out.returncode != 0:
            said = " ".join((out.stderr or out.stdout).split()) or f"exit status {out.returncode}"
            if any(u in said.lower() for u in _UNREACHABLE):
                raise _Unreachable(f"{cmd[0]}: {said}")
            raise SlurmError(f"{cmd[0]}: {said}")
        return out.stdout

    def json(self, *cmd: str) -> dict[str, Any]:
        text = self.run(*cmd, "--json")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise SlurmError(f"{cmd[0]} --json: not JSON ({e})") from None
        if not isinstance(data, dict):
            raise SlurmError(f"{cmd[0]} --json: not a JSON object")
        errors = [str(e.get("error", e)) if isinstance(e, dict) else str(e) for e in data.get("errors") or []]
        if errors:
            raise SlurmError(f"{cmd[0]}: {'; '.join(errors)}")
        return data

    # ---- reading --------------------------------------------------------------------------
    def nodes(self) -> list[dict[str, Any]]:
        """sinfo's node records (name, gres, features, state, state_flags, partitions, ...)."""
        return list(self.json("sinfo").get("nodes") or [])

    def jobs(self, ids: Sequence[int] = ()) -> dict[int, JobState]:
        """squeue's view of jobs ``ids`` (every job when empty), ended ones included while Slurm keeps them."""
        cmd = ["squeue", "--states=all"]
        if ids:
            cmd.append("--jobs=" + ",".join(str(i) for i in ids))
        try:
            data = self.json(*cmd)
        except ControllerDown:
            raise
        except SlurmError as e:
            if "invalid job id" in str(e).lower():  # every id already purged from the controller's memory
                return {}
            raise
        return {s.job_id: s for s in (parse_job(j) for j in data.get("jobs") or [])}

    # ---- acting ---------------------------------------------------------------------------------
    def submit(self, script: Path, options: Sequence[str]) -> int:
        """``sbatch --parsable OPTIONS SCRIPT``: the new job's id."""
        out = self.run("sbatch", "--parsable", *options, str(script)).strip()
        try:
            return int(out.split(";")[0])
        except ValueError:
            raise SlurmError(f"sbatch: unexpected answer {out!r}") from None

    def update(self, job_id: int, fields: Mapping[str, str]) -> None:
        self.run("scontrol", "update", f"jobid={job_id}", *(f"{k}={v}" for k, v in fields.items()))

    def release(self, ids: Sequence[int]) -> None:
        if ids:
            self.run("scontrol", "release", ",".join(str(i) for i in ids))

    def requeue_hold(self, ids: Sequence[int]) -> None:
        if ids:
            self.run("scontrol", "requeuehold", ",".join(str(i) for i in ids))

    def signal(self, job_id: int, sig: str, *, batch: bool = True) -> None:
        """Signal the job's batch script, or with ``batch`` False its steps (an ``srun``'s tasks): not the job's
        end, it may save and exit on its own."""
        self.run("scancel", f"--signal={sig}", *(["--batch"] if batch else []), str(job_id))

    def cancel(self, ids: Sequence[int]) -> None:
        if ids:
            self.run("scancel", *(str(i) for i in ids))


def parse_job(rec: Mapping[str, Any]) -> JobState:
    """One record of ``squeue --json`` (Slurm 22.05's field names)."""
    state = str(rec.get("job_state", ""))
    flags = {str(f) for f in rec.get("flags") or []}
    code = rec.get("exit_code", 0)
    if isinstance(code, dict):  # newer Slurm: {"status": ..., "return_code": N}
        code = code.get("return_code", 0)
    return JobState(job_id=int(rec["job_id"]), name=str(rec.get("name", "")), state=state,
                    reason=str(rec.get("state_reason", "")), nodes=str(rec.get("nodes", "")),
                    exit_code=int(code or 0), comment=str(rec.get("comment", "")),
                    restarts=int(rec.get("restart_cnt", 0) or 0),
                    completing="COMPLETING" in flags or state == "COMPLETING")
