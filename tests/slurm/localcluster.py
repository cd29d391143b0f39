"""A throwaway Slurm cluster on this machine: munge, slurmctld and one slurmd per node, on loopback ports.

Everything lives in one folder (configuration, state, logs, PID files, the munge key and socket) and every
daemon is stopped by the PID it wrote. The nodes are emulated: several ``slurmd -N NAME`` on one host, each
``NodeHostname=localhost`` with its own port; each node's GPUs are typed GRES backed by character device
files (``mknod ... c 195 i``, never opened) and its GPU type is also its one node feature.

``Layout``: the nodes (name, GPU type, GPUs). ``start(folder, layout)`` returns a running ``LocalSlurm``
(its ``env``: what a client needs, ``SLURM_CONF``); ``stop()`` ends what it started and waits for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.slurm import accounting

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol", "scancel", "slurmdbd", "sacct",
           "sacctmgr", "mariadbd", "mariadb-install-db", "mariadb")
PARTITION = "gpu"
JOB_SUBMIT = Path(__file__).resolve().parents[2] / "src" / "hadar" / "slurm" / "job_submit.lua"  # what hadar ships
CPUS_PER_NODE = 8  # declared (config_overrides): a node runs at most this many 1-CPU leases at once


@dataclass(frozen=True)
class NodeSpec:
    name: str
    gpu_type: str
    gpus: int


#: The test session's cluster (``tests/conftest.py``'s ``slurm_cluster``): four nodes of three GPU types; partition
#: ``gpu`` holds every node (the default), ``contract`` the first two (the executor contract's 2 V100 + 2 K80),
#: ``e2e`` the other two (2 P100 + 1 K80: the end-to-end runs).
LAYOUT = (NodeSpec("a-v100", "v100", 2), NodeSpec("b-k80", "k80", 2), NodeSpec("c-p100", "p100", 2),
          NodeSpec("d-k80", "k80", 1))
PARTITIONS = {"contract": ("a-v100", "b-k80"), "e2e": ("c-p100", "d-k80")}


def missing_commands() -> list[str]:
    return [c for c in DAEMONS if shutil.which(c) is None]


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class LocalSlurm:
    folder: Path
    nodes: tuple[NodeSpec, ...]
    ctld_port: int
    pidfiles: list[Path] = field(default_factory=list)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)  # daemons run as our children

    @property
    def conf(self) -> Path:
        return self.folder / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, check=check, timeout=60)

    def node_pidfile(self, name: str) -> Path:
        return self.folder / "run" / f"slurmd-{name}.pid"

    def start_node(self, name: str) -> None:
        """Start node ``name``'s slurmd (again, after ``kill_node``)."""
        (self.folder / "spool" / name).mkdir(parents=True, exist_ok=True)
        self.procs[name] = _daemon(["slurmd", "-D", "-N", name, "-f", str(self.conf)], self.env,
                                   self.folder / "log" / f"slurmd-{name}.out")
        _wait_pidfile(self.node_pidfile(name))

    def kill_node(self, name: str) -> None:
        """SIGKILL node ``name``'s slurmd (a node that dies; its jobs' processes die with the test's kill)."""
        pid = _read_pid(self.node_pidfile(name))
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, 10.0)
        self._reap(name)

    def _reap(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def restart_controller(self, down_s: float) -> None:
        """Stop slurmctld (SIGTERM: it saves its state), leave it down ``down_s`` seconds, start it again."""
        pidfile = self.folder / "run" / "slurmctld.pid"
        pid = _read_pid(pidfile)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            _wait_gone(pid, 30.0)
        self._reap("slurmctld")
        pidfile.unlink(missing_ok=True)
        time.sleep(down_s)
        self.procs["slurmctld"] = _daemon(["slurmctld", "-D", "-i", "-f", str(self.conf)], self.env,
                                          self.folder / "log" / "slurmctld.out")
        _wait_pidfile(pidfile)

    def wait_idle(self, timeout_s: float = 60.0) -> None:
        """Until every node is up (IDLE or MIXED/ALLOCATED) in sinfo."""
        deadline = time.monotonic() + timeout_s
        states: dict[str, list[str]] = {}
        while time.monotonic() < deadline:
            out = self.run("sinfo", "--json", check=False)
            if out.returncode == 0:
                states = {n["name"]: [*n.get("state_flags", []), n.get("state", "")]
                          for n in json.loads(out.stdout).get("nodes", [])}
                if len(states) == len(self.nodes) and all(
                        s[-1] in ("idle", "mixed", "allocated") and not {"NOT_RESPONDING", "DRAIN"} & set(s)
                        for s in states.values()):
                    return
            time.sleep(0.2)
        raise RuntimeError(f"the local Slurm's nodes did not come up within {timeout_s:.0f} s: {states}; "
                           f"see {self.folder / 'log'}")

    def stop(self) -> None:
        """Cancel every job, then end every daemon by its PID file (slurmd, slurmctld, munged) and wait."""
        with contextlib.suppress(Exception):
            self.run("scancel", "--full", "--partition", PARTITION, check=False)
            time.sleep(0.5)
        for pidfile in reversed(self.pidfiles):
            pid = _read_pid(pidfile)
            if pid is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            if not _wait_gone(pid, 15.0):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                _wait_gone(pid, 5.0)
        for name in list(self.procs):
            self._reap(name)


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie (our own child, not yet reaped) counts as gone
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


def _wait_pidfile(path: Path, timeout_s: float = 30.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid = _read_pid(path)
        if pid is not None and _alive(pid):
            return pid
        time.sleep(0.05)
    raise RuntimeError(f"no live daemon wrote {path} within {timeout_s:.0f} s")


def _slurm_conf(folder: Path, nodes: Sequence[NodeSpec], ctld_port: int, node_ports: Sequence[int],
                partitions: Mapping[str, Sequence[str]], dbd_port: int | None = None) -> str:
    lines = [
        "ClusterName=hadartest", "SlurmctldHost=localhost", f"SlurmctldPort={ctld_port}",
        "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
        f"AuthInfo=socket={folder / 'run' / 'munge.socket'}",
        f"StateSaveLocation={folder / 'state'}", f"SlurmdSpoolDir={folder / 'spool'}/%n",
        f"SlurmctldPidFile={folder / 'run' / 'slurmctld.pid'}", f"SlurmdPidFile={folder / 'run'}/slurmd-%n.pid",
        f"SlurmctldLogFile={folder / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={folder / 'log'}/slurmd-%n.log",
        "SlurmctldDebug=info", "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/builtin", "SchedulerParameters=batch_sched_delay=0",
        "GresTypes=gpu", "SlurmdParameters=config_overrides", "ReturnToService=2", "JobRequeue=1",
        *(accounting.conf_lines(folder, dbd_port) if dbd_port else ["AccountingStorageType=accounting_storage/none"]),
        "JobCompType=jobcomp/none",
        "KillWait=5", "MinJobAge=600", "SlurmdTimeout=10", "InactiveLimit=0", "MessageTimeout=10",
        "TreeWidth=65533", "JobSubmitPlugins=lua",  # hadar's job_submit.lua (next to slurm.conf): docs/slurm.md
    ]
    for node, port in zip(nodes, node_ports, strict=True):
        lines.append(f"NodeName={node.name} NodeHostname=localhost Port={port} CPUs={CPUS_PER_NODE} "
                     f"Gres=gpu:{node.gpu_type}:{node.gpus} Feature={node.gpu_type} State=UNKNOWN")
    lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    for name, members in partitions.items():
        lines.append(f"PartitionName={name} Nodes={','.join(members)} MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def _gres_conf(folder: Path, nodes: Sequence[NodeSpec]) -> str:
    lines = ["AutoDetect=off"]
    minor = 0
    for node in nodes:
        for i in range(node.gpus):
            dev = folder / "dev" / f"{node.name}-gpu{i}"
            os.mknod(dev, 0o600 | 0o020000, os.makedev(195, minor))  # a character device, never opened
            minor += 1
            lines.append(f"NodeName={node.name} Name=gpu Type={node.gpu_type} File={dev}")
    return "\n".join(lines) + "\n"


def _daemon(cmd: list[str], env: dict[str, str], out: Path) -> subprocess.Popen[bytes]:
    """``cmd`` in the foreground as a child of this process (so that it is reaped when it ends)."""
    with out.open("ab") as f:
        return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _start_munge(cluster: LocalSlurm) -> Path:
    folder = cluster.folder
    key = folder / "etc" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    pidfile = folder / "run" / "munged.pid"
    cluster.procs["munged"] = _daemon(
        ["munged", "--foreground", "--force", f"--key-file={key}", f"--socket={folder / 'run' / 'munge.socket'}",
         f"--pid-file={pidfile}", f"--log-file={folder / 'log' / 'munged.log'}",
         f"--seed-file={folder / 'state' / 'munge.seed'}"], cluster.env, folder / "log" / "munged.out")
    _wait_pidfile(pidfile)
    return pidfile


def start(folder: Path, layout: Sequence[NodeSpec], partitions: Mapping[str, Sequence[str]] | None = None,
          timeout_s: float = 60.0, accounting_db: bool = False) -> LocalSlurm:
    """A running cluster of ``layout`` in ``folder`` (created), with partition ``gpu`` (every node, the default)
    and ``partitions`` (name -> node names); stopped again if it fails to come up."""
    if missing := missing_commands():
        raise RuntimeError(f"Slurm is not installed (missing {', '.join(missing)}): run .ci/install-slurm.sh")
    folder = Path(folder)
    for sub in ("etc", "state", "spool", "run", "log", "dev"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    ctld, db, dbd, *ports = _free_ports(3 + len(layout))
    cluster = LocalSlurm(folder, tuple(layout), ctld)
    cluster.conf.write_text(_slurm_conf(folder, layout, ctld, ports, partitions or {}, dbd if accounting_db else None))
    (folder / "etc" / "gres.conf").write_text(_gres_conf(folder, layout))
    shutil.copyfile(JOB_SUBMIT, folder / "etc" / "job_submit.lua")
    try:
        cluster.pidfiles.append(_start_munge(cluster))
        if accounting_db:
            accounting.start(cluster, db, dbd)
        cluster.procs["slurmctld"] = _daemon(["slurmctld", "-D", "-i", "-f", str(cluster.conf)], cluster.env,
                                             folder / "log" / "slurmctld.out")
        cluster.pidfiles.append(folder / "run" / "slurmctld.pid")
        _wait_pidfile(cluster.pidfiles[-1])
        for node in layout:
            cluster.pidfiles.append(cluster.node_pidfile(node.name))
            cluster.start_node(node.name)
        cluster.wait_idle(timeout_s)
    except BaseException:
        cluster.stop()
        raise
    return cluster
