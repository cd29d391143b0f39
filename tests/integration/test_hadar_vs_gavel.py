"""Hadar against Gavel's LAS: on the held-out set's generated workloads (docs/evaluation.md), the
paper's 96-job and static traces (8:16:24), and the `compare` command.

The win asserted is the held-out one: on the held-out set's three generated workloads (no Philly
table needed; Hadar's defaults were not chosen on them) Hadar meets the evaluation's goals against
LAS (`jct`, `p99`, `ftf`). On the 96-job and static traces, which the defaults were tuned on, the
tests check what holds today (see docs/results.md) as regressions, not as evidence: lower avg JCT
and TTD than LAS, TTD within 1.05x of the bound, YARN-CS far behind; on the static trace, the JCT
floor above half of LAS's excess stretch. The held-out tests take 3.5 minutes under a load average of 25.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hadar.config import parse_cluster
from hadar.evaluation import heldout_set
from hadar.sim.run import simulate
from hadar.sim.trace import read_jobs
from tests.helpers import load_bench


@pytest.fixture(scope="module")
def runs(table):
    jobs, cluster = read_jobs("max_min_fairness"), parse_cluster("8:16:24")
    return {p: simulate(jobs, cluster, table, p).summary for p in ("hadar", "max_min_fairness_perf", "yarn_cs")}


@pytest.mark.parametrize("name", [w.name for w in heldout_set() if not w.philly])
def test_hadar_meets_the_goals_on_the_heldout_generated_workloads(name: str) -> None:
    bench = load_bench("bench_heldout")
    w = next(w for w in heldout_set() if w.name == name)
    with tempfile.TemporaryDirectory() as tmp:
        m = bench.measure(w, Path(tmp), Path(tmp), bench.Runs(policies="hadar"))
    ok = bench.goals(m["results"])
    assert m["jobs"] == 40 and ok["jct"] and ok["p99"] and ok["ftf"], (name, ok)


def test_hadar_beats_las_on_jct_and_ttd(runs) -> None:
    h, las = runs["hadar"], runs["max_min_fairness_perf"]
    assert h["avg_jct_s"] < las["avg_jct_s"]
    assert h["makespan_s"] <= las["makespan_s"]
    assert h["ttd_over_bound"] <= 1.05
    assert h["stretch"] >= 1.0


def test_yarn_is_far_behind(runs) -> None:
    assert runs["yarn_cs"]["avg_jct_s"] >= 1.5 * runs["hadar"]["avg_jct_s"]


def test_compare_json_has_one_result_per_policy(tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-m", "hadar.cli", "compare", "--trace", "small_test", "--cluster", "4:4:4",
                           "--policies", "hadar,yarn_cs,max_min_fairness_perf", "--json", "--no-progress",
                           "--out", str(tmp_path)], check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [r["policy"] for r in out["results"]] == ["hadar", "yarn_cs", "max_min_fairness_perf"]
    base = out["results"][2]
    assert base["jct_vs_baseline"] == pytest.approx(1.0)
    for r in out["results"]:
        for key in ("avg_jct_s", "p99_jct_s", "makespan_s", "utilization", "avg_queuing_delay_s", "ftf_mean",
                    "ftf_max", "stretch", "ttd_over_bound", "jct_bound_s", "ttd_bound_s"):
            assert key in r
    for name in ("jct_cdf.png", "utilization.png", "placement_hadar.png", "compare.json"):
        assert (tmp_path / name).is_file()


def test_compare_rejects_unknown_policy() -> None:
    proc = subprocess.run([sys.executable, "-m", "hadar.cli", "compare", "--policies", "hadar,nope", "--no-progress"],
                          check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("hadar: error: unknown policy 'nope'") and len(proc.stderr.splitlines()) == 1


def test_static_trace_ttd_near_the_bound_and_halving_las_excess_impossible(table) -> None:
    # the 100-job static trace: Hadar beats LAS and drains within 1.05x of the TTD bound; halving
    # LAS's excess stretch there is impossible: the JCT floor (contention counted) is above it
    from hadar.metrics.bound import jct_floor_s

    jobs, cluster = read_jobs("minimize_makespan"), parse_cluster("8:16:24")
    h, las = (simulate(jobs, cluster, table, p).summary for p in ("hadar", "max_min_fairness_perf"))
    assert h["avg_jct_s"] < las["avg_jct_s"] and h["makespan_s"] <= las["makespan_s"]
    assert h["ttd_over_bound"] <= 1.05
    assert h["avg_queuing_delay_s"] < las["avg_queuing_delay_s"]
    bound = h["jct_bound_s"]
    floor = jct_floor_s(jobs, cluster, table, slot_s=720.0, tail=False)  # the tail tightens it further, slowly
    assert bound < floor <= h["avg_jct_s"]
    assert floor > bound + (las["avg_jct_s"] - bound) / 2
