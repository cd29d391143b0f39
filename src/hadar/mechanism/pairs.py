"""The round mechanism for space-sharing allocations (``Allocation.pairs``): units, not jobs.

A unit is a job alone or a pair of jobs that share the same GPUs. Per GPU
type (in the planner's order), units are ranked by priority = x_uj / (time
the unit ran on j since the allocation was made, seeded with round/2), ties
by the unit's deficit on j (summed over past allocations: share x elapsed
time minus time run), then x_uj, then Gavel's order (a job, then its pairs
with earlier jobs: last job id, pair after single, first job id). GPUs the
units with a share leave go to units without one (priority 0, by deficit),
except under policies that skip zero priorities (FIFO): under
``--gavel-compat`` every job alone and every pair of jobs with the same GPU
count, right after that type's positive entries, and each pair starts with
half a round of deficit, as Gavel's rounds do; otherwise only jobs alone,
after every type's positive entries. A greedy scan takes a unit when none of
its jobs runs yet and the type has ``scale_factor`` free GPUs (and, for a
pair, both co-located rates are positive). A chosen pair is placed like one
job (it keeps its first job's GPUs when free) and gives both jobs a lease on
the same GPUs, each naming its partner: the executor credits each job its
own co-located rate. Gavel keeps such counters per job combination; here
they live in :class:`PairCounters`, which the planner owns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from hadar.model.plan import Lease
from hadar.model.state import Allocation, JobView, SchedulerState

Unit = tuple[int, ...]  # sorted job ids: (a,) alone, (a, b) a pair


@dataclass(slots=True)
class PairCounters:
    """Seconds each unit ran per type since ``allocation`` was made (reset when it changes), and each
    unit's deficit: summed over past allocations, the time it should have run minus the time it ran.
    ``gavel``: as Gavel's counters start a pair's time at 0 where a job's starts at half a round, every
    pair of live jobs with the same GPU count gains half a round of deficit at its first re-solve."""

    allocation: Allocation | None = None
    received: dict[tuple[Unit, str], float] = field(default_factory=dict)
    deficits: dict[tuple[Unit, str], float] = field(default_factory=dict)
    since_s: float = 0.0
    born: set[Unit] = field(default_factory=set)

    def sync(self, allocation: Allocation, state: SchedulerState, gavel: bool = False) -> None:
        if allocation is self.allocation:
            return
        if gavel:
            self._credit_new_pairs(state)
        if self.allocation is not None:  # settle the deficits of the allocation that ends now
            seed, elapsed = state.round_s / 2.0, state.now_s - self.since_s
            shares = {(unit, t): x for unit, xs in _units(state, self.allocation)
                      for t, x in zip(state.gpu_types, xs, strict=True) if x > 0}
            for key in set(shares) | set(self.received):
                ran = self.received.get(key, seed) - seed
                self.deficits[key] = self.deficits.get(key, 0.0) + shares.get(key, 0.0) * elapsed - ran
        self.allocation, self.received, self.since_s = allocation, {}, state.now_s

    def _credit_new_pairs(self, state: SchedulerState) -> None:
        ids = sorted((j.job_id, j.scale_factor) for j in state.jobs)
        for x, (a, sa) in enumerate(ids):
            for b, sb in ids[x + 1:]:
                if sa == sb and (a, b) not in self.born:
                    self.born.add((a, b))
                    for t in state.gpu_types:
                        self.deficits[((a, b), t)] = self.deficits.get(((a, b), t), 0.0) + state.round_s / 2.0

    def got(self, unit: Unit, gpu_type: str, seed: float) -> float:
        return self.received.get((unit, gpu_type), seed)

    def add(self, unit: Unit, gpu_type: str, seconds: float, seed: float) -> None:
        self.received[(unit, gpu_type)] = self.got(unit, gpu_type, seed) + seconds


def _arrival_key(unit: Unit) -> tuple[int, int, int]:
    """Gavel's order of units with equal priority, deficit and share: a job, then its pairs with the
    jobs before it (the order its dicts gain them as jobs arrive): (last job id, pair?, first id)."""
    return (unit[-1], len(unit), unit[0])


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


def _queue(state: SchedulerState, allocation: Allocation, types: Sequence[str], counters: PairCounters,
           spare: bool, spare_last: bool) -> list[tuple[str, Unit]]:
    """(type, unit) in the order the greedy scan tries them: per type, the units with a share by
    priority; with ``spare``, then the units without a share there (priority 0) by deficit: Gavel's
    way (not ``spare_last``) every job alone and every pair of jobs with the same GPU count, right
    after that type's positive entries; with ``spare_last`` the jobs alone only, after every type's."""
    seed = state.round_s / 2.0
    units = _units(state, allocation)
    index = {t: i for i, t in enumerate(state.gpu_types)}
    ids = sorted(j.job_id for j in state.jobs)
    idle: list[Unit] = [(a,) for a in ids] if spare else []
    if spare and not spare_last:
        sf = {j.job_id: j.scale_factor for j in state.jobs}
        idle += [(a, b) for x, a in enumerate(ids) for b in ids[x + 1:] if sf[a] == sf[b]]
    head: list[tuple[str, Unit]] = []
    tail: list[tuple[str, Unit]] = []
    for t in types:
        j = index[t]
        entries = [(xs[j] / counters.got(u, t, seed), counters.deficits.get((u, t), 0.0), xs[j], u)
                   for u, xs in units if xs[j] > 0]
        entries.sort(key=lambda e: (-e[0], -e[1], -e[2], _arrival_key(e[3])))
        head.extend((t, e[3]) for e in entries)
        shared = {e[3] for e in entries}
        rest = sorted((u for u in idle if u not in shared),
                      key=lambda u: (-counters.deficits.get((u, t), 0.0), _arrival_key(u)))
        (tail if spare_last else head).extend((t, u) for u in rest)
    return head + tail


def choose_units(state: SchedulerState, allocation: Allocation, types: Sequence[str],
                 counters: PairCounters, spare: bool = False, spare_last: bool = True) -> dict[str, list[Unit]]:
    """The units that run this round, per type (see the module docstring)."""
    counters.sync(allocation, state, gavel=not spare_last)
    seed = state.round_s / 2.0
    jobs = {j.job_id: j for j in state.jobs}
    index = {t: i for i, t in enumerate(state.gpu_types)}
    left = {t: state.cluster.count(t) for t in types}
    taken: set[int] = set()
    chosen: dict[str, list[Unit]] = {t: [] for t in types}
    for t, unit in _queue(state, allocation, types, counters, spare, spare_last):
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
