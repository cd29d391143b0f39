"""Gavel's round mechanism: turn time fractions into leases for one round.

Per GPU type (v100, p100, k80, then any other type; shuffled every round
for type-agnostic policies), jobs are ranked by priority = x_ij / (time
received on j since the last reset), ties by deficit, then x_ij, then job id; a greedy
scan gives each job ``scale_factor`` GPUs of at most one type. Placement
keeps a job on the exact GPUs it held last round when they are free
(lease extension), then fills the rest server by server. Like Gavel, a job
that is active but absent from the allocation (it arrived after the last
re-solve) can be picked by the scan, which holds its GPUs idle this round,
and is not placed.

Outside ``--gavel-compat`` (``spare_last``) the types are scanned in the
cluster's order (fastest first there: ``ThroughputTable.speed_order``,
never by name); a fraction below ``DUST`` times the job's largest one
(solver round-off, e.g. 4e-7 on a V100 next to 1.0 on a P100) counts as
zero; the scan puts a job off while it has a positive priority on a type
where it runs faster and that has room for it (the scan's fastest-first
rule, per job); and only after every positive priority has been seen do
the put-off entries and then spare GPUs go out, to each job's relatively
fastest types first (its rate there over its best rate; ties by deficit,
the type's position, job id). Under a type-agnostic policy (types shuffled)
jobs do not seek their fast types: no entry is put off, and spare GPUs go
by deficit, the type's position and job id. Gavel's scan, type by type from v100, hands
a lone job a v100 where its priority is zero or small before it reaches
the p100 its allocation names, where the job runs 2.3x as fast.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from functools import partial

from hadar.mechanism.counters import GavelCounters
from hadar.mechanism.events import Event
from hadar.mechanism.pairs import PairCounters, choose_units, pair_leases
from hadar.model.frozen import builder
from hadar.model.plan import Lease, RoundPlan, RoundReport
from hadar.model.state import Allocation, JobView, SchedulerState

_lease = builder(Lease)


class GavelRoundPlanner:
    """Gavel's priority/deficit round planner.

    ``DUST``: with ``spare_last``, fractions at most this times the job's largest count as zero.

    ``shuffle_types``: walk GPU types in a random order each round (Gavel does
    this for type-agnostic policies; seeded with ``seed + 5`` like Gavel).
    ``skip_zero_priority``: never run a job with zero priority on a type
    (Gavel's FIFO policies); otherwise spare GPUs go to such jobs too (under a space-sharing
    allocation: to units without a share, mechanism/pairs.py).
    """

    DUST = 1e-6

    def __init__(self, *, shuffle_types: bool = False, skip_zero_priority: bool = False, seed: int = 0,
                 spare_last: bool = False) -> None:
        self.shuffle_types = shuffle_types
        self.skip_zero_priority = skip_zero_priority
        self.spare_last = spare_last
        self._rng = random.Random(seed + 5)
        self._pairs = PairCounters()  # space-sharing allocations only (mechanism/pairs.py)
        self.counters = GavelCounters()  # time received per (job, type) and deficits (mechanism/counters.py)
        self._sets: dict[int, tuple[tuple[int, ...], frozenset[int]]] = {}  # id(order) -> (order, its set)

    # -- what the planner learns (the engine tells every planner) -----------------
    def resolved(self, state: SchedulerState, previous: Allocation | None) -> None:
        """The policy is re-solved now: fold the counters against the allocation that ends (Gavel's reset)."""
        self.counters.reset(state, previous)

    def observe(self, plan: RoundPlan, report: RoundReport) -> None:
        """The round ran: each lease's time on its types counts as received."""
        self.counters.observe(plan, report)

    def stalled(self) -> None:
        """Gavel's stall breaker (every job arrived, a round ran nothing): the next reset counts the whole run."""
        self.counters.stalled()

    def dump(self) -> dict[str, object]:
        """The planner's state a restart must continue from (its random order's state, its counters)."""
        return {"counters": self.counters.dump(), "rng": _rng_state(self._rng)}

    def load(self, data: dict[str, object]) -> None:
        counters, rng = data["counters"], data["rng"]
        assert isinstance(counters, dict) and isinstance(rng, list)
        self.counters.load(counters)
        self._rng.setstate((rng[0], tuple(rng[1]), rng[2]))

    def events(self, plan: RoundPlan, arrival_s: float) -> list[Event]:
        """Gavel's rounds add no event of their own."""
        return []

    def plan(self, state: SchedulerState, allocation: Allocation | None, previous: RoundPlan | None) -> RoundPlan:
        self.counters.sync(state)
        types = list(state.gpu_types)
        if self.shuffle_types:
            self._rng.shuffle(types)
        if allocation is not None and allocation.pairs:
            return self._plan_units(state, allocation, types)
        chosen = self._choose(state, allocation, types)
        cluster = state.cluster
        leases: list[Lease] = []
        for t in types:
            order = cluster.gpus_by_type.get(t, ())  # up nodes in index order, each node's GPUs in id order
            leases.extend(self._place(order, chosen[t], allocation))
        return RoundPlan(start_s=state.now_s, duration_s=state.round_s, leases=tuple(leases))

    def _plan_units(self, state: SchedulerState, allocation: Allocation, types: list[str]) -> RoundPlan:
        """Space sharing: units (jobs alone, pairs) instead of jobs; see mechanism/pairs.py."""
        units = choose_units(state, allocation, types, self._pairs, not self.skip_zero_priority, self.spare_last)
        leases: list[Lease] = []
        for t in types:
            order = tuple(g for n in state.cluster.nodes_of_type(t) for g in state.cluster.gpus_of_node(n))
            leases.extend(pair_leases(state, units[t], partial(self._place, order, allocation=allocation)))
        return RoundPlan(start_s=state.now_s, duration_s=state.round_s, leases=tuple(leases))

    # -- choosing who runs ------------------------------------------------------
    def _choose(self, state: SchedulerState, allocation: Allocation | None,
                types: Sequence[str]) -> dict[str, list[JobView]]:
        if not self.spare_last:
            return self._scan(state, allocation, types)
        index = {t: i for i, t in enumerate(state.gpu_types)}
        queue: list[tuple[str, JobView, float]] = []  # the positive priorities, per type in the scan's order
        alloc_index = {t: i for i, t in enumerate(allocation.gpu_types)} if allocation is not None else {}
        rows = [allocation.row(job.job_id) if allocation is not None else None for job in state.jobs]
        floors = [self.DUST * max(row, default=0.0) if (self.spare_last and row is not None) else 0.0
                  for row in rows]
        prios: dict[int, dict[str, float]] = {job.job_id: {} for job in state.jobs}  # job -> type -> priority
        of = self.counters.of
        cands = [(job, job.job_id, job.throughputs, *of(job.job_id), row, floor, prios[job.job_id])
                 for job, row, floor in zip(state.jobs, rows, floors, strict=True)]
        for t in types:
            j = index[t]
            a = alloc_index.get(t)
            entries = []
            for job, jid, rates, received, deficit, row, floor, mine in cands:
                x = row[a] if (row is not None and a is not None) else 0.0
                prio = mine[t] = x / received[j] if (x > floor and rates[j] > 0) else 0.0
                if prio > 0:
                    entries.append((-prio, -deficit[j], -x, jid, job))
            entries.sort()  # exact ties: lowest id first (ids are unique: views are never compared)
            queue += [(t, e[4], -e[0]) for e in entries]
        left = {t: state.cluster.count(t) for t in types}
        chosen: dict[str, list[JobView]] = {t: [] for t in types}
        aware = not self.shuffle_types  # a type-agnostic policy's jobs do not seek their fast types
        deferred = self._serve(queue, left, chosen, index, prios if aware else None)
        if any(left.values()):  # spare GPUs: the put-off entries, then the others (priority 0, or NaN: none)
            self._spare(state, types, prios, deferred, left, chosen, index, aware)
        return chosen

    def _spare(self, state: SchedulerState, types: Sequence[str], prios: dict[int, dict[str, float]],
               deferred: list[tuple[str, JobView, float]], left: dict[str, int], chosen: dict[str, list[JobView]],
               index: dict[str, int], aware: bool) -> None:
        """The second pass (``_choose``): the put-off entries and those of priority at most 0, in
        ``_spare_key``'s order. Entries it would pass over whatever comes first (a type with no GPU left,
        a job chosen already: left and chosen only shrink and grow; priority 0 under
        ``skip_zero_priority``) are left out before the sort; its keys are unique (type, job), so the
        order they come in does not matter."""
        taken = {job.job_id for jobs in chosen.values() for job in jobs}
        spare = [e for e in deferred if left[e[0]] and e[1].job_id not in taken]
        if not self.skip_zero_priority:
            spare += [(t, job, p) for t in types if left[t] for job in state.jobs
                      if job.job_id not in taken and (p := prios[job.job_id][t]) <= 0]
        if spare:
            key = self._spare_key(index, {t: p for p, t in enumerate(types)}, aware, self.counters)
            self._serve(sorted(spare, key=key), left, chosen, index)

    def _scan(self, state: SchedulerState, allocation: Allocation | None,
              types: Sequence[str]) -> dict[str, list[JobView]]:
        """Gavel's scan (``_choose`` without ``spare_last``): type by type, the jobs in priority order
        (-priority, -deficit, -x, job id), each job not yet chosen that runs on the type gets
        ``scale_factor`` GPUs of it if they are left. Jobs already chosen or that cannot run on the type
        are left out before the sort (the scan would pass over them), and a type's scan stops when it
        has no GPU left."""
        index = {t: i for i, t in enumerate(state.gpu_types)}
        jobs = state.jobs
        alloc_index = {t: i for i, t in enumerate(allocation.gpu_types)} if allocation is not None else {}
        rows = [allocation.row(job.job_id) for job in jobs] if allocation is not None else [None] * len(jobs)
        skip_zero = self.skip_zero_priority
        of = self.counters.of
        cands = [(job, job.job_id, job.throughputs, *of(job.job_id), row)
                 for job, row in zip(jobs, rows, strict=True)]
        chosen: dict[str, list[JobView]] = {t: [] for t in types}
        for t in types:
            room = state.cluster.count(t)
            if room == 0:
                continue
            j, a = index[t], alloc_index.get(t)
            entries = []
            for job, jid, rates, received, deficit, row in cands:
                rate = rates[j]
                if rate <= 0:
                    continue
                x = row[a] if (row is not None and a is not None) else 0.0
                prio = x / received[j] if (x > 0.0 and rate > 0) else 0.0
                entries.append((-prio, -deficit[j], -x, jid, job))
            entries.sort()  # exact ties: lowest id first (ids are unique: views are never compared)
            got = chosen[t]
            for e in entries:
                job = e[4]
                if (skip_zero and e[0] >= 0) or job.scale_factor > room:
                    continue
                room -= job.scale_factor
                got.append(job)
                if room == 0:
                    break
            if got:  # a job chosen here is passed over on every later type
                ids = {job.job_id for job in got}
                cands = [c for c in cands if c[1] not in ids]
        return chosen

    def _serve(self, queue: list[tuple[str, JobView, float]], left: dict[str, int], chosen: dict[str, list[JobView]],
               index: dict[str, int], prios: dict[int, dict[str, float]] | None = None
               ) -> list[tuple[str, JobView, float]]:
        """Gavel's greedy scan of ``queue``: each job not yet chosen gets ``scale_factor`` GPUs of the entry's
        type if it has room. With ``prios`` (job -> type -> priority), an entry is put off (returned) while
        the job has a positive priority on a type where it runs faster and that has room for it."""
        taken = {job.job_id for jobs in chosen.values() for job in jobs}
        later: list[tuple[str, JobView, float]] = []
        faster: dict[int, list[tuple[str, float]]] = {}  # job -> (type, its rate there) where its priority > 0
        skip_zero = self.skip_zero_priority
        for t, job, prio in queue:
            room = left[t]
            jid = job.job_id
            if room == 0 or jid in taken:
                continue
            rate = job.throughputs[index[t]]
            size = job.scale_factor
            if rate <= 0 or (skip_zero and prio <= 0) or size > room:
                continue
            if prios is not None:
                mine = faster.get(jid)
                if mine is None:
                    mine = faster[jid] = [(u, job.throughputs[index[u]]) for u, p in prios[jid].items() if p > 0]
                put_off = False  # while a faster type where it has a positive priority has room
                for u, r in mine:
                    if r > rate and left[u] >= size:
                        put_off = True
                        break
                if put_off:
                    later.append((t, job, prio))
                    continue
            left[t] = room - size
            taken.add(jid)
            chosen[t].append(job)
        return later

    @staticmethod
    def _spare_key(index: dict[str, int], position: dict[str, int], aware: bool, counters: GavelCounters
                   ) -> Callable[[tuple[str, JobView, float]], tuple[bool, float, float, int, int]]:
        """Order of the second pass: entries put off first, then (``aware``: a type-aware policy) the job's
        rate on the type over its best rate, deficit, the type's position in the scan, job id."""
        def key(e: tuple[str, JobView, float]) -> tuple[bool, float, float, int, int]:
            t, job, prio = e
            j = index[t]
            best = max(job.throughputs, default=0.0)
            speed = job.throughputs[j] / best if (aware and best > 0) else 0.0
            return (prio <= 0, -speed, -counters.of(job.job_id)[1][j], position[t], job.job_id)

        return key

    # -- placement --------------------------------------------------------------
    def _gpu_set(self, order: tuple[int, ...]) -> frozenset[int]:
        """``frozenset(order)``, kept while the same tuple comes back (a cluster's ``gpus_by_type``)."""
        got = self._sets.get(id(order))
        if got is None or got[0] is not order:
            if len(self._sets) > 64:
                self._sets.clear()
            got = self._sets[id(order)] = (order, frozenset(order))
        return got[1]

    def _place(self, order: tuple[int, ...], jobs: list[JobView], allocation: Allocation | None) -> list[Lease]:
        """Leases on the type whose up GPUs, server by server (Gavel's strided fill order), are ``order``."""
        if not jobs:
            return []
        type_gpus = self._gpu_set(order)
        ptr, end = 0, len(order)
        assigned: set[int] = set()
        placed: list[tuple[JobView, tuple[int, ...]]] = []  # each job once (the scan chose it once)
        groups: dict[int, list[JobView]] = {}  # scale factor -> its jobs, in the given order
        for job in jobs:
            group = groups.get(job.scale_factor)
            if group is None:
                groups[job.scale_factor] = [job]
            else:
                group.append(job)
        for sf in sorted(groups, reverse=True):
            fresh = []
            for job in groups[sf]:  # keep previous GPUs when all are free
                prev = job.previous_gpus
                if prev and len(prev) == sf and type_gpus.issuperset(prev) and assigned.isdisjoint(prev):
                    placed.append((job, prev))
                    assigned.update(prev)
                elif allocation is not None and job.job_id in allocation:
                    fresh.append(job)
            for job in fresh:
                chunk = order[ptr:ptr + sf]
                if len(chunk) == sf and assigned.isdisjoint(chunk):  # the next sf GPUs are all free
                    ptr += sf
                    assigned.update(chunk)
                    placed.append((job, tuple(sorted(chunk))))
                    continue
                got: list[int] = []
                while len(got) < sf and ptr < end:
                    g = order[ptr]
                    ptr += 1
                    if g not in assigned:
                        got.append(g)
                        assigned.add(g)
                got.sort()
                placed.append((job, tuple(got)))
        # Lease's fields in order: job, type, scale factor, GPUs, max steps, copy, extended, partner id and
        # type, restart_s, owed_s, batch (tests/unit/test_frozen.py)
        return [_lease(job.job_id, job.job_type, job.scale_factor, gpus, job.remaining_steps, 0,
                       gpus == job.previous_gpus, -1, "", job.restart_s, job.owed_s(gpus) if job.restoring else 0.0,
                       0.0)
                for job, gpus in placed]


def _rng_state(rng: random.Random) -> list[object]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]
