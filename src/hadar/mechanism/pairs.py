"""The round mechanism for space-sharing allocations (``Allocation.pairs``): units, not jobs.

A unit is a job alone or a pair of jobs that share the same GPUs. Per GPU
type (in the planner's order), units are ranked by priority = x_uj / (time
the unit ran on j since the allocation was made, seeded with round/2), ties
by x_uj then by the units' job ids; a greedy scan takes a unit when none of
its jobs runs yet and the type has ``scale_factor`` free GPUs. A chosen pair
is placed like one job (it keeps its first job's GPUs when free) and gives
both jobs a lease on the same GPUs, each naming its partner: the executor
credits each job its own co-located rate. Gavel keeps such counters per job
combination; here they live in :class:`PairCounters`, which the planner owns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from hadar.model.plan import Lease
from hadar.model.state import Allocation, JobView, SchedulerState

Unit = tuple[int, ...]  # sorted job ids: (a,) alone, (a, b) a pair


@dataclass(slots=True)
class PairCounters:
    """Seconds each unit ran per type since ``allocation`` was made (reset when it changes)."""

    allocation: Allocation | None = None
    received: dict[tuple[Unit, str], float] = field(default_factory=dict)

    def sync(self, allocation: Allocation) -> None:
        if allocation is not self.allocation:
            self.allocation, self.received = allocation, {}

    def got(self, unit: Unit, gpu_type: str, seed: float) -> float:
        return self.received.get((unit, gpu_type), seed)

    def add(self, unit: Unit, gpu_type: str, seconds: float, seed: float) -> None:
        self.received[(unit, gpu_type)] = self.got(unit, gpu_type, seed) + seconds


def _units(state: SchedulerState, allocation: Allocation) -> list[tuple[Unit, tuple[float, ...]]]:
    """Every unit with its fractions in ``state.gpu_types`` order (live jobs only)."""
    live = {j.job_id for j in state.jobs}
    col = [allocation.gpu_types.index(t) if t in allocation.gpu_types else -1 for t in state.gpu_types]
    out: list[tuple[Unit, tuple[float, ...]]] = []
    for job in state.jobs:
        row = allocation.row(job.job_id)
        out.append(((job.job_id,), tuple(row[c] if row is not None and c >= 0 else 0.0 for c in col)))
    for (a, b), xs in (allocation.pairs or {}).items():
        if a in live and b in live:
            out.append((tuple(sorted((a, b))), tuple(xs[c] if c >= 0 else 0.0 for c in col)))
    return out


def choose_units(state: SchedulerState, allocation: Allocation, types: Sequence[str],
                 counters: PairCounters) -> dict[str, list[Unit]]:
    """The units that run this round, per type (see the module docstring)."""
    counters.sync(allocation)
    seed = state.round_s / 2.0
    jobs = {j.job_id: j for j in state.jobs}
    index = {t: i for i, t in enumerate(state.gpu_types)}
    units = _units(state, allocation)
    queue: list[tuple[str, Unit, float]] = []
    for t in types:
        j = index[t]
        entries = [(xs[j] / counters.got(u, t, seed), xs[j], u) for u, xs in units if xs[j] > 0]
        entries.sort(key=lambda e: (-e[0], -e[1], e[2]))
        queue.extend((t, e[2], e[0]) for e in entries)
    left = {t: state.cluster.count(t) for t in types}
    taken: set[int] = set()
    chosen: dict[str, list[Unit]] = {t: [] for t in types}
    for t, unit, _prio in queue:
        sf = jobs[unit[0]].scale_factor
        if left[t] < sf or any(jid in taken for jid in unit):
            continue
        if len(unit) == 1 and jobs[unit[0]].throughputs[index[t]] <= 0:
            continue
        if len(unit) == 2 and min(state.table.pair_rates(jobs[unit[0]].job_type, jobs[unit[1]].job_type,
                                                         sf, t)) <= 0:
            continue
        left[t] -= sf
        taken.update(unit)
        chosen[t].append(unit)
        counters.add(unit, t, state.round_s, seed)
    return chosen


def pair_leases(state: SchedulerState, chosen: list[Unit],
                place: Callable[[list[JobView]], list[Lease]]) -> list[Lease]:
    """Place each unit as its first job (``place`` = the planner's placement on one type), then give
    a pair's second job a lease on the same GPUs; both leases name their partner."""
    jobs = {j.job_id: j for j in state.jobs}
    partner = {u[0]: u[1] for u in chosen if len(u) == 2}
    leases: list[Lease] = []
    for lease in place([jobs[u[0]] for u in chosen]):
        b = partner.get(lease.job_id)
        if b is None:
            leases.append(lease)
            continue
        jb = jobs[b]
        leases.append(replace(lease, partner_id=b, partner_type=jb.job_type))
        leases.append(Lease(job_id=b, job_type=jb.job_type, scale_factor=jb.scale_factor, gpus=lease.gpus,
                            max_steps=jb.remaining_steps, extended=lease.gpus == jb.previous_gpus,
                            partner_id=lease.job_id, partner_type=lease.job_type,
                            restart_s=jb.restart_s, owed_s=jb.owed_s(lease.gpus)))
    return leases
