"""Forked copies (HadarE): progress adds over copies; the job ends when the sum reaches its steps."""

from __future__ import annotations

import math

import pytest

from hadar.config import parse_cluster
from hadar.mechanism.ledger import JobLedger
from hadar.model.plan import Lease, LeaseResult, RoundPlan, RoundReport
from hadar.sim.executor import SimulatedExecutor
from tests.helpers import job

R18 = "ResNet-18 (batch size 64)"


def copies_plan(ledger, now, gpus_per_copy):
    rec = ledger.active[0]
    leases = tuple(Lease(0, R18, 4, gpus, rec.remaining, copy=c) for c, gpus in enumerate(gpus_per_copy))
    return RoundPlan(now, 360.0, leases)


def test_progress_is_sum_of_copies_and_finish_is_exact(table):
    cluster = parse_cluster("v100=2,k80=2", gpus_per_node=2)  # node 0: 2 x v100, node 1: 2 x k80
    ledger = JobLedger(cluster, table, 360.0)
    r_v, r_k = table.get(R18, 2, "v100"), table.get(R18, 2, "k80")
    total = 1.5 * 360 * (r_v + r_k)  # needs 1.5 rounds with both copies
    ledger.add(job(0, job_type=R18, sf=4, steps=total))
    ex = SimulatedExecutor(cluster, table)
    plan = copies_plan(ledger, 0.0, [(0, 1), (2, 3)])
    report = ex.run_round(plan)
    ledger.apply(plan, report)
    rec = ledger.records[0]
    done_first = sum(r.steps for r in report.results)
    assert done_first == pytest.approx(math.floor(360 * r_v) + math.floor(360 * r_k))
    assert rec.remaining == pytest.approx(total - done_first)
    assert [(c.copy, c.node, c.gpu_type, c.gpus) for c in rec.copies] == [(0, 0, "v100", 2), (1, 1, "k80", 2)]
    start = report.end_s
    plan = copies_plan(ledger, start, [(0, 1), (2, 3)])
    report = ex.run_round(plan)
    finished = ledger.apply(plan, report)
    assert finished.ended == (0,)
    assert sum(c.steps for c in rec.copies) == pytest.approx(total)
    assert rec.finish_s == pytest.approx(start + (total - done_first) / (r_v + r_k))
    assert all(r.end_s == pytest.approx(rec.finish_s) for r in report.results)


def test_a_lease_that_reached_its_target_ends_the_job_with_the_steps_it_has_left(table):
    """A real run's time to accuracy: the executor says the job's quality metric reached its target."""
    cluster = parse_cluster("v100=2", gpus_per_node=2)
    ledger = JobLedger(cluster, table, 360.0)
    ledger.add(job(0, job_type=R18, sf=1, steps=10_000.0))
    ledger.add(job(1, job_type=R18, sf=1, steps=10_000.0))
    plan = RoundPlan(0.0, 360.0, (Lease(0, R18, 1, (0,), 10_000.0), Lease(1, R18, 1, (1,), 10_000.0)))
    report = RoundReport(0.0, 120.0, (LeaseResult(0, 0, (0,), 400.0, 120.0, reached_target=True),
                                      LeaseResult(1, 0, (1,), 400.0, 120.0)))
    changes = ledger.apply(plan, report)
    assert changes.ended == (0,) and ledger.finished(0) and not ledger.finished(1)
    assert ledger.records[0].finish_s == 120.0 and ledger.records[0].remaining == 9_600.0
    assert ledger.records[1].remaining == 9_600.0 and 1 in ledger.active and 0 not in ledger.active
