"""The CLI as a user meets it: subprocesses, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def hadar(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hadar.cli", *args], capture_output=True, text=True, cwd=cwd,
                          check=False, timeout=300)


def assert_one_line_error(proc: subprocess.CompletedProcess, fragment: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("hadar: error: ") and fragment in lines[0], lines[0]


@pytest.mark.parametrize(("args", "fragment"), [
    (["simulate", "--trace", "missing.trace"], "trace file not found: missing.trace"),
    (["simulate", "--cluster", "4:-1:4"], "must not be negative"),
    (["simulate", "--cluster", "-1:2:3"], "count for v100 must not be negative"),  # a value, not an option
    (["compare", "--cluster", "-4:4:4", "--policies", "hadar"], "must not be negative"),
    (["simulate", "--cluster", "h100=4"], "unknown GPU type(s) h100"),
    (["simulate", "--policy", "nope"], "unknown policy 'nope'"),
    (["simulate", "--throughputs", "nowhere.json"], "throughputs file not found"),
    (["simulate", "--generate", "--jobs-per-hour", "-1", "--num-jobs", "5"], "jobs-per-hour must be positive"),
    (["simulate", "--generate", "--jobs-per-hour", "1"], "needs --num-jobs N or --window A B"),
    (["simulate", "--generate", "--jobs-per-hour", "1", "--num-jobs", "0"], "--num-jobs must be positive"),
    (["simulate", "--window", "5", "2"], "needs 0 <= A < B"),
    (["simulate", "--round-s", "0"], "--round-s must be a positive number of seconds"),
    (["simulate", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_input_one_line_exit_2(args, fragment):
    assert_one_line_error(hadar(*args), fragment)


def test_malformed_trace_names_line(tmp_path):
    p = tmp_path / "bad.trace"
    p.write_text("A3C\tc\td\t-n\t1\t100\t1\t1\t-1\t0\nA3C\tc\td\t-n\t1\n")
    assert_one_line_error(hadar("simulate", "--trace", str(p)), "bad.trace:2: expected 10 tab-separated fields")


def test_unknown_job_type_names_line(tmp_path):
    p = tmp_path / "bad.trace"
    p.write_text("A3C\tc\td\t-n\t1\t100\t1\t1\t-1\t0\nGPT-9\tc\td\t-n\t1\t100\t1\t1\t-1\t0\n")
    assert_one_line_error(hadar("simulate", "--trace", str(p), "--policy", "fifo_perf"),
                          "bad.trace:2: unknown job type for 'GPT-9'")


def test_job_no_gpu_can_run(tmp_path):
    p = tmp_path / "big.trace"
    p.write_text("ResNet-50 (batch size 64)\tc\td\t-n\t1\t100\t8\t1\t-1\t0\n")
    assert_one_line_error(hadar("simulate", "--trace", str(p), "--cluster", "4:4:4", "--policy", "fifo_perf"),
                          "big.trace:1: 'ResNet-50 (batch size 64)' needs 8 GPUs")


def test_json_output_is_one_object_with_required_keys(tmp_path):
    proc = hadar("simulate", "--trace", "small_test", "--cluster", "4:4:4", "--policy", "max_min_fairness_perf",
                 "--json", "--out", str(tmp_path / "o"), "--ftf")
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    for key in ("policy", "jobs", "jobs_completed", "avg_jct_s", "median_jct_s", "p99_jct_s", "makespan_s",
                "utilization", "avg_queuing_delay_s", "wall_s", "ftf_mean", "ftf_max"):
        assert key in obj, key
    assert obj["jobs"] == obj["jobs_completed"] == 20
    assert obj["ftf_max"] >= obj["ftf_mean"] > 0
    out = tmp_path / "o"
    assert json.loads((out / "summary.json").read_text())["jobs"] == 20
    assert len((out / "jobs.csv").read_text().splitlines()) == 21
    for png in ("jct_cdf.png", "utilization.png", "placement_max_min_fairness_perf.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert {e["event"] for e in events} >= {"arrival", "round", "finish", "resolve"}


def test_default_run_prints_a_table():
    proc = hadar("simulate", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "avg_jct_s" in proc.stdout and "max_min_fairness_perf" in proc.stdout
    assert "jobs_completed      96" in proc.stdout.replace(" ", " ") or "96" in proc.stdout


def test_policies_lists_gavel_names():
    proc = hadar("policies")
    assert proc.returncode == 0
    names = {line.split()[0] for line in proc.stdout.splitlines()}
    assert {"max_min_fairness", "max_min_fairness_perf", "finish_time_fairness", "finish_time_fairness_perf",
            "min_total_duration", "min_total_duration_perf", "max_sum_throughput_perf", "fifo", "fifo_perf",
            "isolated", "max_min_fairness_water_filling_perf"} <= names


def test_generated_window_run(tmp_path):
    proc = hadar("simulate", "--generate", "--jobs-per-hour", "4", "--window", "10", "30", "--cluster", "4:4:4",
                 "--policy", "fifo_perf", "--json")
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    assert obj["jobs"] == obj["jobs_completed"] == 20


# The core install: `import ray/torch/sklearn` raises ModuleNotFoundError, as where they are not installed.
WITHOUT_RUNTIME_EXTRA = """
import sys
for mod in ("ray", "torch", "sklearn"):
    sys.modules[mod] = None
from hadar.cli import main
code = main(sys.argv[1:])
assert not {"ray", "torch", "sklearn"} & {m.split(".")[0] for m, v in sys.modules.items() if v is not None}
sys.exit(code)
"""


def without_runtime_extra(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_RUNTIME_EXTRA, *args], capture_output=True, text=True,
                          check=False, timeout=300)


def test_help_and_simulate_work_without_the_runtime_extra():
    proc = without_runtime_extra("--help")
    assert proc.returncode == 0, proc.stderr
    for command in ("simulate", "compare", "policies", "run", "experiment", "report"):
        assert command in proc.stdout
    proc = without_runtime_extra("simulate", "--trace", "small_test", "--cluster", "4:4:4", "--json", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["jobs_completed"] == 20


@pytest.mark.parametrize("args", [["run"], ["run", "--policy", "hadar", "--json"], ["experiment", "hadare"]])
def test_runtime_commands_without_the_extra_say_what_to_install(args):
    proc = without_runtime_extra(*args)
    assert_one_line_error(proc, f"`hadar {args[0]}` needs the runtime extra (ray, torch, scikit-learn not installed)")
    assert "pip install 'hadar[runtime]'" in proc.stderr


def test_progress_only_on_a_terminal_and_never_with_quiet(monkeypatch):
    import argparse
    import io

    from hadar.cli import show_progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert not show_progress(argparse.Namespace(quiet=False, no_progress=False))
    monkeypatch.setattr("sys.stderr", Tty())
    assert show_progress(argparse.Namespace(quiet=False, no_progress=False))
    assert not show_progress(argparse.Namespace(quiet=True, no_progress=False))
    assert not show_progress(argparse.Namespace(quiet=False, no_progress=True))


def test_verbose_and_quiet_set_the_log_level(capsys):
    import logging

    from hadar.cli import main

    assert main(["simulate", "--trace", "small_test", "--cluster", "4:4:4", "--json", "-vv"]) == 0
    assert logging.getLogger().level == logging.DEBUG
    assert main(["simulate", "--trace", "small_test", "--cluster", "4:4:4", "--json", "-q"]) == 0
    assert logging.getLogger().level == logging.ERROR
    capsys.readouterr()


def test_profiles_label_each_compare_row(tmp_path, capsys):
    import json

    from hadar.cli import main

    p = tmp_path / "p.yaml"
    p.write_text("pack: {policy: hadar, plan: pack}\n")
    assert main(["compare", "--profiles", str(p), "--policies", "hadar,pack", "--trace", "small_test",
                 "--cluster", "4:4:4", "--json", "--no-ftf"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in out["results"]] == ["hadar", "pack"]


@pytest.mark.parametrize(("text", "message"), [
    ("pack: {policy: hadar, plan: nope}\n", "unknown Hadar plan 'nope'"),
    ("pack: {policy: hadar, plann: pack}\n", "has no parameter 'plann'"),
    ("pack: {policy: nosuch}\n", "unknown policy 'nosuch'"),
    ("hadar: {policy: hadar}\n", "shadows the registered policy"),
    ("pack: [1, 2]\n", "must be a mapping with a 'policy' key"),
    ("pack: {policy: hadar, steepness: fast}\n", "parameter steepness must be a number"),
])
def test_bad_profiles_one_line_exit_2(tmp_path, capsys, text, message):
    from hadar.cli import main

    p = tmp_path / "p.yaml"
    p.write_text(text)
    assert main(["simulate", "--profiles", str(p), "--policy", "pack", "--trace", "small_test", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hadar: error:") and message in err and "\n" not in err
