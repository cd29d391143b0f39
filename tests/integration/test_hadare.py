"""HadarE against Hadar and Gavel's LAS: the issue's physical-style settings and the static trace.

The workload and clusters are the shipped files (src/hadar/data/traces/hadare_physical.trace,
src/hadar/data/clusters/physical_5x{4,1}.yaml, bundled physical throughputs). Runs in a few seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hadar.config import parse_cluster
from hadar.sim.run import simulate
from hadar.sim.trace import read_jobs

DATA = Path(__file__).parents[2] / "src" / "hadar" / "data"
TRACE = DATA / "traces" / "hadare_physical.trace"


def run_all(table, cluster_file: str, policies: tuple[str, ...]) -> dict[str, dict]:
    cluster = parse_cluster(str(DATA / "clusters" / cluster_file))
    return {p: simulate(read_jobs(TRACE), cluster, table, p).summary for p in policies}


def test_under_loaded_halves_las_ttd_and_lifts_utilization(physical_table) -> None:
    s = run_all(physical_table, "physical_5x4.yaml", ("max_min_fairness_perf", "hadar", "hadare"))
    assert s["hadare"]["makespan_s"] <= 0.5 * s["max_min_fairness_perf"]["makespan_s"]
    assert s["hadare"]["utilization"] >= 1.45 * s["hadar"]["utilization"]
    assert s["hadare"]["ttd_over_bound"] <= 1.15


def test_over_loaded_beats_hadar_and_nears_the_forking_bound(physical_table) -> None:
    s = run_all(physical_table, "physical_5x1.yaml", ("hadar", "hadare"))
    assert s["hadare"]["makespan_s"] <= s["hadar"]["makespan_s"]
    assert s["hadare"]["ttd_over_bound"] <= 1.15
    assert s["hadare"]["ttd_forking_bound_s"] <= s["hadare"]["ttd_bound_s"]


def test_static_trace_within_the_forking_bound(table) -> None:
    s = simulate(read_jobs("minimize_makespan"), parse_cluster("8:16:24"), table, "hadare").summary
    assert s["jobs_completed"] == 100
    assert 1.0 - 1e-9 <= s["ttd_over_bound"] <= 1.15


def test_compare_reports_the_forking_bound_for_hadare() -> None:
    proc = subprocess.run([sys.executable, "-m", "hadar.cli", "compare", "--trace", str(TRACE), "--cluster",
                           str(DATA / "clusters" / "physical_5x1.yaml"), "--throughputs", "physical",
                           "--policies", "hadar,hadare", "--json", "--no-progress", "--no-ftf"],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    hadar, hadare = json.loads(proc.stdout)["results"]
    assert "ttd_forking_bound_s" not in hadar
    assert hadare["ttd_over_bound"] == pytest.approx(hadare["makespan_s"] / hadare["ttd_forking_bound_s"])
