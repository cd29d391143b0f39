"""The fork-efficiency calibration on real training (no Ray): curves, the merge it goes through, its CLI and file."""

from __future__ import annotations

import json

import pytest

from hadar.model.fork_efficiency import ForkEfficiency
from hadar.runtime import calibrate, checkpoint


def test_a_forked_curve_goes_through_the_job_trackers_merge(tmp_path) -> None:
    """k = 2 copies of 2 local steps each: rounds of 4 samples; the canonical checkpoint says 8 samples
    from copies 0 and 1, and the same seeds give the same numbers."""
    c = calibrate.train_curve("recoder", 2, steps=8, local_steps=2, seed=3, folder=tmp_path / "a")
    assert c.samples == (0.0, 4.0, 8.0) and len(c.metric) == len(c.loss) == 3
    meta = checkpoint.meta_of(checkpoint.load(tmp_path / "a" / "job.pt"))
    assert meta["steps"] == 8.0 and meta["copies"] == [0, 1] and meta["iteration"] == 4
    again = calibrate.train_curve("recoder", 2, steps=8, local_steps=2, seed=3, folder=tmp_path / "b")
    assert again == c
    one = calibrate.train_curve("recoder", 1, steps=6, local_steps=4, seed=3, folder=tmp_path / "c")
    assert one.samples == (0.0, 4.0, 6.0) and one.loss[-1] < one.loss[0]  # a last, shorter round


def test_summarize_converts_on_the_unforked_curve() -> None:
    u = calibrate.Curve("recoder", 1, 0, (0.0, 4.0, 8.0), (0.1, 0.2, 0.3), (1.0, 0.6, 0.4))
    f = calibrate.Curve("recoder", 2, 0, (0.0, 8.0), (0.1, 0.25), (1.0, 0.5))
    s = calibrate.summarize([u, f], "loss")["recoder"]
    assert s["copies"]["2"]["loss"]["mean"] == pytest.approx(6.0 / 8.0)  # loss 0.5 half-way from 4 to 8
    assert s["copies"]["2"]["metric"]["mean"] == pytest.approx(6.0 / 8.0)
    assert s["per_doubling"] == pytest.approx(0.75) and s["family"] == "recommendation"


def test_the_cli_writes_a_file_the_simulator_reads(tmp_path, capsys) -> None:
    from hadar.cli import main

    out = tmp_path / "eff.json"
    assert main(["experiment", "fork-efficiency", "--workloads", "recoder", "--steps", "recoder=8", "--copies", "2",
                 "--local-steps", "2", "--seeds", "0", "--out", str(out), "--no-progress"]) == 0
    assert "Recoder (batch size 64)" in capsys.readouterr().out
    data = json.loads(out.read_text())
    eff = ForkEfficiency.load(out)
    assert eff.per_doubling_of("Recommendation (batch size 512)") == data["families"]["recommendation"]["per_doubling"]
    assert data["calibration"]["settings"]["steps"] == {"recoder": 8}


@pytest.mark.parametrize(("args", "message"), [
    (["--workloads", "nope"], "unknown runtime job type 'nope'"),
    (["--copies", "1"], "--copies needs integers of at least 2"),
    (["--seeds", "a"], "--seeds must be comma-separated integers"),
    (["--steps", "resnet=x"], "--steps resnet must be comma-separated integers"),
    (["--local-steps", "0"], "--local-steps must be at least 1"),
])
def test_bad_arguments_one_line_exit_2(capsys, args, message) -> None:
    from hadar.cli import main

    assert main(["experiment", "fork-efficiency", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hadar: error:") and message in err and "\n" not in err, err
