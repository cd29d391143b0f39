from __future__ import annotations

import numpy as np

from hadar.config import parse_cluster
from hadar.mechanism.ledger import JobLedger
from hadar.mechanism.rounds import GavelRoundPlanner
from hadar.model.plan import LeaseResult, RoundReport
from hadar.model.state import Allocation
from tests.helpers import job


def ledger_with(jobs, spec, table):
    ledger = JobLedger(parse_cluster(spec), table, 360.0)
    for j in jobs:
        ledger.add(j)
    return ledger


def test_priority_is_share_over_time_received(table):
    ledger = ledger_with([job(0), job(1), job(2)], "2:0:0", table)
    state = ledger.snapshot(0.0)
    x = np.array([[0.2], [0.9], [0.5]])
    alloc = Allocation(state.job_ids, ("v100",), x)
    plan = GavelRoundPlanner().plan(state, alloc, None)
    assert sorted(plan.job_ids) == [1, 2]  # the two largest x / received


def test_leases_respect_capacity_and_one_type_per_job(table):
    jobs = [job(i, sf=sf) for i, sf in enumerate([2, 1, 1, 4])]
    ledger = ledger_with(jobs, "4:2:0", table)
    state = ledger.snapshot(0.0)
    x = np.full((4, 2), 0.5)
    plan = GavelRoundPlanner().plan(state, Allocation(state.job_ids, state.gpu_types, x,
                                                                   scale_factors=(2, 1, 1, 4)), None)
    used = [g for lease in plan.leases for g in lease.gpus]
    assert len(used) == len(set(used)) <= 6
    for lease in plan.leases:
        assert len(lease.gpus) == lease.scale_factor
        assert len({ledger.cluster.gpu_type_of[g] for g in lease.gpus}) == 1


def test_sticky_placement_extends_leases(table):
    ledger = ledger_with([job(0, steps=1e6), job(1, steps=1e6)], "3:0:0", table)
    planner = GavelRoundPlanner()
    state = ledger.snapshot(0.0)
    alloc = Allocation(state.job_ids, ("v100",), np.array([[1.0], [1.0]]))
    first = planner.plan(state, alloc, None)
    from hadar.sim.executor import SimulatedExecutor
    ledger.apply(first, SimulatedExecutor(ledger.cluster, table).run_round(first))
    second = planner.plan(ledger.snapshot(360.0), alloc, first)
    assert {lease.job_id: lease.gpus for lease in first.leases} == {lease.job_id: lease.gpus for lease in second.leases}
    assert all(lease.extended for lease in second.leases)


def test_job_missing_from_allocation_reserves_but_is_not_placed(table):
    # Gavel: a job that arrived after the last re-solve can win GPUs in the greedy scan
    # (priority 0) and hold them idle for the round.
    ledger = ledger_with([job(0), job(1)], "2:0:0", table)
    state = ledger.snapshot(0.0)
    alloc = Allocation((0,), ("v100",), np.array([[0.5]]))
    plan = GavelRoundPlanner().plan(state, alloc, None)
    assert plan.job_ids == (0,)


def test_zero_priority_jobs_fill_spare_gpus_unless_fifo(table):
    ledger = ledger_with([job(0), job(1)], "2:0:0", table)
    state = ledger.snapshot(0.0)
    alloc = Allocation(state.job_ids, ("v100",), np.array([[1.0], [0.0]]))
    assert GavelRoundPlanner().plan(state, alloc, None).job_ids == (0, 1)
    assert GavelRoundPlanner(skip_zero_priority=True).plan(state, alloc, None).job_ids == (0,)


REC = "Recommendation (batch size 4096)"  # 3.9 steps/s on a V100, 8.9 on a P100


def _on(plan, ledger):
    return {lease.job_id: ledger.cluster.gpu_type_of[lease.gpus[0]] for lease in plan.leases}


def test_outside_gavel_compat_a_job_is_not_handed_a_slower_type_first(table):
    """Gavel's scan from v100 gives the job a V100 where its fraction is round-off (or small); the
    label-free scan (``spare_last``) waits for the P100 where it runs 2.3x as fast."""
    ledger = ledger_with([job(0, REC)], "1:1:0", table)
    state = ledger.snapshot(0.0)
    for small in (4e-7, 0.004):
        alloc = Allocation(state.job_ids, state.gpu_types, np.array([[small, 1.0 - small]]))
        assert _on(GavelRoundPlanner().plan(state, alloc, None), ledger) == {0: "v100"}
        assert _on(GavelRoundPlanner(spare_last=True).plan(state, alloc, None), ledger) == {0: "p100"}


def test_outside_gavel_compat_spare_gpus_go_out_after_every_positive_priority(table):
    """Job 0's allocation names the P100; job 1 has none. Gavel's scan from v100 hands job 0 the V100
    at priority 0 and job 1 the P100; the label-free scan serves job 0's P100 first, then the spare."""
    ledger = ledger_with([job(0), job(1, REC)], "1:1:0", table)
    state = ledger.snapshot(0.0)
    alloc = Allocation(state.job_ids, state.gpu_types, np.array([[0.0, 1.0], [0.0, 0.0]]))
    assert _on(GavelRoundPlanner().plan(state, alloc, None), ledger) == {0: "v100", 1: "p100"}
    assert _on(GavelRoundPlanner(spare_last=True).plan(state, alloc, None), ledger) == {0: "p100", 1: "v100"}


def test_gavels_counters_are_the_rounds_planners_own(table):
    """Gavel's time-received counters and deficits live in the rounds planner (no view, no ledger field):
    a re-solve folds the time received since the last reset into the deficit, the stall breaker counts
    the whole run, and the state survives a dump and load."""
    from hadar.model.state import JobView

    cluster = parse_cluster("2:0:0")
    ledger = JobLedger(cluster, table, 360.0)
    ledger.add(job(0))
    assert not hasattr(ledger.snapshot(0.0).jobs[0], "deficit_s") and "received_s" not in JobView.__slots__
    planner = GavelRoundPlanner()
    state = ledger.snapshot(0.0)
    alloc = Allocation(state.job_ids, ("v100",), np.array([[1.0]]))
    planner.resolved(state, None)
    planner.resolved(ledger.snapshot(720.0), alloc)
    # LAS: the job should have had 720 s on the V100 and had none (its seed of half a round)
    assert planner.counters.of(0) == ([180.0], [720.0])
    plan = planner.plan(ledger.snapshot(720.0), alloc, None)
    report = RoundReport(720.0, 1080.0, (LeaseResult(0, 0, plan.leases[0].gpus, 10.0, 1080.0),))
    planner.observe(plan, report)
    assert planner.counters.of(0) == ([540.0], [720.0])
    planner.stalled()
    saved = GavelRoundPlanner()
    saved.load(planner.dump())
    for p in (planner, saved):
        p.resolved(ledger.snapshot(1080.0), alloc)  # since 0 (stalled): 1,080 s owed, 360 s run
        assert p.counters.of(0) == ([180.0], [720.0 + 1080.0 - 360.0])

