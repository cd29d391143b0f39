"""The job API measures the gradient noise scale (``ctx.gradient_noise``): one replica from consecutive steps
in this process, a two-rank gang (DDP over gloo) from the ranks' norms before and after the all-reduce.
The job trains linear regression at fixed weights, so the exact noise scale is the dataset's (``truth``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hadar.job.lease import LeaseSpec
from hadar.job.runner import run_lease

JOBS = Path(__file__).parent / "jobs"
REPO = Path(__file__).parents[2]
sys.path.insert(0, str(JOBS))
import noise_probe  # noqa: E402

ARGS = {"n": 4096, "d": 8, "batch": 16, "data_seed": 3}


def _truth() -> float:
    sqr, var = noise_probe.truth(ARGS["data_seed"], ARGS["n"], ARGS["d"])
    return var / sqr


def test_one_replica_measures_the_noise_scale_from_consecutive_steps(tmp_path):
    iterations = 2000
    spec = LeaseSpec(job_id=1, entrypoint="noise_probe.py:train", rank=0, world=1, max_iterations=iterations,
                     budget_s=600.0, checkpoint=str(tmp_path / "job-1.pt"), search_path=(str(JOBS),), run_id="r1",
                     args_json=json.dumps({**ARGS, "smoothing": 0.995}), total_steps=float(iterations))
    out = run_lease(spec)
    assert out.error == "" and out.iterations == iterations
    m = out.metrics
    assert m["noise_scale"] == pytest.approx(_truth(), rel=0.15)  # ~9.9 samples: the exact figure is 9.907
    assert m["noise_scale"] == pytest.approx(m["grad_var"] / m["grad_sqr"])


def test_a_gang_measures_it_from_the_ranks_norms_around_the_all_reduce(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hadar.job", f"{JOBS / 'noise_probe.py'}:train", "--steps", "1600",
                           "--gpus", "2", "--device", "cpu", "--lease-s", "300",
                           "--args", json.dumps({**ARGS, "smoothing": 0.99})],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = [json.loads(x) for x in proc.stdout.splitlines()]
    assert line["ok"] and line["iterations"] == 800  # 1,600 steps = 800 x 2 ranks: 800 pairs of norms
    assert line["metrics"]["noise_scale"] == pytest.approx(_truth(), rel=0.2)
