"""The experiment's aggregation/table and ``hadar report`` on hand-made output folders (no Ray, no torch)."""

from __future__ import annotations

import json

import pytest

from hadar.cli import main
from hadar.runtime.experiment import aggregate_runs, experiment_cluster, experiment_jobs, format_table, write_experiment
from hadar.runtime.workloads import get


def _events(gpus: int) -> list[dict]:
    return [{"t": 0.0, "event": "round", "end": 4.0, "leases": [[j, 0, [j], False] for j in range(gpus)]},
            {"t": 4.0, "event": "round", "end": 8.0, "leases": [[0, c, [c], False] for c in range(gpus)]}]


def _run_folder(path, policy, ttd, util, finals):
    path.mkdir(parents=True)
    summary = {"policy": policy, "jobs": 2, "jobs_completed": 2, "makespan_s": ttd, "avg_jct_s": ttd / 2,
               "utilization": util, "rounds": 2}
    (path / "summary.json").write_text(json.dumps(summary))
    (path / "jobs.csv").write_text("job_id,job_type,jct_s,metric,quality_initial,quality_final\n"
                                   f"0,lstm,{ttd},perplexity,48,{finals[0]}\n"
                                   f"1,resnet,{ttd / 3},accuracy,0.1,{finals[1]}\n")
    (path / "events.jsonl").write_text("\n".join(json.dumps(e) for e in _events(2)) + "\n")
    return summary


def _records(tmp_path):
    records = []
    for seed in (0, 1):
        for pol, ttd, util, ppl in (("max_min_fairness_perf", 40.0, 0.4, 9.0), ("hadar", 38.0, 0.5, 9.1),
                                    ("hadare", 18.0 + seed, 0.9, 8.8 + seed / 10)):
            d = tmp_path / f"{pol}-seed{seed}"
            s = _run_folder(d, pol, ttd, util, (ppl, 0.98))
            records.append({"policy": pol, "seed": seed, "summary": s, "dir": str(d), "quality": [
                {"job_id": 0, "job_type": "lstm", "metric": "perplexity", "initial": 48, "final": ppl},
                {"job_id": 1, "job_type": "resnet", "metric": "accuracy", "initial": 0.1, "final": 0.98}]})
    return records


def test_experiment_job_set_and_cluster():
    jobs = experiment_jobs()
    assert len(jobs) >= 5 and len({get(j.job_type).family for j in jobs}) >= 4
    c = experiment_cluster()
    assert len(c.nodes) == 5 and len(set(c.gpu_types)) == 3


def test_aggregate_reports_spread_and_the_done_when_ratios(tmp_path):
    res = aggregate_runs(_records(tmp_path))
    t = res["table"]
    assert t["hadare"]["ttd_s"]["mean"] == pytest.approx(18.5) and t["hadare"]["ttd_s"]["min"] == 18.0
    assert t["hadare"]["quality"]["0"]["mean"] == pytest.approx(8.85)
    assert res["ratios"]["hadare_ttd_over_gavel"]["mean"] == pytest.approx((18 / 40 + 19 / 40) / 2)
    assert res["ratios"]["hadare_util_over_hadar"]["mean"] == pytest.approx(1.8)
    text = format_table(res)
    assert "HadarE" in text and "Gavel" in text and "goal <= 0.5" in text


def test_report_renders_a_run_and_an_experiment(tmp_path, capsys):
    records = _records(tmp_path)
    write_experiment(aggregate_runs(records), tmp_path)
    assert main(["report", str(tmp_path / "hadar-seed0"), "--format", "both"]) == 0
    md = (tmp_path / "hadar-seed0" / "report.md").read_text()
    assert "![jct_cdf](plots/jct_cdf.png)" in md and "placement" in md and "quality" in md
    assert (tmp_path / "hadar-seed0" / "report.html").is_file()
    assert main(["report", str(tmp_path)]) == 0
    md = (tmp_path / "report.md").read_text()
    for plot in ("jct_cdf", "utilization", "placement_hadare", "quality"):
        assert (tmp_path / "plots" / f"{plot}.png").is_file() and plot in md
    capsys.readouterr()
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "not a folder" in capsys.readouterr().err
