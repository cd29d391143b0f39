"""Quotas per GPU type and borrowing: a stage every round's plan passes through, whatever the policy.

``QuotaPlanner`` wraps the run's planner (``build.wire`` puts it in front when a run has tenants). It
takes the inner planner's plan and, per team (``JobView.entity``; jobs of no listed team, and teams
with no quota, are not limited):

1. Leases within quota: per team, leases the inner planner extended first, then in the plan's order,
   each kept while the team's GPUs of every type it holds stay within its quota.
2. The rest go beyond the quota: dropped for a team that may not borrow; kept (borrowed) for one that
   may, as long as no team owning those GPUs waits for them.
3. Owners waiting: a waiting job (active, not planned) of a team with room left in its quota of a
   type the job can run on (the fastest such type first; jobs by arrival, then id) claims
   ``scale_factor`` GPUs of that type. Where the GPUs free after steps 1-2 are fewer than claimed,
   borrowed leases on that type are reclaimed (the most recently started first), but only those whose
   job has run at least ``min_run_s`` since it last started: the job stops at the round's boundary and
   resumes from its checkpoint when it next runs.
4. The waiting owners' jobs get those GPUs (``placement.assign_gpus``: the GPUs they held before
   first, then as few nodes as possible), in the same order, while GPUs of their type are free.

Ties are broken by the plan's order, the arrival time and the job id, so the stage is deterministic.
The planner keeps when each running job last started (``dump``/``load``: a restart continues it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from hadar.mechanism.events import Event
from hadar.mechanism.placement import assign_gpus
from hadar.mechanism.tenants import Team, Tenants
from hadar.model.frozen import builder
from hadar.model.plan import Lease, RoundPlan, RoundReport
from hadar.model.state import Allocation, JobView, SchedulerState

_build = builder(Lease)


class Planner(Protocol):
    """What the stage needs of the planner it wraps (``engine.RoundPlanner``)."""

    def plan(self, state: SchedulerState, allocation: Allocation | None,
             previous: RoundPlan | None) -> RoundPlan: ...

    def resolved(self, state: SchedulerState, previous: Allocation | None) -> None: ...

    def observe(self, plan: RoundPlan, report: RoundReport) -> None: ...

    def stalled(self) -> None: ...

    def dump(self) -> dict[str, object]: ...

    def load(self, data: dict[str, object]) -> None: ...

    def events(self, plan: RoundPlan, arrival_s: float) -> list[Event]: ...


@dataclass(slots=True)
class _Round:
    """The working state of one plan through the stage."""

    state: SchedulerState
    leases: list[Lease]
    kept: list[bool]
    borrowed: list[bool]
    used: dict[tuple[str, str], int] = field(default_factory=dict)  # (team, type) -> GPUs within quota


class QuotaPlanner:
    """A planner in front of ``inner`` that holds every team to its quota (module docstring)."""

    def __init__(self, inner: Planner, tenants: Tenants, min_run_s: float = 0.0) -> None:
        self.inner, self.tenants, self.min_run_s = inner, tenants, float(min_run_s)
        self.since: dict[int, float] = {}  # running job -> when it last started

    def update(self, tenants: Tenants) -> None:
        """Use ``tenants`` from the next plan on (a reloaded file)."""
        self.tenants = tenants

    # ---- the planner protocol ----------------------------------------------------------
    def plan(self, state: SchedulerState, allocation: Allocation | None, previous: RoundPlan | None) -> RoundPlan:
        plan = self.inner.plan(state, allocation, previous)
        tenants = self.tenants
        if not any(t.quota is not None for t in tenants.teams):
            return plan
        teams = {t.name: t for t in tenants.teams}
        jobs = {j.job_id: j for j in state.jobs}
        rnd = _Round(state, list(plan.leases), [False] * len(plan.leases), [False] * len(plan.leases))
        self._within(rnd, teams, jobs)
        claims = _claims(rnd, teams, jobs)
        self._reclaim(rnd, claims)
        extra = _backfill(rnd, claims)
        leases = tuple(le for le, keep in zip(rnd.leases, rnd.kept, strict=True) if keep) + extra
        return RoundPlan(plan.start_s, plan.duration_s, leases)

    def resolved(self, state: SchedulerState, previous: Allocation | None) -> None:
        self.inner.resolved(state, previous)

    def observe(self, plan: RoundPlan, report: RoundReport) -> None:
        running = {lease.job_id for lease in plan.leases}
        self.since = {j: self.since.get(j, plan.start_s) for j in sorted(running)}
        self.inner.observe(plan, report)

    def stalled(self) -> None:
        self.inner.stalled()

    def events(self, plan: RoundPlan, arrival_s: float) -> list[Event]:
        return self.inner.events(plan, arrival_s)

    def dump(self) -> dict[str, object]:
        return {"inner": self.inner.dump(), "since": {str(j): s for j, s in self.since.items()}}

    def load(self, data: dict[str, object]) -> None:
        if "inner" not in data:  # recorded before the run had tenants: all of it is the inner planner's
            self.inner.load(data)
            return
        inner, since = data["inner"], data.get("since") or {}
        if isinstance(inner, dict) and inner:
            self.inner.load(inner)
        if isinstance(since, dict):
            self.since = {int(j): float(s) for j, s in since.items()}

    # ---- the stage's steps --------------------------------------------------------------
    def _within(self, rnd: _Round, teams: Mapping[str, Team], jobs: Mapping[int, JobView]) -> None:
        """Steps 1 and 2: which leases are within quota (kept), which are borrowed (kept, marked)."""
        type_of = rnd.state.cluster.gpu_type_of
        order = sorted(range(len(rnd.leases)), key=lambda i: (not rnd.leases[i].extended, i))
        for i in order:
            lease = rnd.leases[i]
            job = jobs.get(lease.job_id)
            team = teams.get(job.entity) if job is not None else None
            if team is None or team.quota is None:
                rnd.kept[i] = True
                continue
            need = _per_type(lease.gpus, type_of)
            if all(rnd.used.get((team.name, t), 0) + k <= (team.quota_of(t) or 0) for t, k in need.items()):
                rnd.kept[i] = True
                for t, k in need.items():
                    rnd.used[team.name, t] = rnd.used.get((team.name, t), 0) + k
            elif team.borrow:
                rnd.kept[i] = rnd.borrowed[i] = True

    def _reclaim(self, rnd: _Round, claims: list[tuple[JobView, str]]) -> None:
        """Step 3: borrowed leases on a claimed type give their GPUs back, newest first, past ``min_run_s``."""
        type_of = rnd.state.cluster.gpu_type_of
        now = rnd.state.now_s
        for t in dict.fromkeys(gpu_type for _, gpu_type in claims):
            want = sum(job.scale_factor for job, gt in claims if gt == t)
            short = want - len(_free(rnd, t))
            candidates = [i for i, le in enumerate(rnd.leases) if rnd.kept[i] and rnd.borrowed[i]
                          and any(type_of[g] == t for g in le.gpus)
                          and now - self.since.get(le.job_id, now) >= self.min_run_s - 1e-9]
            candidates.sort(key=lambda i: (-self.since.get(rnd.leases[i].job_id, now), -rnd.leases[i].job_id, -i))
            for i in candidates:
                if short <= 0:
                    break
                rnd.kept[i] = False
                short -= sum(1 for g in rnd.leases[i].gpus if type_of[g] == t)


def _per_type(gpus: Iterable[int], type_of: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for g in gpus:
        out[type_of[g]] = out.get(type_of[g], 0) + 1
    return out


def _busy(rnd: _Round) -> set[int]:
    return {g for le, keep in zip(rnd.leases, rnd.kept, strict=True) if keep for g in le.gpus}


def _free(rnd: _Round, gpu_type: str) -> list[int]:
    busy = _busy(rnd)
    return [g for g in rnd.state.cluster.gpus_by_type.get(gpu_type, ()) if g not in busy]


def _claims(rnd: _Round, teams: Mapping[str, Team], jobs: Mapping[int, JobView]) -> list[tuple[JobView, str]]:
    """Step 3's claims: (waiting job, GPU type) for jobs of teams with room left in their quota."""
    planned = {le.job_id for le, keep in zip(rnd.leases, rnd.kept, strict=True) if keep}
    room: dict[tuple[str, str], int] = {}
    out = []
    for job in sorted(jobs.values(), key=lambda j: (j.arrival_s, j.job_id)):
        team = teams.get(job.entity)
        if job.job_id in planned or team is None or team.quota is None:
            continue
        for t, rate in zip(rnd.state.gpu_types, job.throughputs, strict=True):
            left = (team.quota_of(t) or 0) - rnd.used.get((team.name, t), 0) - room.get((team.name, t), 0)
            if rate > 0 and left >= job.scale_factor and rnd.state.cluster.count(t) >= job.scale_factor:
                room[team.name, t] = room.get((team.name, t), 0) + job.scale_factor
                out.append((job, t))
                break
    return out


def _backfill(rnd: _Round, claims: list[tuple[JobView, str]]) -> tuple[Lease, ...]:
    """Step 4: leases for the claiming jobs on the GPUs free now."""
    busy = _busy(rnd)
    cluster = rnd.state.cluster
    out = []
    for job, t in claims:
        free = [g for g in cluster.gpus_by_type.get(t, ()) if g not in busy]
        if len(free) < job.scale_factor:
            continue
        prev = {job.job_id: job.previous_gpus} if job.previous_gpus else {}
        gpus = assign_gpus(cluster, {job.job_id: {t: job.scale_factor}}, prev, busy=busy)[job.job_id]
        busy.update(gpus)
        out.append(_build(job.job_id, job.job_type, job.scale_factor, gpus, job.remaining_steps, 0,
                          gpus == job.previous_gpus, -1, "", job.restart_s, job.owed_s(gpus), 0.0))
    return tuple(out)


def held(leases: Iterable[Lease], type_of: tuple[str, ...], team_of: Mapping[int, str]) -> dict[tuple[str, str], int]:
    """GPUs each (team, type) holds in ``leases`` (a GPU two leases share counts for each)."""
    out: dict[tuple[str, str], int] = {}
    for lease in leases:
        team = team_of.get(lease.job_id, "")
        for g in lease.gpus:
            out[team, type_of[g]] = out.get((team, type_of[g]), 0) + 1
    return out
