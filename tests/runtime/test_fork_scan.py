"""`hadar experiment fork-scan`: the noise scale measured against one known exactly, and the scan's runs and files."""

from __future__ import annotations

import csv
import json
from typing import Any

import pytest

from hadar.runtime import forkscan
from hadar.runtime.workloads.base import Workload

D, N, W_SEED = 8, 40_000, 5


class _Linear(Workload):
    """Least squares on Gaussian inputs: per-sample gradients known in closed form at any weights."""

    name = "linear (batch size 16)"
    alias = "linear"
    family = "test"
    mirrors = "ResNet-18 (batch size 16)"
    batch_size = 16
    metric = "loss"
    higher_is_better = False

    def network(self, nn: Any) -> Any:
        return nn.Linear(D, 1, bias=False)

    def make_data(self, seed: int) -> tuple[Any, Any]:
        import torch

        g = torch.Generator().manual_seed(seed)
        x = torch.randn(N, D, generator=g)
        y = x @ torch.linspace(-1, 1, D) + 0.5 * torch.randn(N, generator=g)
        return (x, y), (x[:10], y[:10])

    def loss(self, model: Any, batch: Any) -> Any:
        x, y = batch
        return 0.5 * (model(x).squeeze(-1) - y).square().mean()


def _exact_noise_scale(seed: int) -> float:
    """S / |G|^2 over the whole training set at the model's initial weights (per-sample gradients)."""

    wl = _Linear()
    (x, y), _ = wl.make_data(seed)
    w = wl.build_model(seed).weight.detach().reshape(-1)
    per = (x @ w - y).unsqueeze(1) * x  # each sample's gradient
    mean = per.mean(0)
    return float((per - mean).square().sum(1).mean() / mean.square().sum())


def test_the_noise_scale_matches_the_exact_one_of_a_least_squares_model() -> None:
    exact = _exact_noise_scale(W_SEED)
    got = forkscan.noise_scale(_Linear(), None, W_SEED, pairs=600)
    assert 5 < exact < 500  # a noise scale of a few batches: neither all signal nor all noise
    assert got == pytest.approx(exact, rel=0.15)


def test_the_prediction_is_the_quadratic_models() -> None:
    assert forkscan.predicted(0.0, 16, 2) == pytest.approx(0.5)  # no noise: k copies are worth one
    assert forkscan.predicted(16.0, 16, 2) == pytest.approx(32 / 48)
    assert forkscan.predicted(float("inf"), 16, 4) == pytest.approx(1.0)  # all noise: every copy counts


def test_the_cli_scans_phases_and_local_steps_and_writes_its_files(tmp_path, capsys) -> None:
    from hadar.cli import main

    out = tmp_path / "scan"
    assert main(["experiment", "fork-scan", "--workloads", "recoder", "--samples", "32", "--local-steps", "2,8",
                 "--warm", "0,16", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "rho" in text.splitlines()[0] and "scan.png" in text
    data = json.loads((out / "scan.json").read_text())
    points = data["points"]
    assert [(p["warm"], p["local_steps"]) for p in points] == [(0, 2), (0, 8), (16, 2), (16, 8)]
    for p in points:
        assert 0.0 <= p["eff"] <= 1.0 and p["bn"] > 0 and p["samples"] == 32 and p["copies"] == 2
        assert p["predicted"] == pytest.approx(forkscan.predicted(p["bn"], 64, 2))
        assert p["rho"] == pytest.approx(p["eff"] / p["predicted"])
    assert points[0]["bn"] == points[1]["bn"] != points[2]["bn"]  # one fork point per phase
    with open(out / "scan.csv") as f:
        assert len(list(csv.DictReader(f))) == 4
    assert (out / "scan.png").stat().st_size > 0


def test_the_train_basis_reads_the_loss_on_fixed_training_batches(tmp_path) -> None:
    from hadar.runtime.calibrate import Training, train

    a = train("recoder", 1, Training(8, 4, 3, basis="train"), tmp_path / "a")
    b = train("recoder", 1, Training(8, 4, 3, basis="train"), tmp_path / "b")
    held = train("recoder", 1, Training(8, 4, 3), tmp_path / "c")
    assert a == b and a.loss == a.metric and a.loss[-1] < a.loss[0]  # one value, the loss, falling as it trains
    assert a.loss != held.loss
    # going on from a checkpoint: the curve counts samples from it, and starts at the checkpoint's loss
    more = train("recoder", 1, Training(4, 4, 3, start=tmp_path / "a" / "job.pt", basis="train"), tmp_path / "d")
    assert more.samples == (0.0, 4.0) and more.loss[0] == pytest.approx(a.loss[-1])


@pytest.mark.parametrize(("args", "message"), [
    (["--workloads", "nope"], "unknown runtime job type 'nope'"),
    (["--local-steps", "0"], "--local-steps needs integers of at least 1"),
    (["--warm", "-1"], "--warm needs integers of at least 0"),
    (["--samples", "0"], "--samples must be at least 1"),
    (["--copies", "1"], "--copies needs integers of at least 2"),
])
def test_bad_arguments_one_line_exit_2(capsys, args, message) -> None:
    from hadar.cli import main

    assert main(["experiment", "fork-scan", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hadar: error:") and message in err and "\n" not in err, err
