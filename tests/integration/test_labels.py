"""Issue 17, item 6: outside --gavel-compat, no decision may depend on what the GPU types are called.

Two checks per registered policy: a job alone on an idle cluster runs on its fastest type (every
type-aware policy; a type-blind one picks a type without regard to speed by design: YARN-CS and
Gavel's agnostic policies), and renaming the types consistently in cluster and table leaves the
summary unchanged (every policy). Outside --gavel-compat a run orders types fastest first by the
table (``ThroughputTable.speed_order``) and Gavel's round mechanism serves positive priorities
before it hands spare GPUs to jobs of zero priority; --gavel-compat keeps Gavel's v100, p100, k80
scan (tests/integration/test_gavel_reference*.py).
"""

from __future__ import annotations

import pytest

from hadar.build import policy_for_run
from hadar.config import parse_cluster
from hadar.model.job import Job
from hadar.model.throughput import ThroughputTable
from hadar.policies.registry import available
from hadar.sim.run import simulate

POLICIES = available()
TYPE_AWARE = [p for p in POLICIES if policy_for_run(p).policy.traits.type_aware]
#: limits computed by an LP (metrics/bound.py): the same up to HiGHS's round-off in another column order
LIMITS = {"jct_bound_s", "ttd_bound_s", "ttd_forking_bound_s", "stretch", "ttd_over_bound"}
RECOMMENDATION = "Recommendation (batch size 4096)"  # fastest on P100, cannot run on K80
RENAME = {"v100": "gpu_c", "p100": "gpu_a", "k80": "gpu_b"}  # another order by name, none of Gavel's


@pytest.mark.parametrize("policy", TYPE_AWARE)
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
    return ThroughputTable({k: {RENAME[t]: v for t, v in row.items()} for k, row in table.rates.items()}, "renamed",
                           {k: {RENAME[t]: v for t, v in row.items()} for k, row in table.pairs.items()})


def _jobs() -> list[Job]:
    kinds = [(RECOMMENDATION, 1), ("ResNet-50 (batch size 64)", 2), ("A3C", 1), ("Transformer (batch size 32)", 4),
             ("CycleGAN", 1), ("LM (batch size 20)", 1)]
    return [Job(i, jt, k, 2e4 * (1 + i % 3), arrival_s=600.0 * i) for i, (jt, k) in enumerate(kinds * 2)]


@pytest.mark.parametrize("policy", POLICIES)
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


def test_gavel_compat_keeps_gavels_scan_from_v100() -> None:
    """Gavel's mechanism hands the lone job a V100 (priority ~0 there) before the P100 it is allocated."""
    table = ThroughputTable.load()
    steps = table.get(RECOMMENDATION, 1, "p100") * 445.0
    r = simulate([Job(0, RECOMMENDATION, 1, steps)], parse_cluster("16:16:16"), table, "max_min_fairness_perf",
                 gavel_compat=True)
    assert r.rows[0].jct_s == pytest.approx(steps / table.get(RECOMMENDATION, 1, "v100"), rel=1e-9)


def test_speed_order_reads_throughputs_never_names() -> None:
    table = ThroughputTable.load()
    assert table.speed_order(("k80", "p100", "v100")) == ("v100", "p100", "k80")
    assert _renamed(table).speed_order(("gpu_a", "gpu_b", "gpu_c")) == ("gpu_c", "gpu_a", "gpu_b")
    # two types with the same rates everywhere: the listing order decides, whatever they are called
    twins = ThroughputTable({k: {**row, "zz": row["p100"]} for k, row in table.rates.items()})
    assert twins.speed_order(("zz", "k80", "p100")) == ("zz", "p100", "k80")
    assert twins.speed_order(("p100", "k80", "zz")) == ("p100", "zz", "k80")
    # equal scores (sum of rate / the row's best rate): the higher rates, sorted, decide; then row by row
    multiset = ThroughputTable({("a", 1): {"x": 4.0, "y": 2.0}, ("b", 1): {"x": 1.0, "y": 2.0}})
    assert multiset.speed_order(("y", "x")) == ("x", "y")
    rows = ThroughputTable({("a", 1): {"x": 2.0, "y": 1.0}, ("b", 1): {"x": 1.0, "y": 2.0}})
    assert rows.speed_order(("y", "x")) == ("x", "y")


def test_a_runs_type_order_outlives_node_changes() -> None:
    from hadar.build import run_cluster
    from hadar.mechanism.ledger import JobLedger
    from hadar.model.cluster import Node

    table = ThroughputTable.load()
    cluster = run_cluster(parse_cluster("k80=2,p100=1,v100=1"), table, gavel_compat=False)
    assert cluster.gpu_types == ("v100", "p100", "k80")
    renamed = parse_cluster("gpu_b=2,gpu_a=1,gpu_c=1")
    assert renamed.gpu_types == ("gpu_b", "gpu_a", "gpu_c")  # no Gavel name: as listed
    assert run_cluster(renamed, _renamed(table), gavel_compat=False).gpu_types == ("gpu_c", "gpu_a", "gpu_b")
    ledger = JobLedger(cluster, table, 360.0)
    seen = parse_cluster("k80=2,p100=1,v100=1").with_down({"v100-0"}).with_node(Node("x", "a100", 1))
    ledger.set_cluster(seen)  # the executor's view carries no order: the run's is kept, a new type last
    assert ledger.cluster.gpu_types == ("v100", "p100", "k80", "a100") and ledger.cluster.down == {"v100-0"}
