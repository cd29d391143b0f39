"""Slurm's accounting for the local test cluster: MariaDB and slurmdbd on loopback ports, in the cluster's folder.

``start(cluster, db_port, dbd_port)`` makes a database folder (``mariadb-install-db``), starts ``mariadbd`` (TCP on
127.0.0.1 only, its socket in the folder) and ``slurmdbd``, each stopped later by the PID file it wrote (they are
appended to ``cluster.pidfiles``), and registers the cluster, an account and root in it (``sacctmgr``). The
slurm.conf lines that point slurmctld at it are ``conf_lines(folder, dbd_port)``.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

DB_USER = "slurm"
TRES = "gres/gpu,gres/gpu:v100,gres/gpu:p100,gres/gpu:k80"  # typed GPU-seconds in sacct's records


def conf_lines(folder: Path, dbd_port: int) -> list[str]:
    """(the munge socket for slurmdbd's connections is ``AccountingStoragePass``, not ``AuthInfo``)"""
    return ["AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=localhost",
            f"AccountingStoragePort={dbd_port}", f"AccountingStorageTRES={TRES}",
            f"AccountingStoragePass={folder / 'run' / 'munge.socket'}"]


def start(cluster: Any, db_port: int, dbd_port: int) -> None:
    from tests.slurm.localcluster import _daemon, _wait_pidfile

    folder: Path = cluster.folder
    db = folder / "db"
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={db}", "--user=root",
                    "--auth-root-authentication-method=normal", "--skip-test-db"],
                   capture_output=True, check=True, timeout=120)
    sock, pidfile = folder / "run" / "mariadb.sock", folder / "run" / "mariadb.pid"
    cluster.procs["mariadbd"] = _daemon(
        ["mariadbd", "--no-defaults", f"--datadir={db}", f"--socket={sock}", f"--port={db_port}",
         "--bind-address=127.0.0.1", f"--pid-file={pidfile}", "--user=root", "--innodb-buffer-pool-size=16M",
         f"--log-error={folder / 'log' / 'mariadb.log'}"], cluster.env, folder / "log" / "mariadb.out")
    cluster.pidfiles.append(pidfile)
    _wait_pidfile(pidfile)
    _wait_socket(sock)
    sql = (f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1'; GRANT ALL ON *.* TO '{DB_USER}'@'127.0.0.1'; "
           "FLUSH PRIVILEGES;")
    subprocess.run(["mariadb", "--no-defaults", f"--socket={sock}", "-uroot", "-e", sql], capture_output=True,
                   check=True, timeout=60)
    conf = folder / "etc" / "slurmdbd.conf"
    conf.write_text("\n".join([
        "AuthType=auth/munge", f"AuthInfo=socket={folder / 'run' / 'munge.socket'}", "DbdHost=localhost",
        f"DbdPort={dbd_port}", "SlurmUser=root", f"PidFile={folder / 'run' / 'slurmdbd.pid'}",
        f"LogFile={folder / 'log' / 'slurmdbd.log'}", "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1", f"StoragePort={db_port}", f"StorageUser={DB_USER}", "StorageLoc=slurm_acct_db",
    ]) + "\n")
    conf.chmod(0o600)
    cluster.procs["slurmdbd"] = _daemon(["slurmdbd", "-D"], cluster.env,
                                        folder / "log" / "slurmdbd.out")
    cluster.pidfiles.append(folder / "run" / "slurmdbd.pid")
    _wait_pidfile(cluster.pidfiles[-1])
    for args in (["add", "cluster", "hadartest"], ["add", "account", "hadar"],
                 ["add", "user", "root", "account=hadar"]):
        _sacctmgr(cluster, args)


def _wait_socket(path: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"MariaDB made no socket {path} within {timeout_s:.0f} s")
        time.sleep(0.1)


def _sacctmgr(cluster: Any, args: list[str], timeout_s: float = 60.0) -> None:
    """``sacctmgr -i ARGS``, tried again while slurmdbd is still connecting to its database."""
    deadline = time.monotonic() + timeout_s
    while True:
        out = cluster.run("sacctmgr", "-i", *args, check=False)
        said = out.stdout + out.stderr
        if out.returncode == 0 or "already exists" in said or "Nothing new added" in said:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"sacctmgr {' '.join(args)}: {said.strip()}")
        time.sleep(0.5)
