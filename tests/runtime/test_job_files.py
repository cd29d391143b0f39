"""Job files with user entrypoints: parsing, resolution of bundled job types, and every bad input
that must stop ``hadar run`` before anything starts (one line on stderr, exit code 2; no Ray)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hadar.cli import main
from hadar.errors import InputError
from hadar.runtime.run import prepare_jobs
from hadar.sim.trace import read_jobs

JOBS = Path(__file__).parent / "jobs"


def _write(tmp_path: Path, text: str, name: str = "jobs.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_job_file_mixing_entrypoints_and_bundled_types(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "train.py").write_text("def train(ctx):\n    pass\n")
    path = _write(tmp_path, """jobs:
  - name: mine
    entrypoint: sub/train.py:train
    gpus: 2
    total_steps: 300
    args: {lr: 0.01, layers: [1, 2]}
    max_failures: 5
    profile: true
    quality: -loss
  - {entrypoint: sub/train.py:train, total_steps: 10, arrival_s: 3}
  - {job_type: resnet, total_steps: 500, max_failures: 1, args: {lr: 0.001}}
  - {job_type: lstm, scale_factor: 2, total_steps: 40}
""")
    jobs = prepare_jobs(read_jobs(path))
    mine, res, lstm, second = jobs  # ids follow arrival order
    assert (mine.job_type, mine.scale_factor, mine.total_steps) == ("mine", 2, 300)
    assert mine.train.args == {"lr": 0.01, "layers": [1, 2]} and mine.train.max_failures == 5
    assert mine.train.profile and mine.train.quality == "-loss" and mine.train.emulate_as == ""
    assert mine.train.search_path[0] == str(tmp_path.resolve())
    assert second.job_type == "train-1" and second.train.max_failures == 3 and second.arrival_s == 3
    assert res.job_type == "ResNet (digits, batch size 32)" and res.train.entrypoint.endswith("image:train")
    assert res.train.max_failures == 1 and res.train.args == {"lr": 0.001} and res.train.quality == "accuracy"
    assert res.train.emulate_as == "ResNet-18 (batch size 32)" and res.train.name == "resnet"
    assert lstm.train.quality == "-perplexity" and lstm.scale_factor == 2
    assert prepare_jobs(jobs) == jobs  # resolving twice changes nothing


@pytest.mark.parametrize(("jobs", "message"), [
    ("- {entrypoint: nothere.py:train, total_steps: 10}", "file nothere.py not found"),
    (f"- {{entrypoint: {JOBS}/broken.py:nothing, total_steps: 10}}", "no function 'nothing' defined"),
    ("- {entrypoint: bad.py:train, total_steps: 10}", "syntax error in"),
    ("- {entrypoint: train.py, total_steps: 10}", "entrypoint must be FILE.py:FUNCTION"),
    ("- {entrypoint: not_a_module_x.y:train, total_steps: 10}", "cannot find module not_a_module_x.y"),
    ("- {entrypoint: good.py:train, job_type: resnet, total_steps: 10}", "either job_type"),
    ("- {total_steps: 10}", "missing job_type or entrypoint"),
    ("- {entrypoint: good.py:train, total_steps: .nan}", "total_steps must be a finite number"),
    ("- {entrypoint: good.py:train, total_steps: .inf}", "total_steps must be a finite number"),
    ("- {entrypoint: good.py:train, total_steps: 10, arrival_s: 1e9}", "arrival_s 1e+09 is more than 86400 s away"),
    ("- {entrypoint: good.py:train, total_steps: 10, gpus: 2, scale_factor: 1}", "gpus (2) and scale_factor (1)"),
    ("- {entrypoint: good.py:train, total_steps: 10, gpus: 1.5}", "scale_factor must be an integer"),
    ("- {entrypoint: good.py:train, total_steps: 10, args: [1, 2]}", "args must be a mapping"),
    ("- {entrypoint: good.py:train, total_steps: 10, args: {x: .nan}}", "args.x must be a finite number"),
    ("- {entrypoint: good.py:train, total_steps: 10, max_failures: 0}", "max_failures must be an integer >= 1"),
    ("- {entrypoint: good.py:train, total_steps: 10, profile: maybe}", "profile must be true or false"),
    ("- {entrypoint: good.py:train, total_steps: 10, emulate_as: GPT-9}", "emulate_as 'GPT-9' is not a job type"),
    ("- {entrypoint: good.py:train, total_steps: 10, name: resnet}", "belongs to a bundled workload"),
    ("- {entrypoint: good.py:train, total_steps: 10, name: a/b}", "name must be"),
    (("- {entrypoint: good.py:train, total_steps: 10, name: x}\n"
      "- {entrypoint: good.py:train, total_steps: 10, name: x, args: {a: 1}}"), "another job is named 'x'"),
    ("- {job_type: ResNet-50, total_steps: 10}", "unknown runtime job type 'ResNet-50'"),
])
def test_bad_job_files_give_one_line_and_exit_2(tmp_path, capsys, jobs, message):
    (tmp_path / "good.py").write_text("def train(ctx):\n    pass\n")
    (tmp_path / "bad.py").write_text("def train(ctx)\n    pass\n")
    path = _write(tmp_path, "jobs:\n" + "\n".join("  " + line for line in jobs.splitlines()) + "\n")
    assert main(["run", "--jobs", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hadar: error:") and message in err and "\n" not in err, err


@pytest.mark.parametrize(("extra", "message"), [
    (["--round-s", "inf"], "--round-s must be a positive number"),
    (["--round-s", "nan"], "--round-s must be a positive number"),
    (["--round-s", "-1"], "--round-s must be a positive number"),
    (["--dilation", "nan"], "--dilation must be a number >= 1"),
    (["--out", "FILE"], "--out FILE is a file, not a folder"),
    (["--checkpoint-dir", "FILE/ckpt"], "--checkpoint-dir FILE/ckpt is not writable"),
])
def test_bad_options_give_one_line_and_exit_2(tmp_path, capsys, monkeypatch, extra, message):
    monkeypatch.chdir(tmp_path)
    Path("FILE").write_text("a file\n")
    assert main(["run", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hadar: error:") and message in err and "\n" not in err, err
    assert not Path("FILE").is_dir()


def test_a_simulation_cannot_run_a_user_function_and_says_so(tmp_path, capsys):
    (tmp_path / "good.py").write_text("def train(ctx):\n    pass\n")
    path = _write(tmp_path, "jobs:\n  - {entrypoint: good.py:train, total_steps: 10, name: mine}\n")
    assert main(["simulate", "--trace", str(path), "--cluster", "1:1:1", "--no-progress"]) == 2
    assert "'mine'" in capsys.readouterr().err


def test_job_records_are_checked_field_by_field():
    from hadar.job.spec import job_fields

    with pytest.raises(InputError, match="quality must name a reported metric"):
        job_fields({"entrypoint": "a.py:f", "quality": "-"}, "w", 0, None)
    job_type, scale, spec = job_fields({"job_type": "resnet"}, "w", 0, None)
    assert (job_type, scale, spec) == ("resnet", 1, None)  # no train fields: a plain (simulated) job type


@pytest.mark.parametrize(("rec", "message"), [
    ({"entrypoint": "a.py:f", "target": 0.9}, "target needs quality"),
    ({"entrypoint": "a.py:f", "quality": "accuracy", "target": "high"}, "target must be a number"),
    ({"entrypoint": "a.py:f", "quality": "accuracy", "target": float("inf")}, "target must be a finite number"),
])
def test_a_target_is_a_finite_value_of_the_quality_metric(rec, message):
    from hadar.job.spec import job_fields

    with pytest.raises(InputError, match=message):
        job_fields(rec, "w", 0, None)
    _, _, spec = job_fields({"entrypoint": "a.py:f", "quality": "-loss", "target": "0.25"}, "w", 0, None)
    assert spec is not None and spec.target == 0.25 and spec.quality == "-loss"
    _, _, bundled = job_fields({"job_type": "resnet", "target": 0.5}, "w", 0, None)  # its quality comes with it
    assert bundled is not None and bundled.target == 0.5
