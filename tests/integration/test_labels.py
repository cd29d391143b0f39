"""Issue 17, item 6: outside --gavel-compat, no decision may depend on what the GPU types are called.

Two checks per policy: a job alone on an idle cluster runs on its fastest type, and renaming the
types consistently in cluster and table leaves the summary unchanged. Gavel's round mechanism
(LAS and the other Gavel policies) still scans v100, p100, k80 first and hands spare GPUs to jobs
of zero priority: those cases are marked xfail (strict) until the mechanism is label-free.
"""

from __future__ import annotations

import pytest

from hadar.config import parse_cluster
from hadar.model.job import Job
from hadar.model.throughput import ThroughputTable
from hadar.sim.run import simulate

LABEL_BOUND = pytest.mark.xfail(strict=True, reason="issue 17 item 6: Gavel's round mechanism scans v100, p100, "
                                "k80 first and gives spare GPUs to zero-priority jobs")
POLICIES = ["hadar", "hadare", "yarn_cs", pytest.param("max_min_fairness_perf", marks=LABEL_BOUND)]
YARN_BOUND = pytest.mark.xfail(strict=True, reason="issue 17 item 6: YARN-CS's decisions change when the types are "
                               "renamed (found by this test, not fixed yet)")
RENAMED = ["hadar", "hadare", pytest.param("yarn_cs", marks=YARN_BOUND),
           pytest.param("max_min_fairness_perf", marks=LABEL_BOUND)]
#: limits computed by an LP (metrics/bound.py): the same up to HiGHS's round-off in another column order
LIMITS = {"jct_bound_s", "ttd_bound_s", "ttd_forking_bound_s", "stretch", "ttd_over_bound"}
RECOMMENDATION = "Recommendation (batch size 4096)"  # fastest on P100, cannot run on K80
RENAME = {"v100": "gpu_c", "p100": "gpu_a", "k80": "gpu_b"}  # another order by name, none of Gavel's


@pytest.mark.parametrize("policy", POLICIES)
def test_a_lone_job_on_an_idle_cluster_runs_on_its_fastest_type(policy: str) -> None:
    table = ThroughputTable.load()
    rates = {t: table.get(RECOMMENDATION, 1, t) for t in table.gpu_types}
    best = max(rates.values())
    steps = best * 445.0  # 445 s on its fastest type
    r = simulate([Job(0, RECOMMENDATION, 1, steps)], parse_cluster("16:16:16"), table, policy)
    if policy == "hadare":  # forked over idle nodes: faster than alone on its fastest type
        assert r.rows[0].jct_s is not None and r.rows[0].jct_s <= 445.0
    else:
        assert r.rows[0].jct_s == pytest.approx(445.0, rel=1e-9)


def _renamed(table: ThroughputTable) -> ThroughputTable:
    return ThroughputTable({k: {RENAME[t]: v for t, v in row.items()} for k, row in table.rates.items()}, "renamed")


def _jobs() -> list[Job]:
    kinds = [(RECOMMENDATION, 1), ("ResNet-50 (batch size 64)", 2), ("A3C", 1), ("Transformer (batch size 32)", 4),
             ("CycleGAN", 1), ("LM (batch size 20)", 1)]
    return [Job(i, jt, k, 2e4 * (1 + i % 3), arrival_s=600.0 * i) for i, (jt, k) in enumerate(kinds * 2)]


@pytest.mark.parametrize("policy", RENAMED)
def test_renaming_the_types_leaves_the_summary_unchanged(policy: str) -> None:
    table = ThroughputTable.load()
    # the same nodes in the same order; Gavel's names are ordered v100, p100, k80, the others as listed
    plain = simulate(_jobs(), parse_cluster("k80=4,v100=2,p100=3"), table, policy).summary
    renamed = simulate(_jobs(), parse_cluster("gpu_b=4,gpu_c=2,gpu_a=3"), _renamed(table), policy).summary
    machine = {"wall_s", "decision_s_per_round", "solve_s_total"}
    assert {k: v for k, v in renamed.items() if k not in machine | LIMITS} == \
        {k: v for k, v in plain.items() if k not in machine | LIMITS}
    for k in LIMITS & plain.keys():
        assert renamed[k] == pytest.approx(plain[k], rel=1e-12), k
