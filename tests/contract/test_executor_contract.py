"""Contract every executor obeys (hadar.engine.Executor), parametrized over executor factories.

An executor runs a round's leases and reports what they did; the engine and the ledger rely on:

- one result per lease (same job, copy and GPUs), each ending between the round's start and its
  planned end (``start_s + duration_s``, which the engine may have cut short); the report starts
  at the plan's start and ends when its last lease ends, or at the start if it has none;
- progress never exceeds what is left: a lease counts at most ``max_steps`` steps, and a job's
  forked copies together at most the job's remaining steps (a W-GPU gang advances W steps an
  iteration, so its last iteration may be partly surplus: only the steps the job had left count);
- ``estimate_rate`` (steps/s, or None while unknown) matches the progress leases make;
- a failed lease reports ``failed`` and no steps (the job resumes from its checkpoint);
- driven by the engine, every job finishes with exactly its steps done (no progress lost or
  counted twice), and a job waiting for GPUs starts when a lease ends early, before the round's
  planned end (rounds are cut at predicted completions in every executor).

Each factory takes the test's ``request`` (for fixtures it needs, such as Ray's session) and yields a
``Harness``: the executor on a small cluster of two GPU types (at least two GPUs on each of two nodes),
the table its rates start from, its clock, what it can run and how jobs are made known to it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

import pytest

from hadar.build import wire
from hadar.clock import Clock, VirtualClock
from hadar.engine import Executor
from hadar.model.cluster import Cluster
from hadar.model.job import Job
from hadar.model.plan import Lease, RoundPlan, RoundReport
from hadar.model.throughput import ThroughputTable
from hadar.sim.executor import SimulatedExecutor
from hadar.sources import Workload
from tests.helpers import GreedyCountsPolicy, load_scale, two_type_cluster


@dataclass
class Harness:
    """An executor under test and what the tests need to know about it."""

    executor: Executor
    cluster: Cluster  # two nodes of different GPU types, two GPUs or more each
    table: ThroughputTable  # the rates the engine starts from
    clock: Clock
    job_type: str  # runs on every GPU type of the cluster, on 1 GPU and on 2
    round_s: float
    rate_rtol: float  # how far progress may stray from estimate_rate (relative)
    step_slack: float  # steps a lease may stop short of max_steps when it finishes (whole iterations)
    time_slack_s: float  # how far past the planned end a lease may end, and how late a cut may come
    fail_next: Callable[[int], None] | None = None  # make the next lease on this GPU fail (None: cannot)
    prepare: Callable[[Sequence[Job]], None] = lambda jobs: None  # make jobs known before their leases run

    def rate(self, gpu: int, k: int = 1) -> float:
        return self.table.get(self.job_type, k, self.cluster.gpu_type_of[gpu])


ExecutorFactory = Callable[[pytest.FixtureRequest], AbstractContextManager[Harness]]


class _FailingSimulator(SimulatedExecutor):
    """The simulator with failure injection: the next lease on a marked GPU dies (0 steps, failed)."""

    def __init__(self, cluster: Cluster, table: ThroughputTable) -> None:
        super().__init__(cluster, table)
        self.doomed: set[int] = set()

    def run_round(self, plan: RoundPlan) -> RoundReport:
        report = super().run_round(plan)
        out = []
        for res in report.results:
            dies = bool(self.doomed & set(res.gpus))
            self.doomed -= set(res.gpus)
            out.append(dataclasses.replace(res, steps=0.0, end_s=plan.start_s, failed=True, error="injected")
                       if dies else res)
        return dataclasses.replace(report, results=tuple(out))


@contextmanager
def simulated(request: pytest.FixtureRequest) -> Iterator[Harness]:
    cluster = two_type_cluster()
    table = ThroughputTable.load()
    ex = _FailingSimulator(cluster, table)
    yield Harness(ex, cluster, table, VirtualClock(), "ResNet-50 (batch size 64)", round_s=360.0, rate_rtol=1e-9,
                  step_slack=1.0, time_slack_s=1e-6, fail_next=ex.doomed.add)


@contextmanager
def ray_executor(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """RayExecutor on an emulated cluster of the same shape, in the session's Ray (see ``ray_harness``)."""
    from tests.contract import ray_harness

    warm = request.getfixturevalue("ray_contract_pool")
    ex = ray_harness.executor(warm, request.getfixturevalue("tmp_path"), given=warm.table)

    def prepare(jobs: Sequence[Job]) -> None:
        for job in jobs:
            ex.register(ray_harness.resolve(job))

    try:
        yield Harness(ex, ex.cluster, warm.table, ex.clock, ray_harness.JOB_TYPE, round_s=8.0,
                      # 8 s rounds: a 2-GPU lease spends ~0.5 s setting up and tearing down its process
                      # group, which must stay small next to the contract's fractions of a round (forked
                      # copies sized to finish halfway must end before 3/4 of it: measured, at 4.5 s of 6).
                      # Rates are measured over the time a lease spends stepping (its train_s); its wall time
                      # adds dispatch, the job's start, a gang's process group and the checkpoint save:
                      # measured, a 2-GPU lease made 5.6 % fewer steps than rate x wall time (6 s rounds:
                      # 9.5 %), a 1-GPU lease 0.1 %. 0.5 leaves room for a busy machine (seen: a lease 30 %
                      # below its estimate while a fresh clone's whole suite ran beside it), as Slurm's.
                      rate_rtol=0.5,
                      # A W-GPU lease advances in whole iterations of W steps: one 2-GPU iteration.
                      step_slack=2.0,
                      # A lease starts no step after its deadline, so it ends one step later (a 2-GPU K80
                      # step: ~0.15 s), plus the gang's teardown, the save and Ray's answer: measured, 1-GPU
                      # leases ended <= 0.05 s and 2-GPU leases <= 0.75 s past the planned end on a quiet
                      # machine, but 2.7 s past it at load 9 on 2 cores and 7.8 s at load 15; 5 s, times the
                      # load per core where it is above 1 (tests.helpers.load_scale): room for a busy machine.
                      time_slack_s=5.0 * load_scale(),
                      fail_next=lambda gpu: ray_harness.kill(warm.pool, gpu), prepare=prepare)
    finally:
        ray_harness.revive(warm.pool)


@contextmanager
def slurm_executor(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """SlurmExecutor on the session's local Slurm cluster, in its partition of the contract's shape (see
    ``slurm_harness``): every lease is a Slurm batch job."""
    from tests.contract import slurm_harness

    table = request.getfixturevalue("slurm_contract_table")
    conf = request.getfixturevalue("slurm_cluster").conf
    ex, doom = slurm_harness.executor(conf, request.getfixturevalue("tmp_path") / "work", given=table)

    def prepare(jobs: Sequence[Job]) -> None:
        for job in jobs:
            if job.job_id not in ex.jobs:
                ex.register(slurm_harness.resolve(job))

    yield Harness(ex, ex.cluster, table, ex.clock, slurm_harness.JOB_TYPE, round_s=slurm_harness.ROUND_S,
                  # Rates are measured over the time a lease steps (its train_s); a lease's wall time adds
                  # Slurm's start (up to 1 s after the release) and the process's: well under 1 s for a 1-GPU
                  # lease of this job, but a gang imports torch.distributed first: measured, 4-8 s at load
                  # 6-9 on 2 cores, a third of a 24 s round.
                  rate_rtol=0.5,
                  step_slack=2.0,
                  # A lease stops at the round's end (a wall-clock deadline) after its current step, then
                  # saves and exits; Slurm's squeue sees it ended within a poll (0.1 s).
                  time_slack_s=5.0 * load_scale(),
                  fail_next=doom.gpus.add, prepare=prepare)


EXECUTORS = [
    pytest.param(simulated, id="simulated"),
    pytest.param(ray_executor, id="ray", marks=pytest.mark.runtime),
    pytest.param(slurm_executor, id="slurm", marks=pytest.mark.slurm),
]


def _lease(h: Harness, job_id: int, gpus: tuple[int, ...], max_steps: float, copy: int = 0,
           sf: int | None = None) -> Lease:
    """A lease of ``h.job_type`` (gang size: ``sf``, default the number of GPUs)."""
    return Lease(job_id=job_id, job_type=h.job_type, scale_factor=sf or len(gpus), gpus=gpus,
                 max_steps=max_steps, copy=copy)


def _nodes(h: Harness) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The GPUs of the first two nodes (of different types)."""
    return h.cluster.gpus_of_node(0), h.cluster.gpus_of_node(1)


def _run_round(h: Harness, plan: RoundPlan) -> RoundReport:
    """``plan`` run by the executor, once the jobs its leases name are known to it (a job's size: its
    largest lease's ``max_steps``)."""
    jobs: dict[int, Job] = {}
    for le in plan.leases:
        steps = max(le.max_steps, jobs[le.job_id].total_steps if le.job_id in jobs else 0.0)
        jobs[le.job_id] = Job(le.job_id, le.job_type, le.scale_factor, steps)
    h.prepare(list(jobs.values()))
    return h.executor.run_round(plan)


def _check_report(plan: RoundPlan, report: RoundReport, h: Harness) -> None:
    end = plan.start_s + plan.duration_s
    tol = h.time_slack_s
    assert report.start_s == plan.start_s
    assert sorted((r.job_id, r.copy, r.gpus) for r in report.results) == sorted(
        (le.job_id, le.copy, le.gpus) for le in plan.leases), "one result per lease"
    for r in report.results:
        assert plan.start_s <= r.end_s <= end + tol
        assert r.steps >= 0 and (not r.failed or r.steps == 0)
    last = max((r.end_s for r in report.results), default=plan.start_s)
    assert report.end_s == pytest.approx(last, abs=tol)
    by_job: dict[int, float] = {}
    for r in report.results:
        by_job[r.job_id] = by_job.get(r.job_id, 0.0) + r.steps
    for lease in plan.leases:
        assert by_job[lease.job_id] <= lease.max_steps * (1 + 1e-12), "more steps than the job had left"


@pytest.fixture(params=EXECUTORS)
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    with request.param(request) as h:
        yield h


def test_an_empty_round_ends_at_its_start(harness: Harness) -> None:
    now = harness.clock.now()
    report = _run_round(harness, RoundPlan(now, harness.round_s, ()))
    assert report.results == () and report.end_s == report.start_s == now


def test_a_round_of_long_leases_runs_to_its_planned_end(harness: Harness) -> None:
    h = harness
    a, b = _nodes(h)
    plan = RoundPlan(h.clock.now(), h.round_s, (_lease(h, 1, a[:1], 1e12), _lease(h, 2, a[1:2], 1e12),
                                                 _lease(h, 3, b[:2], 1e12)))
    report = _run_round(h, plan)
    _check_report(plan, report, h)
    for r in report.results:
        assert not r.failed and r.steps > 0
        assert r.end_s >= plan.start_s + plan.duration_s - 2 * len(r.gpus) / h.rate(r.gpus[0], len(r.gpus))


def test_a_round_ends_when_its_last_lease_ends(harness: Harness) -> None:
    h = harness
    a, b = _nodes(h)
    short = {1: (a[:1], 0.2), 2: (b[:1], 0.3)}  # job -> (GPUs, share of the round it needs)
    leases = tuple(_lease(h, j, g, math.floor(h.rate(g[0]) * f * h.round_s)) for j, (g, f) in short.items())
    plan = RoundPlan(h.clock.now(), h.round_s, leases)
    report = _run_round(h, plan)
    _check_report(plan, report, h)
    for r, lease in zip(sorted(report.results, key=lambda r: r.job_id), leases, strict=True):
        assert lease.max_steps - h.step_slack <= r.steps <= lease.max_steps
    # not at the planned end: the longer lease needs 0.3 of the round at its estimated rate, up to 1 / (1 - rate_rtol)
    # times that at a real executor's pace on a busy machine (seen: 4.5 s of an 8 s round at load 12 on 2 cores)
    assert report.end_s < plan.start_s + min(0.3 / (1.0 - h.rate_rtol) + 0.15, 0.9) * plan.duration_s


def test_a_cut_round_ends_by_its_cut(harness: Harness) -> None:
    h = harness
    a, _ = _nodes(h)
    cut = 0.25 * h.round_s  # the engine shortened the round (an arrival, a predicted completion)
    lease = _lease(h, 1, a[:1], 1e12)
    plan = RoundPlan(h.clock.now(), cut, (lease,))
    report = _run_round(h, plan)
    _check_report(plan, report, h)
    (r,) = report.results
    # the table's rate, exact for the simulator; a real executor's table was measured under another load than
    # this lease runs at (a lease made 47 steps where 1.25x the table's pace allowed 42.7, on a machine busier
    # while the table was measured): up to 2x it, where a lease that ran on to the round's end makes 4x
    stray = h.rate_rtol if h.rate_rtol < 1e-6 else 1.0
    assert r.steps <= h.rate(a[0]) * cut * (1 + stray) + h.step_slack


def test_estimate_rate_matches_progress(harness: Harness) -> None:
    h = harness
    a, b = _nodes(h)
    leases = (_lease(h, 1, a[:1], 1e12), _lease(h, 2, b[:2], 1e12))
    plan = RoundPlan(h.clock.now(), h.round_s, leases)
    report = _run_round(h, plan)
    _check_report(plan, report, h)
    for r, lease in zip(sorted(report.results, key=lambda r: r.job_id), leases, strict=True):
        rate = h.executor.estimate_rate(lease)
        if rate is None:
            assert h.rate_rtol >= 1e-6, "the simulated rate is always known"
            continue
        assert rate > 0
        assert r.steps == pytest.approx(rate * (r.end_s - plan.start_s), rel=h.rate_rtol, abs=h.step_slack)


def test_forked_copies_together_never_exceed_the_jobs_remaining_steps(harness: Harness) -> None:
    h = harness
    a, b = _nodes(h)
    together = h.rate(a[0], 2) + h.rate(b[0], 2)
    remaining = math.floor(0.5 * together * h.round_s)  # the two copies finish it halfway through the round
    leases = (_lease(h, 5, a[:2], remaining, copy=0, sf=2), _lease(h, 5, b[:2], remaining, copy=1, sf=2))
    plan = RoundPlan(h.clock.now(), h.round_s, leases)
    report = _run_round(h, plan)
    _check_report(plan, report, h)
    done = sum(r.steps for r in report.results)
    assert remaining - 2 * h.step_slack <= done <= remaining * (1 + 1e-12)
    # they stop once the job is done, halfway through the round (a real executor, whose pace strays by up to
    # rate_rtol on a busy machine, has up to the round's end)
    # (plus the time a lease may take past its deadline, as every report allows: seen 3 s on a loaded machine)
    assert report.end_s < plan.start_s + min(0.75 + h.rate_rtol, 1.0) * plan.duration_s + h.time_slack_s


def test_a_failed_lease_reports_no_steps(harness: Harness) -> None:
    h = harness
    assert h.fail_next is not None, "every executor under contract can be made to fail"
    a, b = _nodes(h)
    h.fail_next(a[0])
    leases = (_lease(h, 1, a[:1], 1e12), _lease(h, 2, b[:1], 1e12))
    report = _run_round(h, RoundPlan(h.clock.now(), h.round_s, leases))
    by_job = {r.job_id: r for r in report.results}
    assert by_job[1].failed and by_job[1].steps == 0
    assert not by_job[2].failed and by_job[2].steps > 0


def _run(h: Harness, jobs: list[Job]) -> dict[int, tuple[float | None, float | None, float]]:
    """Run ``jobs`` through the engine (whole gangs, rounds cut); job id -> (first start, finish, steps done)."""
    engine, ledger = wire(GreedyCountsPolicy(), h.cluster, h.table, h.executor, h.clock, round_s=h.round_s,
                          track_copies=True)
    h.prepare(jobs)
    engine.run(Workload(jobs))
    return {jid: (rec.first_start_s, rec.finish_s, sum(c.steps for c in rec.copies if not c.failed))
            for jid, rec in ledger.records.items()}


def test_every_job_finishes_with_exactly_its_steps(harness: Harness) -> None:
    h = harness
    per_round = h.rate(0) * h.round_s
    sizes = [0.3, 1.7, 2.2, 0.9, 1.0, 0.4]  # in rounds on one GPU of the first type
    jobs = [Job(i, h.job_type, 1 + (i % 2), math.floor(s * per_round), arrival_s=0.0) for i, s in enumerate(sizes)]
    out = _run(h, jobs)
    for job in jobs:
        start, finish, done = out[job.job_id]
        assert start is not None and finish is not None
        assert done == pytest.approx(job.total_steps, rel=1e-9), "progress lost or counted twice"


def test_a_waiting_job_starts_when_a_lease_ends_early(harness: Harness) -> None:
    h = harness
    n = h.cluster.num_gpus
    short = math.floor(h.rate(0) * 0.25 * h.round_s)  # job 0 ends a quarter into the first round
    # the others hold their GPUs for the whole first round (on the fastest type): no GPU frees up before its end
    # but job 0's, so a waiting job that started by a round's planned end would start a round in
    jobs = [Job(0, h.job_type, 1, short)] + [Job(i, h.job_type, 1, 4 * short) for i in range(1, n + 1)]
    out = _run(h, jobs)  # n GPUs, n + 1 jobs: job n waits
    start, _, _ = out[n]
    round0, finish0, _ = out[0]
    assert start is not None and finish0 is not None and round0 is not None
    # job 0 ends a quarter into the first round (later on a loaded machine: its lease's start, a slower pace);
    # the waiting job starts then, before the round's planned end, where a job that waited for the boundary
    # would start. The first round starts when the engine does (job 0's first start), not at time 0: the
    # executor's clock runs from its creation
    assert start < round0 + 0.9 * h.round_s, (
        f"the waiting job waited for the round's planned end: started {start:.2f} s, the round ran from "
        f"{round0:.2f} s for {h.round_s} s, job 0 ended {finish0:.2f} s")
    assert start >= finish0 - h.time_slack_s
