"""Fair shares across teams: under a tenants file, each team's normalized throughput (each lease's rate
over the job's proportional share of the whole cluster, Gavel's normalization) is its weight's share
while both teams have waiting work; the same file in ``hadar compare`` on a CSV trace with a team
(``entity``) column."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hadar.config import parse_cluster
from hadar.mechanism.tenants import parse_tenants
from hadar.model.job import Job
from hadar.policies.gavel.common import proportional_throughputs
from hadar.sim.run import simulate

TYPES = ["ResNet-50 (batch size 64)", "Transformer (batch size 64)", "LM (batch size 20)", "ResNet-18 (batch size 64)"]
TENANTS = "teams:\n  vision: {weight: 2}\n  nlp: {weight: 1}\n"


def _jobs(table, per_team: int) -> list[Job]:
    out = []
    for i in range(2 * per_team):
        jt = TYPES[i % len(TYPES)]
        out.append(Job(i, jt, 1, table.get(jt, 1, "v100") * 3600 * 6, 0.0, entity="vision" if i % 2 else "nlp"))
    return out


def team_shares(result, jobs: list[Job], cluster, table) -> dict[str, float]:
    """Each team's normalized throughput summed over the rounds in which both teams had a job waiting."""
    types = cluster.gpu_types
    caps = np.array([cluster.count(t) for t in types], dtype=float)
    rates = np.array([table.row(j.job_type, 1, types) for j in jobs], dtype=float)
    prop = dict(zip([j.job_id for j in jobs], proportional_throughputs(rates, caps), strict=True))
    team = {j.job_id: j.entity for j in jobs}
    ends = {r.job_id: r.finish_s for r in result.rows}
    got = {"vision": 0.0, "nlp": 0.0}
    for e in result.events:
        if e["event"] != "round":
            continue
        running = {le[0] for le in e["leases"]}
        waiting = {team[j.job_id] for j in jobs if j.job_id not in running and (ends[j.job_id] or 1e18) > e["end"]}
        if waiting != {"vision", "nlp"}:
            continue
        for job_id, _copy, gpus, _ext in e["leases"]:
            gpu_type = cluster.gpu_type_of[gpus[0]]
            got[team[job_id]] += table.get(jobs[job_id].job_type, 1, gpu_type) * (e["end"] - e["t"]) / prop[job_id]
    return got


@pytest.mark.parametrize("policy", ["hierarchical_water_filling_perf"])
def test_each_teams_normalized_throughput_is_its_weights_share(table, policy):
    cluster = parse_cluster("4:4:4")
    jobs = _jobs(table, per_team=12)
    import yaml

    tenants = parse_tenants(yaml.safe_load(TENANTS), set(cluster.gpu_types))
    r = simulate(jobs, cluster, table, policy, record_events=True, tenants=tenants)
    got = team_shares(r, jobs, cluster, table)
    total = sum(got.values())
    assert total > 0
    assert got["vision"] / total == pytest.approx(2 / 3, rel=0.05)
    assert got["nlp"] / total == pytest.approx(1 / 3, rel=0.05)
    # without the file the teams weigh the same: the share moves to a half
    even = simulate(jobs, cluster, table, policy, record_events=True)
    got_even = team_shares(even, jobs, cluster, table)
    assert got_even["vision"] / sum(got_even.values()) == pytest.approx(1 / 2, rel=0.05)


def test_compare_takes_the_tenants_file_and_a_team_column(tmp_path: Path, table):
    trace = tmp_path / "teams.csv"
    rows = ["job_type,scale_factor,total_steps,arrival_s,entity"]
    rows += [f"{j.job_type},1,{j.total_steps / 6:.0f},0,{j.entity}" for j in _jobs(table, per_team=4)]
    trace.write_text("\n".join(rows) + "\n")
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text("teams:\n  vision: {weight: 2, quota: {v100: 2}, borrow: true}\n  nlp: {quota: {k80: 2}}\n")
    cmd = [sys.executable, "-m", "hadar.cli", "compare", "--trace", str(trace), "--cluster", "2:2:2", "--tenants",
           str(tenants), "--policies", "hierarchical_water_filling_perf,max_min_fairness_perf", "--no-ftf", "--json",
           "--no-progress"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    results = json.loads(out.stdout)
    assert {r["policy"] for r in results["results"]} >= {"hierarchical_water_filling_perf"}
    tenants.write_text("teams:\n  vision: {quota: {h100: 2}}\n")
    bad = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "GPU type 'h100'" in bad.stderr


@pytest.mark.parametrize("policy", ["hadar", "max_min_fairness_perf"])
def test_policies_that_share_by_priority_weights_take_the_teams_weights(table, policy):
    """Hadar and Gavel's flat policies see the teams' weights in their jobs' priority weights
    (``policies/teams.py``): the heavier team's jobs are served sooner."""
    cluster = parse_cluster("4:4:4")
    jobs = _jobs(table, per_team=12)
    import yaml

    tenants = parse_tenants(yaml.safe_load(TENANTS), set(cluster.gpu_types))

    def mean_finish(result, team: str) -> float:
        got = [r.finish_s for r in result.rows if jobs[r.job_id].entity == team]
        return sum(got) / len(got)

    weighted = simulate(jobs, cluster, table, policy, tenants=tenants)
    even = simulate(jobs, cluster, table, policy)
    assert weighted.summary["jobs_completed"] == even.summary["jobs_completed"] == len(jobs)
    lead = mean_finish(weighted, "nlp") / mean_finish(weighted, "vision")
    assert lead > 1.25 * mean_finish(even, "nlp") / mean_finish(even, "vision")


class _Recording:
    """A policy that keeps every (state, allocation) it decided."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.seen = inner, []

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def traits(self):  # type: ignore[no-untyped-def]
        return self.inner.traits

    def allocate(self, state):  # type: ignore[no-untyped-def]
        alloc = self.inner.allocate(state)
        self.seen.append((state, alloc))
        return alloc


def test_every_decision_gives_each_team_its_weights_share_while_both_wait(table):
    """At each re-solve where both teams have a job that does not run all the time, the allocation's
    normalized throughput per team (sum of c_ij x_ij, c_ij = T_ij / prop_i) is its weight's share."""
    import dataclasses

    from hadar.policies.gavel.hierarchical import HierarchicalWaterFilling

    cluster = parse_cluster("4:4:4")
    jobs = [dataclasses.replace(j, arrival_s=300.0 * (j.job_id // 2)) for j in _jobs(table, per_team=12)]
    policy = _Recording(HierarchicalWaterFilling(entity_weights={"vision": 2.0, "nlp": 1.0}))
    simulate(jobs, cluster, table, policy)
    checked = 0
    for state, alloc in policy.seen:
        rates = state.throughput_matrix()
        prop = proportional_throughputs(rates, state.capacities())
        level = (rates * alloc.fractions).sum(axis=1) / prop
        teams = np.array([j.entity for j in state.jobs])
        waiting = {t for t, x in zip(teams, alloc.fractions.sum(axis=1), strict=True) if x < 1 - 1e-6}
        if waiting != {"vision", "nlp"}:
            continue
        checked += 1
        share = level[teams == "vision"].sum() / level.sum()
        assert share == pytest.approx(2 / 3, rel=0.05), (state.now_s, share)
    assert checked >= 5, checked
