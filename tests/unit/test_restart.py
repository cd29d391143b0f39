"""Restarts that cost time (issue 20, item 1): a job's ``restart_s`` is lost at every start and every
move to other GPUs, never on a lease extended on the same GPUs, in every policy; files and the CLI
read and check it; ``--gavel-compat`` charges nothing."""

from __future__ import annotations

import math

import pytest

from hadar.build import policy_for_run, wire
from hadar.clock import VirtualClock
from hadar.config import parse_cluster
from hadar.errors import InputError
from hadar.model.job import Job
from hadar.model.plan import Lease, RoundPlan, RoundReport
from hadar.model.throughput import ThroughputTable
from hadar.model.world import World
from hadar.policies import available
from hadar.sim.executor import SimulatedExecutor
from hadar.sim.run import simulate
from hadar.sim.trace import read_jobs
from hadar.sources import Workload
from tests.unit.test_cli import assert_one_line_error, hadar

TABLE = ThroughputTable.load(None)
RESNET = "ResNet-50 (batch size 64)"


def _job(job_id: int, job_type: str = RESNET, steps: float = 20_000.0, arrival: float = 0.0,
         restart_s: float | None = None) -> Job:
    return Job(job_id=job_id, job_type=job_type, scale_factor=1, total_steps=steps, arrival_s=arrival,
               restart_s=restart_s)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, True])
def test_a_job_rejects_a_bad_restart_cost(bad):
    with pytest.raises(InputError, match="restart_s must be a finite number of seconds >= 0"):
        _job(0, restart_s=bad)


def test_csv_and_yaml_carry_restart_s(tmp_path):
    csv = tmp_path / "jobs.csv"
    csv.write_text(f"job_type,total_steps,scale_factor,restart_s\n{RESNET},100,1,25\n{RESNET},100,1,\n")
    assert [j.restart_s for j in read_jobs(csv)] == [25.0, None]
    yml = tmp_path / "jobs.yaml"
    yml.write_text(f"jobs:\n  - {{job_type: '{RESNET}', total_steps: 100, restart_s: 80}}\n"
                   f"  - {{job_type: '{RESNET}', total_steps: 100}}\n")
    assert [j.restart_s for j in read_jobs(yml)] == [80.0, None]
    assert all(not j.extra for j in read_jobs(csv))  # a known field, not an extra column


@pytest.mark.parametrize(("text", "fragment"), [
    (f"job_type,total_steps,restart_s\n{RESNET},100,-5\n", "jobs.csv:2: restart_s must be a finite number"),
    (f"job_type,total_steps,restart_s\n{RESNET},100,soon\n", "jobs.csv:2: restart_s must be a number"),
])
def test_a_bad_restart_s_in_a_file_is_one_line_and_exit_2(tmp_path, text, fragment):
    (tmp_path / "jobs.csv").write_text(text)
    assert_one_line_error(hadar("simulate", "--trace", str(tmp_path / "jobs.csv")), fragment)


def test_a_negative_restart_s_flag_is_one_line_and_exit_2():
    assert_one_line_error(hadar("simulate", "--restart-s", "-3"), "--restart-s: restart_s must be a finite number")


# ---- the simulated executor ------------------------------------------------------------------
def _lease(gpus=(0,), extended=False, restart_s=60.0, steps=1e9, copy=0, owed_s=0.0) -> Lease:
    return Lease(0, RESNET, 1, gpus, max_steps=steps, copy=copy, extended=extended, restart_s=restart_s,
                 owed_s=owed_s)


def _executor(charge: bool = True) -> SimulatedExecutor:
    return SimulatedExecutor(parse_cluster("2:0:0"), TABLE, World(charge_restarts=charge))


def test_a_start_or_move_loses_restart_s_an_extension_nothing():
    ex = _executor()
    rate = ex.rate(_lease())
    fresh = ex.run_round(RoundPlan(0.0, 360.0, (_lease(),))).results[0]
    assert fresh.steps == math.floor(rate * 300.0) and fresh.end_s == pytest.approx(60.0 + fresh.steps / rate)
    kept = ex.run_round(RoundPlan(360.0, 360.0, (_lease(extended=True),))).results[0]
    assert kept.steps == math.floor(rate * 360.0) and kept.end_s == pytest.approx(360.0 + kept.steps / rate)
    moved = ex.run_round(RoundPlan(720.0, 360.0, (_lease(gpus=(1,)),))).results[0]
    assert moved.steps == fresh.steps
    off = _executor(charge=False).run_round(RoundPlan(0.0, 360.0, (_lease(),))).results[0]
    assert off.steps == kept.steps  # Gavel's simulator: restarts are free


def test_a_restore_longer_than_a_cut_round_carries_into_the_next():
    ex = _executor()
    rate = ex.rate(_lease())
    short = ex.run_round(RoundPlan(0.0, 40.0, (_lease(),))).results[0]
    assert (short.steps, short.end_s, short.restore_left_s) == (0, 40.0, 20.0)
    rest = ex.run_round(RoundPlan(40.0, 360.0, (_lease(extended=True, owed_s=20.0),))).results[0]
    assert rest.steps == math.floor(rate * 340.0) and rest.restore_left_s == 0.0


def test_forked_copies_restoring_at_different_times_share_the_remaining_steps():
    ex = SimulatedExecutor(parse_cluster("2:0:0"), TABLE)
    rate = ex.rate(_lease())
    remaining = rate * 200.0  # copy 0 restores 60 s, copy 1 is extended: 200 s of one GPU left
    leases = (_lease(steps=remaining), _lease(gpus=(1,), extended=True, steps=remaining, copy=1))
    results = ex.run_round(RoundPlan(0.0, 360.0, leases)).results
    t = (remaining + rate * 60.0) / (2 * rate)  # both run from 60 s on; copy 1 alone before
    assert sum(r.steps for r in results) == pytest.approx(remaining)
    assert [r.end_s for r in results] == pytest.approx([t, t])


# ---- every policy -------------------------------------------------------------------------------
class _Recorder(SimulatedExecutor):
    """The simulated executor, keeping every round's plan and report."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rounds: list[tuple[RoundPlan, RoundReport]] = []

    def run_round(self, plan: RoundPlan) -> RoundReport:
        report = super().run_round(plan)
        self.rounds.append((plan, report))
        return report


WORKLOAD = [("ResNet-50 (batch size 64)", 0.0), ("Transformer (batch size 64)", 0.0),
            ("ResNet-18 (batch size 128)", 900.0), ("LM (batch size 20)", 1500.0), ("A3C", 1600.0)]


@pytest.mark.parametrize("name", sorted(available()))
def test_every_policy_pays_each_start_and_move_and_no_extension(name):
    """Each lease's busy time is its steps at its rate plus the restore it owes: restart_s when not
    extended, what a cut round left unfinished when extended (the ledger hands it to the planner),
    else nothing."""
    cluster = parse_cluster("1:1:1")
    restart = 45.0
    jobs = [_job(i, jt, steps=TABLE.get(jt, 1, "v100") * 1500.0, arrival=a, restart_s=restart)
            for i, (jt, a) in enumerate(WORKLOAD)]
    run = policy_for_run(name, seed=0)
    ex = _Recorder(cluster, TABLE)
    engine, ledger = wire(run.policy, cluster, TABLE, ex, VirtualClock(), round_s=360.0, seed=0)
    engine.run(Workload(jobs))
    assert all(ledger.finished(j.job_id) for j in jobs)
    assert len(ex.rounds) < 200, len(ex.rounds)  # cut rounds see the restores: no crawl of tiny rounds
    owed: dict[tuple[int, tuple[int, ...]], float] = {}
    charged = 0
    for plan, report in ex.rounds:
        left: dict[tuple[int, tuple[int, ...]], float] = {}
        for lease, res in zip(plan.leases, report.results, strict=True):
            key = (lease.job_id, lease.gpus)
            assert lease.owed_s == (owed.get(key, 0.0) if lease.extended else lease.owed_s)
            lost = owed.get(key, 0.0) if lease.extended else restart
            charged += not lease.extended
            ran = min(lost, plan.duration_s)
            assert res.end_s - plan.start_s == pytest.approx(ran + res.steps / ex.rate(lease), abs=1e-6), (name, lease)
            assert res.restore_left_s == pytest.approx(max(0.0, lost - plan.duration_s))
            if lost > plan.duration_s:
                left[key] = lost - plan.duration_s
        owed = left
    assert charged >= len(jobs)  # every job's first start at least
    if name in ("max_min_fairness_perf", "hadar", "hadare"):
        assert charged > len(jobs)  # and moves


@pytest.mark.parametrize("name", ["max_sum_throughput_perf", "hadar", "fifo"])
def test_one_job_alone_finishes_restart_s_later_and_gavel_compat_charges_nothing(name):
    jobs = [_job(0, steps=10_000.0)]
    cluster = parse_cluster("1:0:0")
    free = simulate(jobs, cluster, TABLE, name).rows[0].jct_s
    assert simulate(jobs, cluster, TABLE, name, restart_s=60.0).rows[0].jct_s == pytest.approx(free + 60.0, abs=0.1)
    assert simulate([_job(0, steps=10_000.0, restart_s=60.0)], cluster, TABLE, name,
                    gavel_compat=True).rows[0].jct_s == pytest.approx(free, abs=0.1)
    own = simulate([_job(0, steps=10_000.0, restart_s=10.0)], cluster, TABLE, name, restart_s=60.0).rows[0].jct_s
    assert own == pytest.approx(free + 10.0, abs=0.1)  # the job's own figure wins over the default


def test_a_measured_restart_weighs_only_where_the_job_gives_none():
    from hadar.mechanism.ledger import JobLedger

    ledger = JobLedger(parse_cluster("1:0:0"), TABLE, 360.0)
    ledger.add(_job(0))
    ledger.add(_job(1, restart_s=5.0))
    assert [j.restart_s for j in ledger.snapshot(0.0).jobs] == [0.0, 5.0]
    # the executor's report says what it measured; the ledger weighs it where the job gives none
    ledger.apply(RoundPlan(0.0, 360.0), RoundReport(0.0, 0.0, restart_s=((0, 12.5), (1, 40.0))))
    assert [j.restart_s for j in ledger.snapshot(0.0).jobs] == [12.5, 5.0]
