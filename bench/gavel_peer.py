"""Gavel's simulator as a peer, run side by side with hadar by the benches (never copied from).

Gavel's environment is the one ``../shared/peers/setup-gavel.sh`` builds: a venv and a copy of
Gavel's scheduler under ``$GAVEL_ROOT`` (default ``$TMPDIR/gavel-peer``, ``/tmp/gavel-peer``
without TMPDIR). ``find()`` returns it or None; a bench that gets ``--setup-gavel`` runs the
script first. Gavel's drivers run in a subprocess of its own venv, from its scheduler folder,
with ``OPENBLAS_NUM_THREADS=1``; ``pin_blas()`` gives hadar's side the same setting. Wall times
are taken around the whole subprocess (start-up and imports included).

    env = gavel_peer.find()
    run = gavel_peer.run_trace(env, "small_test", "4:4:4", "max_min_fairness_perf")
    run.avg_jct_s, run.makespan_s, run.utilization, run.wall_s
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SETUP_SCRIPT = Path(__file__).resolve().parents[2] / "shared" / "peers" / "setup-gavel.sh"
THROUGHPUTS = {"simulation": "simulation_throughputs.json", "physical": "physical_cluster_throughputs.json"}
TRACE_DRIVER = "scripts/drivers/simulate_scheduler_with_trace.py"
GENERATED_DRIVER = "scripts/drivers/simulate_scheduler_with_generated_jobs.py"
BLAS_ENV = {"OPENBLAS_NUM_THREADS": "1"}

# The line of Gavel's scheduler.py (simulation branch) after which --ties rounds the allocation.
_ALLOCATION_LINE = "self._allocation = self._compute_allocation()"


class RunFailed(RuntimeError):
    """A driver (Gavel's, or hadar's CLI) failed, or printed nothing we could read."""


@dataclass(frozen=True, slots=True)
class GavelEnv:
    root: Path
    python: Path  # Gavel's venv interpreter
    scheduler: Path  # the folder Gavel's drivers run from


@dataclass(frozen=True, slots=True)
class GavelRun:
    """What one run of a Gavel driver printed, and how long the subprocess took."""

    avg_jct_s: float
    makespan_s: float | None  # "Total duration"
    utilization: float
    wall_s: float


def root() -> Path:
    """Where setup-gavel.sh puts Gavel's environment (the same rule as the script)."""
    return Path(os.environ.get("GAVEL_ROOT") or Path(os.environ.get("TMPDIR") or "/tmp") / "gavel-peer")


def find(setup: bool = False) -> GavelEnv | None:
    """Gavel's environment if it is there (after running setup-gavel.sh when ``setup``), else None."""
    where = root()
    if setup:
        if not SETUP_SCRIPT.is_file():
            raise RunFailed(f"--setup-gavel: {SETUP_SCRIPT} not found (it lives in ../shared/peers/)")
        subprocess.run(["bash", str(SETUP_SCRIPT)], check=True, stdout=subprocess.DEVNULL,
                       env={**os.environ, "GAVEL_ROOT": str(where)})
    env = GavelEnv(where, where / "venv" / "bin" / "python", where / "scheduler")
    if env.python.is_file() and (env.scheduler / "scheduler.py").is_file():
        return env
    return None


def missing_note() -> str:
    """One line for a bench to print when ``find()`` gave None."""
    return (f"Gavel not measured: no Gavel environment at {root()} (run the bench with --setup-gavel, "
            f"or {SETUP_SCRIPT}; GAVEL_ROOT sets the place)")


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--setup-gavel", action="store_true",
                    help="build Gavel's environment first (../shared/peers/setup-gavel.sh; GAVEL_ROOT sets where)")


def pin_blas() -> None:
    """Re-run this process with OPENBLAS_NUM_THREADS=1 unless it already has it (call it first in
    main(): the variable only counts before numpy loads OpenBLAS), so both sides use one thread."""
    if all(os.environ.get(k) == v for k, v in BLAS_ENV.items()):
        return
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **BLAS_ENV})


def timed(cmd: list[str], cwd: Path | str | None = None, timeout_s: float | None = None) -> tuple[str, str, float]:
    """Run ``cmd`` with one BLAS thread; (stdout, last 64 KiB of stderr, wall seconds).

    Output goes to temporary files, not pipes (Gavel's -v log is hundreds of MB on long runs).
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, check=False, cwd=cwd, stdout=out, stderr=err, timeout=timeout_s,
                              env={**os.environ, **BLAS_ENV})
        wall = time.perf_counter() - t0
        out.seek(0)
        stdout = out.read().decode(errors="replace")
        size = err.seek(0, os.SEEK_END)
        err.seek(max(0, size - 65536))
        stderr = err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RunFailed(f"{' '.join(cmd[:4])} ... exited with {proc.returncode}: {stderr.strip()[-800:]}")
    return stdout, stderr, wall


def _number(pattern: str, text: str, what: str) -> float:
    m = re.search(pattern, text, re.MULTILINE)
    if m is None:
        raise RunFailed(f"Gavel printed no {what}")
    return float(m.group(1))


def run_trace(env: GavelEnv, trace: str, cluster: str, policy: str, table: str = "simulation", seed: int = 0,
              scheduler_dir: Path | None = None, timeout_s: float | None = None) -> GavelRun:
    """Gavel's trace driver on ``traces/physical_cluster/<trace>.trace`` (``table``: simulation or
    physical throughputs), 360 s rounds, one GPU per server, its default cadence and ECOS."""
    cmd = [str(env.python), "-u", TRACE_DRIVER, "-t", f"traces/physical_cluster/{trace}.trace", "-p", policy,
           "-c", cluster, "--throughputs_file", THROUGHPUTS[table], "--seed", str(seed)]
    out, _, wall = timed(cmd, cwd=scheduler_dir or env.scheduler, timeout_s=timeout_s)
    return GavelRun(avg_jct_s=_number(r"^Average job completion time: ([0-9.]+) seconds", out, "average JCT"),
                    makespan_s=_number(r"^Total duration: ([0-9.]+) seconds", out, "total duration"),
                    utilization=_number(r"^Cluster utilization: ([0-9.]+)", out, "utilization"), wall_s=wall)


def run_generated(env: GavelEnv, cluster: str, policy: str, jobs_per_hour: float, window: tuple[int, int],
                  seed: int = 0, multi_gpu: bool = True, timeout_s: float | None = None) -> GavelRun:
    """Gavel's generated-jobs driver (its steady-state experiment): Poisson arrivals, jobs with id in
    ``window`` measured. It prints nothing without -v (stdout and stderr go to /dev/null), so -v is
    always passed; its log is formatted either way and goes to a temporary file here."""
    cmd = [str(env.python), "-u", GENERATED_DRIVER, "-p", policy, "-c", cluster, "-l", f"{3600 / jobs_per_hour:g}",
           "-s", str(window[0]), "-e", str(window[1]), "--seed", str(seed), "-v"] + (["-m"] if multi_gpu else [])
    out, err, wall = timed(cmd, cwd=env.scheduler, timeout_s=timeout_s)
    results = r"Results: average JCT=([0-9.]+), utilization=([0-9.]+)"
    m = re.search(results, err)
    if m is None:
        raise RunFailed("Gavel printed no Results line")
    makespan = re.search(r"^Total duration: ([0-9.]+) seconds", out, re.MULTILINE)
    return GavelRun(avg_jct_s=float(m.group(1)), makespan_s=float(makespan.group(1)) if makespan else None,
                    utilization=float(m.group(2)), wall_s=wall)


@contextlib.contextmanager
def rounded_scheduler(env: GavelEnv, decimals: int = 6) -> Iterator[Path]:
    """A temporary copy of Gavel's scheduler folder whose simulator rounds every allocation value to
    ``decimals`` right after computing it (simulation branch of scheduler.py), to show what ties
    broken by ECOS's round-off do. Gavel's own folder is left as it is."""
    with tempfile.TemporaryDirectory(prefix="gavel-rounded-") as tmp:
        copy = Path(tmp) / "scheduler"
        shutil.copytree(env.scheduler, copy, ignore=shutil.ignore_patterns("__pycache__"))
        source = (copy / "scheduler.py").read_text()
        lines = source.splitlines(keepends=True)
        hits = [i for i, line in enumerate(lines) if line.strip() == _ALLOCATION_LINE]
        if len(hits) != 1:
            raise RunFailed(f"expected one '{_ALLOCATION_LINE}' in Gavel's scheduler.py, found {len(hits)}")
        line = lines[hits[0]]
        indent = line[: len(line) - len(line.lstrip())]
        lines.insert(hits[0] + 1, f"{indent}self._allocation = {{j: {{w: round(v, {decimals}) for w, v in a.items()}} "
                                  f"for j, a in self._allocation.items()}}  # hadar bench: --ties\n")
        (copy / "scheduler.py").write_text("".join(lines))
        yield copy
