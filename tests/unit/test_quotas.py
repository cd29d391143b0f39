"""Quotas per GPU type and borrowing (``mechanism/quotas.py``), checked on every round of simulated runs
under every registered policy, and the tenants file's checks (``mechanism/tenants.py``)."""

from __future__ import annotations

import dataclasses

import pytest

from hadar.config import parse_cluster
from hadar.errors import InputError
from hadar.mechanism.tenants import parse_tenants
from hadar.model.job import Job
from hadar.policies.registry import available
from hadar.sim.run import simulate

R50 = "ResNet-50 (batch size 64)"
POLICIES = available()  # every registered policy: the stage is in front of every planner


def _tenants(vision_borrow: bool = True, nlp_borrow: bool = False):
    return parse_tenants({"teams": {"vision": {"weight": 2, "quota": {"v100": 2}, "borrow": vision_borrow},
                                    "nlp": {"weight": 1, "quota": {"v100": 2}, "borrow": nlp_borrow}},
                          "users": {"vis1": {"team": "vision"}, "ops": {"admin": True}}}, {"v100", "p100", "k80"})


def _jobs(table, vision: int, nlp: int, nlp_at: float, rounds: float = 20.0) -> list[Job]:
    steps = table.get(R50, 1, "v100") * 360 * rounds
    out = [Job(i, R50, 1, steps, 0.0, entity="vision") for i in range(vision)]
    out += [Job(vision + i, R50, 1, steps, nlp_at, entity="nlp") for i in range(nlp)]
    return out


def _held(result, jobs: list[Job]) -> list[tuple[float, dict[str, int], set[int]]]:
    """Per round: its start, GPUs per team, jobs running."""
    team = {j.job_id: j.entity for j in jobs}
    out = []
    for e in result.events:
        if e["event"] == "round":
            per: dict[str, int] = {}
            for job_id, _copy, gpus, _ext in e["leases"]:
                per[team[job_id]] = per.get(team[job_id], 0) + len(gpus)
            out.append((e["t"], per, {le[0] for le in e["leases"]}))
    return out


def _waiting(jobs: list[Job], result, t: float, running: set[int], entity: str) -> bool:
    ends = {r.job_id: r.finish_s for r in result.rows}
    return any(j.entity == entity and j.arrival_s <= t and (ends.get(j.job_id) or 1e18) > t
               and j.job_id not in running for j in jobs)


@pytest.mark.parametrize("policy", POLICIES)
def test_borrowed_gpus_go_back_when_the_owner_waits(table, policy):
    jobs = _jobs(table, vision=4, nlp=2, nlp_at=1000.0)
    r = simulate(jobs, parse_cluster("4:0:0"), table, policy, record_events=True, tenants=_tenants())
    rounds = _held(r, jobs)
    assert any(per.get("vision", 0) == 4 for t, per, _ in rounds if t < 1000.0)  # borrowed while nlp had none
    for t, per, running in rounds:
        assert per.get("nlp", 0) <= 2  # it may not borrow
        if _waiting(jobs, r, t, running, "nlp"):
            assert per.get("vision", 0) <= 2, (t, per)
    after = [per for t, per, _ in rounds if t >= 1000.0 and _waiting(jobs, r, t, set(), "nlp")]
    assert after and all(per.get("nlp", 0) == 2 for per in after[:3])  # the owner got its quota at once


def test_a_borrowing_job_keeps_its_gpus_for_the_minimum_run_time(table):
    jobs = _jobs(table, vision=4, nlp=2, nlp_at=400.0)
    # FIFO would let the first jobs run to the end: only the quota stage stops them
    r = simulate(jobs, parse_cluster("4:0:0"), table, "fifo_perf", record_events=True,
                 tenants=_tenants(), min_run_s=2000.0)
    rounds = _held(r, jobs)
    before = [per for t, per, _ in rounds if t < 2000.0]
    assert before and all(per.get("vision", 0) == 4 for per in before)  # not reclaimed before 2,000 s
    first = next(t for t, per, _ in rounds if t >= 2000.0)
    assert dict(next(per for t, per, _ in rounds if t == first)) == {"vision": 2, "nlp": 2}
    assert r.summary["jobs_completed"] == 6  # the reclaimed jobs resumed and finished


def test_a_team_that_may_not_borrow_stays_within_its_quota_on_an_idle_cluster(table):
    jobs = _jobs(table, vision=0, nlp=4, nlp_at=0.0, rounds=2)
    r = simulate(jobs, parse_cluster("4:0:0"), table, "max_min_fairness_perf", record_events=True,
                 tenants=_tenants())
    rounds = _held(r, jobs)
    assert rounds and max(per.get("nlp", 0) for _, per, _ in rounds) == 2
    assert r.summary["jobs_completed"] == 4


def test_without_quotas_the_plan_is_the_policys(table):
    jobs = [dataclasses.replace(j, entity="vision") for j in _jobs(table, vision=3, nlp=3, nlp_at=500.0, rounds=3)]
    free = parse_tenants({"teams": {"vision": {"weight": 2}, "nlp": {}}}, None)  # one team active: its weight alone
    a = simulate(jobs, parse_cluster("2:1:1"), table, "max_min_fairness_perf", record_events=True)
    b = simulate(jobs, parse_cluster("2:1:1"), table, "max_min_fairness_perf", record_events=True, tenants=free)
    assert [e for e in a.events if e["event"] == "round"] == [e for e in b.events if e["event"] == "round"]


@pytest.mark.parametrize(("data", "message"), [
    ({"teams": {"a": {"quota": {"h100": 1}}}}, "quota names GPU type 'h100'"),
    ({"teams": {"a": {"quota": {"v100": -1}}}}, "quota of 'v100' must be a whole number"),
    ({"teams": {"a": {"quota": {"v100": 1.5}}}}, "whole number"),
    ({"teams": {"a": {"weight": 0}}}, "weight must be a positive number"),
    ({"teams": {"a": {"borrow": "yes"}}}, "borrow must be true or false"),
    ({"teams": {"a": {"quota": {}, "limit": 3}}}, "unknown key 'limit'"),
    ({"teams": {}, "users": {"u": {"team": "b"}}}, "team 'b' is not a team"),
    ({"teams": {}, "users": {"u": {}}}, "names no team and is not an admin"),
    ({"team": {}}, "unknown key 'team'"),
    ([1, 2], "want a mapping"),
    ({"teams": {"a b": {}}}, "must be 1-64 letters"),
])
def test_a_bad_tenants_file_is_one_line_naming_the_entry(data, message):
    with pytest.raises(InputError, match=message) as err:
        parse_tenants(data, {"v100", "p100", "k80"}, "t.yaml")
    assert "\n" not in str(err.value) and str(err.value).startswith("t.yaml")


def test_the_stage_continues_from_its_recorded_state(table):
    """``dump``/``load`` (the service's store keeps them): when each running job started survives, and a
    planner state recorded before the run had tenants goes to the inner planner whole."""
    from hadar.build import make_planner
    from hadar.mechanism.quotas import QuotaPlanner
    from hadar.policies.registry import entry

    traits = entry("max_min_fairness_perf").traits
    stage = QuotaPlanner(make_planner(traits), _tenants(), 30.0)
    stage.since = {3: 12.5, 7: 40.0}
    again = QuotaPlanner(make_planner(traits), _tenants(), 30.0)
    again.load(stage.dump())
    assert again.since == {3: 12.5, 7: 40.0} and again.dump() == stage.dump()
    old = make_planner(traits).dump()
    bare = QuotaPlanner(make_planner(traits), _tenants())
    bare.load(old)
    assert bare.since == {} and bare.inner.dump() == old
