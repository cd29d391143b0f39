"""``hadar run --slurm`` needs no Ray: a whole run in a Python where ``import ray`` fails."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm.localcluster import LocalSlurm

pytestmark = pytest.mark.slurm
SLEEPER = Path(__file__).resolve().parent / "jobs" / "sleeper.py"
SRC = Path(__file__).resolve().parents[2] / "src"
# ray made unimportable (None in sys.modules), then hadar's command line; the run's own answer, then whether ray
# got in after all
CODE = ("import sys; sys.modules['ray'] = None; from hadar.cli import main; code = main(sys.argv[1:]); "
        "print('ray imported' if sys.modules.get('ray') is not None else 'no ray', file=sys.stderr); sys.exit(code)")


def test_hadar_run_slurm_completes_a_job_without_ray(slurm_idle: LocalSlurm, tmp_path):
    # rounds of 30 s: the job's 40 steps fit in its first lease, which ends the round early (6 s rounds made one
    # step a lease at load 20, where the lease's process took most of the round to start: 20 rounds, 244 s)
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"jobs:\n  - {{name: s, entrypoint: '{SLEEPER}:train', total_steps: 40, "
                    "emulate_as: 'ResNet-18 (batch size 64)', args: {step_s: 0.02}}\n")
    out = subprocess.run([sys.executable, "-c", CODE, "run", "--slurm", "--jobs", str(jobs), "--partition", "e2e",
                          "--round-s", "30", "--out", str(tmp_path / "out"), "--json", "--no-progress"],
                         env={**slurm_idle.env, "PYTHONPATH": str(SRC)}, capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == "no ray"
    summary = json.loads(out.stdout)
    assert summary["jobs_completed"] == 1 and summary["jobs_failed"] == 0 and summary["slurm_jobs"] >= 1
