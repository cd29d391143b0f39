"""Hadar with space sharing (``share=True``, issue 18 item 4): who buys a shared slot, its price,
the placement of a pair on the same GPUs, and what it does to a run."""

from __future__ import annotations

import pytest

from hadar.build import make_planner
from hadar.config import parse_cluster
from hadar.errors import InputError
from hadar.mechanism.ledger import JobLedger
from hadar.model.job import Job
from hadar.model.throughput import ThroughputTable
from hadar.policies import create
from hadar.sim.run import simulate


def pair_table(a_with_b: float, b_with_a: float, gpu: str = "v100") -> ThroughputTable:
    """A and B run 1 step/s alone on one ``gpu`` and ``a_with_b`` / ``b_with_a`` steps/s sharing it."""
    return ThroughputTable.from_gavel_json({gpu: {
        "('A', 1)": {"null": 1.0, "('B', 1)": [a_with_b, b_with_a]},
        "('B', 1)": {"null": 1.0, "('A', 1)": [b_with_a, a_with_b]},
    }})


def two_jobs(steps_a: float = 3600.0, steps_b: float = 3600.0) -> list[Job]:
    return [Job(0, "A", 1, steps_a), Job(1, "B", 1, steps_b)]


def run(table: ThroughputTable, jobs: list[Job], cluster: str = "v100=1", **params: object) -> dict[int, float]:
    r = simulate(jobs, parse_cluster(cluster), table, "hadar", policy_kwargs=dict(params))
    return {row.job_id: row.jct_s for row in r.rows}


def test_two_jobs_that_pack_well_share_the_gpu_and_both_finish_before_the_serial_makespan() -> None:
    t = pair_table(0.8, 0.7)
    alone = run(t, two_jobs())
    shared = run(t, two_jobs(), share=True, keep_short=None)  # (keep_short would run A alone in its last round)
    assert sorted(alone.values()) == pytest.approx([3960.0, 7200.0])  # one after the other
    # together from t = 0: A at 0.8 steps/s is done at 3600 / 0.8 = 4500 s; B has done about 0.7 x 4500
    # = 3150 steps by then (whole steps per round: a little less) and runs its last ~450 alone, from
    # the cut at A's finish: 4500 + 450 = 4950 s at the least
    assert shared[0] == pytest.approx(4500.0)
    assert 4950.0 <= shared[1] < 5100.0
    assert max(shared.values()) < max(alone.values())
    assert sum(shared.values()) < sum(alone.values())


def test_the_pair_runs_on_the_same_gpu_and_each_lease_names_its_partner() -> None:
    t = pair_table(0.8, 0.7)
    ledger = JobLedger(parse_cluster("v100=1"), t, 360.0)
    for j in two_jobs():
        ledger.add(j)
    state = ledger.snapshot(0.0)
    policy = create("hadar", share=True)
    alloc = policy.allocate(state)
    assert alloc.counts is not None and len(alloc.counts) == 1  # the host alone holds the GPU
    (host,) = alloc.counts
    guest = 1 - host
    assert dict(alloc.pairs or {}) == {(host, guest): (1.0,)}
    assert alloc.fractions.sum() == 0.0  # neither runs alone: its time is the pair's
    plan = make_planner(policy.traits).plan(state, alloc, None)
    assert {(x.job_id, x.gpus, x.partner_id) for x in plan.leases} == {(host, (0,), guest), (guest, (0,), host)}


def test_a_pair_that_packs_badly_is_not_shared() -> None:
    t = pair_table(0.5, 0.4)  # together they do 0.9 of what one does alone
    assert run(t, two_jobs(), share=True) == run(t, two_jobs())
    ledger = JobLedger(parse_cluster("v100=1"), t, 360.0)
    for j in two_jobs():
        ledger.add(j)
    assert create("hadar", share=True).allocate(ledger.snapshot(0.0)).pairs is None


def test_share_gain_sets_how_well_a_pair_must_pack() -> None:
    t = pair_table(0.8, 0.7)  # 1.5 together
    assert run(t, two_jobs(), share=True, share_gain=1.6) == run(t, two_jobs())
    assert run(t, two_jobs(), share=True, share_gain=1.4) == run(t, two_jobs(), share=True)


def test_the_slot_is_priced_at_what_the_host_loses() -> None:
    # B keeps 0.9 of its pace next to A, A only 0.3 of its own: 1.2 together, so the pair packs. While
    # A (the host: 360 steps left) is 20x shorter than B, B's gain (0.9 x B's utility) is worth less
    # than A's loss (0.7 x A's, 20x larger): no sharing; with equal lengths it shares.
    t = pair_table(0.3, 0.9)
    ledger = JobLedger(parse_cluster("v100=1"), t, 360.0)
    for j in two_jobs(360.0, 7200.0):
        ledger.add(j)
    alloc = create("hadar", share=True).allocate(ledger.snapshot(0.0))
    assert alloc.pairs is None and alloc.counts == {0: {"v100": 1}}
    ledger = JobLedger(parse_cluster("v100=1"), t, 360.0)
    for j in two_jobs(3600.0, 3600.0):
        ledger.add(j)
    assert create("hadar", share=True).allocate(ledger.snapshot(0.0)).pairs is not None


def test_jobs_of_different_gpu_counts_never_share() -> None:
    t = ThroughputTable.from_gavel_json({"v100": {
        "('A', 1)": {"null": 1.0}, "('B', 2)": {"null": 2.0},
        "('A', 2)": {"null": 2.0, "('B', 2)": [1.8, 1.8]}, "('B', 1)": {"null": 1.0, "('A', 2)": [0.9, 0.9]},
    }})
    jobs = [Job(0, "A", 1, 3600.0), Job(1, "B", 2, 3600.0), Job(2, "A", 1, 3600.0)]
    ledger = JobLedger(parse_cluster("v100=2"), t, 360.0)
    for j in jobs:
        ledger.add(j)
    assert create("hadar", share=True).allocate(ledger.snapshot(0.0)).pairs is None


def _renamed(table: ThroughputTable, names: dict[str, str]) -> ThroughputTable:
    return ThroughputTable({k: {names[t]: v for t, v in row.items()} for k, row in table.rates.items()}, "renamed",
                           {k: {names[t]: v for t, v in row.items()} for k, row in table.pairs.items()})


def test_sharing_on_gavels_table_does_not_depend_on_type_names() -> None:
    table = ThroughputTable.load()
    kinds = [("ResNet-18 (batch size 16)", 1), ("ResNet-18 (batch size 32)", 1), ("A3C", 1), ("CycleGAN", 1),
             ("LM (batch size 20)", 1), ("Transformer (batch size 32)", 2)]
    jobs = [Job(i, jt, k, 1e4 * (1 + i % 3), arrival_s=300.0 * i) for i, (jt, k) in enumerate(kinds + kinds[:2])]
    names = {"v100": "gpu_c", "p100": "gpu_a", "k80": "gpu_b"}
    plain = simulate(jobs, parse_cluster("k80=2,v100=1,p100=1"), table, "hadar", policy_kwargs={"share": True})
    renamed = simulate(jobs, parse_cluster("gpu_b=2,gpu_c=1,gpu_a=1"), _renamed(table, names), "hadar",
                       policy_kwargs={"share": True})
    unshared = simulate(jobs, parse_cluster("k80=2,v100=1,p100=1"), table, "hadar")
    numbers = [k for k, v in plain.summary.items() if isinstance(v, float) and k not in
               ("wall_s", "decision_s_per_round", "solve_s_total")]  # the machine's, not the run's
    assert [renamed.summary[k] for k in numbers] == pytest.approx([plain.summary[k] for k in numbers], rel=1e-12)
    assert [r.jct_s for r in plain.rows] == [r.jct_s for r in renamed.rows]
    assert plain.summary["avg_jct_s"] != unshared.summary["avg_jct_s"]  # sharing took place


@pytest.mark.parametrize(("policy", "params", "message"), [
    ("hadar", {"share": "yes"}, "share must be true or false"),
    ("hadar", {"share": True, "share_gain": -1.0}, "share_gain must be >= 0"),
    ("hadare", {"share": True}, "share .* is a hadar parameter"),
])
def test_bad_share_parameters_are_refused(policy: str, params: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        create(policy, **params)


def test_a_shared_allocation_keeps_the_policy_contract_with_its_pairs() -> None:
    t = pair_table(0.8, 0.7)
    ledger = JobLedger(parse_cluster("v100=2"), t, 360.0)
    for i, jt in enumerate("ABAB"):
        ledger.add(Job(i, jt, 1, 3600.0))
    state = ledger.snapshot(0.0)
    alloc = create("hadar", share=True).allocate(state)
    pairs = dict(alloc.pairs or {})
    assert len(pairs) == 2 and all({state.jobs[a].job_type, state.jobs[b].job_type} == {"A", "B"} for a, b in pairs)
    time = alloc.fractions.sum(axis=1)
    for (a, b), xs in pairs.items():
        for jid in (a, b):
            time[state.job_ids.index(jid)] += sum(xs)
    assert time.tolist() == [1.0] * 4  # every job runs all round: two alone would leave two waiting
    used = alloc.fractions.sum(axis=0) + sum(sum(xs) for xs in pairs.values())
    assert used.tolist() == [2.0]
