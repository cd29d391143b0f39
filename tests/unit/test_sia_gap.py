"""bench/sia_gap.py (docs/sia.md, "Where the scale-gpus gap comes from"): per model, a Sia log against a hadar
run, on hand-made files of both formats.

One cifar10 job at batch 8 (1 GPU: 2 steps/s on an A100, 0.5 on a T4, 1 on an RTX). In Sia's log it runs
60 s on an A100 (`dgx-ext`), then 60 s on a T4 (`aws`), and ends at 120 s: its placed rate is
(60 x 1 + 60 x 0.25) / 120 = 0.625. In hadar's it holds GPU 30 (an A100: the import's cluster lists 24 T4s,
16 A100s, 24 RTXs) for 100 s: 1.0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import load_bench

TYPE = "cifar10 (batch size 8)"


def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    imp, out = tmp_path / "import", tmp_path / "hadar"
    imp.mkdir()
    out.mkdir()
    (imp / "trace.csv").write_text(f"job_type,sia_name,application\n{TYPE},cifar10-0,cifar10\n")
    rates = {"a100": 2.0, "t4": 0.5, "rtx2080ti": 1.0}
    (imp / "throughputs.json").write_text(json.dumps({t: {f"('{TYPE}', 1)": {"null": r}} for t, r in rates.items()}))
    job = {"name": "cifar10-0", "submission_time": 0, "num_restarts": 1}
    log = tmp_path / "sia.log"
    log.write_text("\n".join(json.dumps({"timestamp": t, "submitted_jobs": [{**job, **j}]}) for t, j in (
        (0, {"placement": [1], "cluster": "dgx-ext", "completion_time": None}),
        (60, {"placement": [1], "cluster": "aws", "completion_time": None}),
        (120, {"placement": [], "cluster": "aws", "completion_time": 120}))) + "\n")
    head = "job_id,job_type,sia_name,application,arrival_s,first_start_s,finish_s,jct_s,restarts"
    (out / "jobs.csv").write_text(f"{head}\n0,{TYPE},cifar10-0,cifar10,0,0,100,100,0\n")
    (out / "events.jsonl").write_text(json.dumps({"t": 0.0, "event": "arrival", "job": 0}) + "\n" + json.dumps(
        {"t": 0.0, "event": "round", "end": 100.0, "leases": [[0, 0, [30], False]]}) + "\n")
    return log, out, imp


def test_the_placed_rate_gpu_hours_and_jct_of_each_run(tmp_path, capsys) -> None:
    gap = load_bench("sia_gap")
    log, out, imp = _files(tmp_path)
    assert gap.main([str(log), str(out), str(imp)]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = [c.strip() for c in lines[2].split("|")[1:-1]]
    # model, jobs, JCT h (Sia, hadar), wait h, restarts, GPU-h, mean GPUs, placed rate
    assert row == ["cifar10", "1", f"{120 / 3600:.3f}", f"{100 / 3600:.3f}", "0.000", "0.000", "1", "0",
                   f"{120 / 3600:.1f}", f"{100 / 3600:.1f}", "1.00", "1.00", "0.62", "1.00"]
    sia = gap.sia_tally(log, {"cifar10-0": TYPE}, json.loads((imp / "throughputs.json").read_text()))
    assert sia.rows()["cifar10"]["placed"] == pytest.approx(0.625)
    assert sia.summary() == pytest.approx((120 / 3600, 120 / (64 * 120)))


def test_a_missing_file_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    gap = load_bench("sia_gap")
    log, out, imp = _files(tmp_path)
    (out / "events.jsonl").unlink()
    assert gap.main([str(log), str(out), str(imp)]) == 2
    assert capsys.readouterr().err.strip() == f"sia_gap: not found: {out / 'events.jsonl'}"
