"""Our allocations vs. Gavel's solver (cvxpy + ECOS) on states from the bundled traces.

The reference file (tests/unit/data/gavel_ecos_reference.json) holds ECOS's
answers for four states. Optimal values must agree to solver precision. Where
the optimum is unique or ECOS converges to the center of the optimal face
(max-min, max-sum), the allocations agree to ~1e-3. For finish-time fairness
and makespan the optimal set is often large and ECOS stops at an arbitrary
interior point of it, so only a loose bound is checked (a vertex is ~1.0 away).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hadar.model import Cluster, JobView, SchedulerState, ThroughputTable
from hadar.policies import create
from hadar.policies.gavel import makespan
from hadar.policies.gavel.common import Inputs, isolated_throughputs

DATA = json.loads((Path(__file__).parent / "data" / "gavel_ecos_reference.json").read_text())
CASES = {c["name"]: c for c in DATA["cases"]}
CLOSE = {"max_min_fairness_perf": 1e-3, "max_min_fairness": 3e-3, "max_sum_throughput_perf": 1e-3}
LOOSE = {"finish_time_fairness_perf": 0.2, "finish_time_fairness": 0.2, "min_total_duration_perf": 0.25,
         "min_total_duration": 0.25}


def _state(case) -> SchedulerState:
    cluster = Cluster.from_counts(dict(zip(case["gpu_types"], case["capacities"], strict=True)))
    assert cluster.gpu_types == tuple(case["gpu_types"])
    jobs = tuple(JobView(j["id"], j["type"], j["sf"], j["w"], j["arrival"], j["total"], j["remaining"],
                         tuple(j["T"])) for j in case["jobs"])
    return SchedulerState(now_s=case["now"], round_s=360.0, cluster=cluster, jobs=jobs, table=ThroughputTable.load())


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("policy", sorted({**CLOSE, **LOOSE}))
def test_allocation_close_to_ecos(name, policy):
    case = CASES[name]
    x = create(policy).allocate(_state(case)).fractions
    ref = np.array(case["ecos"]["x"][policy])
    tol = CLOSE.get(policy, LOOSE.get(policy))
    assert np.abs(x - ref).max() <= tol


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("policy", ["finish_time_fairness_perf", "finish_time_fairness"])
def test_min_max_rho_equals_ecos_optimum(name, policy):
    case = CASES[name]
    st = _state(case)
    inp = Inputs.of(st)
    t = inp.throughputs if policy.endswith("_perf") else inp.reference_rates()
    x = create(policy).allocate(st).fractions
    iso = isolated_throughputs(t, inp.scale_factors, inp.capacities)
    rho = (inp.age_s + inp.remaining / (t * x).sum(axis=1)) / (inp.remaining / iso)
    assert rho.max() == pytest.approx(case["ecos"]["rho"][policy], rel=3e-6)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("policy", ["min_total_duration_perf", "min_total_duration"])
def test_makespan_bisection_lands_on_ecos_T(name, policy, monkeypatch):
    seen = []
    real = makespan.gavel_bisection

    def spy(t_star, *a, **kw):
        seen.append(real(t_star, *a, **kw))
        return seen[-1]

    monkeypatch.setattr(makespan, "gavel_bisection", spy)
    create(policy).allocate(_state(CASES[name]))
    assert seen[0] == pytest.approx(CASES[name]["ecos"]["makespan_T_s"][policy], rel=1e-6)
