"""The fast constructors of the per-round frozen values (hadar.model.frozen) and the callers that pass
them every field by position: the objects are those the classes build, field for field."""

from __future__ import annotations

import dataclasses

import pytest

from hadar.mechanism.ledger import JobLedger, _view
from hadar.mechanism.rounds import GavelRoundPlanner
from hadar.model.frozen import builder
from hadar.model.plan import Lease, LeaseResult
from hadar.model.state import Allocation, JobView
from hadar.model.world import World
from hadar.sim.executor import SimulatedExecutor
from tests.helpers import job


def _fields(obj: object) -> dict[str, object]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", [JobView, Lease, LeaseResult])
def test_a_built_object_is_the_class_own_equal_hashable_and_frozen(cls):
    values = {f.name: (f.default_factory() if f.default_factory is not dataclasses.MISSING  # type: ignore[misc]
                       else f.default if f.default is not dataclasses.MISSING else _sample(f.name))
              for f in dataclasses.fields(cls)}
    made = builder(cls)(**values)
    ref = cls(**values)
    assert type(made) is cls and made == ref and _fields(made) == _fields(ref)
    assert made == builder(cls)(*values.values())  # by position, in the fields' order
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.job_id = 99  # type: ignore[misc]
    if cls is not LeaseResult:  # its metrics dict makes it unhashable, as the class's own
        assert hash(made) == hash(ref)


def _sample(name: str) -> object:
    return {"job_id": 7, "job_type": "ResNet-18 (batch size 64)", "scale_factor": 2, "priority_weight": 1.0,
            "arrival_s": 3.0, "total_steps": 100.0, "remaining_steps": 40.0, "throughputs": (1.0, 2.0, 0.0),
            "gpus": (4, 5), "max_steps": 40.0, "copy": 1, "steps": 12.0, "end_s": 50.0}[name]


def test_a_class_the_builder_cannot_take_is_returned_as_is():
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        x: int

        def __post_init__(self) -> None:
            assert self.x >= 0

    assert builder(Checked) is Checked


def test_the_ledger_view_holds_each_field_by_name(table):
    from hadar.config import parse_cluster

    ledger = JobLedger(parse_cluster("2:2:2"), table, 360.0)
    ledger.add(job(3, sf=2))
    rec = ledger.records[3]
    rec.prev_gpus, rec.restoring, rec.attained_gpu_s, rec.first_start_s = (0, 1), (((0, 1), 4.0),), 9.0, 1.5
    view = _view(rec)
    ref = JobView(job_id=3, job_type=rec.job.job_type, scale_factor=2, priority_weight=rec.job.priority_weight,
                  arrival_s=rec.job.arrival_s, total_steps=float(rec.job.total_steps), remaining_steps=rec.remaining,
                  throughputs=rec.throughputs, first_start_s=1.5, attained_gpu_s=9.0, previous_gpus=(0, 1),
                  restart_s=rec.restart_s,
                  restoring=(((0, 1), 4.0),), slo=rec.job.slo, entity=rec.job.entity)
    assert _fields(view) == _fields(ref)


def test_planner_leases_and_executor_results_hold_each_field_by_name(table):
    from hadar.config import parse_cluster

    ledger = JobLedger(parse_cluster("4:4:4"), table, 360.0)
    ledger.add(job(0, sf=2))
    ledger.add(job(1, sf=1))
    state = ledger.snapshot(0.0)
    alloc = Allocation(state.job_ids, state.gpu_types, [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], scale_factors=(2, 1))
    plan = GavelRoundPlanner().plan(state, alloc, None)
    views = {v.job_id: v for v in state.jobs}
    for lease in plan.leases:
        v = views[lease.job_id]
        ref = Lease(job_id=v.job_id, job_type=v.job_type, scale_factor=v.scale_factor, gpus=lease.gpus,
                    max_steps=v.remaining_steps, extended=False, restart_s=v.restart_s)
        assert _fields(lease) == _fields(ref)
    report = SimulatedExecutor(ledger.cluster, table, World(charge_restarts=False)).run_round(plan)
    for lease, res in zip(plan.leases, report.results, strict=True):
        assert _fields(res) == _fields(LeaseResult(job_id=lease.job_id, copy=0, gpus=lease.gpus, steps=res.steps,
                                                   end_s=res.end_s))
        assert res.steps > 0 and res.end_s > 0
