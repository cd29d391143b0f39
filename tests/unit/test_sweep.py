"""Parallel sweeps (hadar.sweep): the same results as one after the other, errors as one line."""

from __future__ import annotations

import json

import pytest

from hadar.cli import main
from hadar.sweep import run_tasks

#: summary fields that measure this machine's wall clock, not the schedule
TIMING = {"wall_s", "decision_s_per_round", "solve_s_total"}
ARGS = ["compare", "--trace", "small_test", "--cluster", "4:4:4", "--policies", "hadar,max_min_fairness_perf,yarn_cs",
        "--json"]


def _results(capsys, *extra: str) -> list[dict]:
    assert main([*ARGS, *extra]) == 0
    out = json.loads(capsys.readouterr().out)["results"]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in out]


def test_parallel_compare_gives_the_serial_results(capsys):
    serial = _results(capsys)
    parallel = _results(capsys, "--parallel", "3")
    assert [r["policy"] for r in parallel] == ["hadar", "max_min_fairness_perf", "yarn_cs"]
    assert parallel == serial
    assert serial[0]["jobs_completed"] == serial[0]["jobs"] > 0 and serial[0]["ftf_max"] is not None


def test_a_failing_parallel_run_is_one_line_and_exit_2(tmp_path, capsys):
    p = tmp_path / "j.csv"
    p.write_text("job_type,scale_factor,total_steps,arrival_s\nResNet-50 (batch size 64),8,1000,0\n")
    assert main(["compare", "--trace", str(p), "--cluster", "4:4:4", "--policies", "hadar", "--parallel", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "finish-time fairness needs each job run alone" in err[0]


def _square(task: int, report) -> int:
    report(task)
    return task * task


def test_results_come_back_in_task_order_with_progress():
    seen: list[tuple[int, int]] = []
    done: list[int] = []
    out = run_tasks(_square, [3, 1, 2, 5], workers=2, on_progress=lambda i, n: seen.append((i, n)),
                    on_done=done.append)
    assert out == [9, 1, 4, 25]
    assert sorted(seen) == [(0, 3), (1, 1), (2, 2), (3, 5)] and sorted(done) == [0, 1, 2, 3]


@pytest.mark.runtime
def test_ray_tasks_give_the_serial_results(ray_session, capsys):
    import ray

    address = ray.get_runtime_context().gcs_address
    assert run_tasks(_square, [3, 1, 2], address=address) == [9, 1, 4]
    serial = _results(capsys, "--no-ftf")
    on_ray = _results(capsys, "--no-ftf", "--address", address)
    assert on_ray == serial
    assert ray.is_initialized()  # the session's connection is kept
