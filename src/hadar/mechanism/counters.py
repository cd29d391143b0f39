"""Gavel's round-mechanism counters, kept by the planner that reads them (``GavelRoundPlanner``).

Per active job and GPU type: the seconds it ran on the type since the last reset, seeded with half a
round (``received``), and its deficit, summed over past resets: the time its allocation gave it on
the type minus the time it ran there (``deficit``). At every re-solve the time received is folded
into the deficit and the counters are seeded again; Gavel's stall breaker (every job has arrived
and a round ran nothing) sets the last reset back to 0, so the next fold counts the whole run.

These counters are the planner's state, not the ledger's: the ledger, the snapshot and every other
policy and planner know nothing of them. They come back through the round's report
(``observe``) like everything else the planner learns.
"""

from __future__ import annotations

from typing import Any

from hadar.model.cluster import Cluster
from hadar.model.plan import RoundPlan, RoundReport
from hadar.model.state import Allocation, SchedulerState


class GavelCounters:
    """Time received per (job, type) since the last reset and deficits over past resets."""

    __slots__ = ("_cluster", "_type_sets", "deficit", "last_reset_s", "received", "seed", "types")

    def __init__(self) -> None:
        self.received: dict[int, list[float]] = {}  # job -> per type in ``types`` order (seed included)
        self.deficit: dict[int, list[float]] = {}
        self.types: tuple[str, ...] = ()
        self.last_reset_s = 0.0
        self.seed = 0.0
        self._cluster: Cluster | None = None  # the cluster the last plan was made on (a GPU's type)
        self._type_sets: dict[tuple[int, ...], tuple[int, ...]] = {}  # GPU ids -> their type indices, sorted

    def sync(self, state: SchedulerState) -> None:
        """Follow the state's types (a node change may add or drop one: counters follow types by name,
        a new type starts at the seed and no deficit) and its cluster."""
        self.seed = state.round_s / 2.0
        if state.cluster is not self._cluster:
            self._cluster = state.cluster
            self._type_sets.clear()
        types = state.gpu_types
        if types == self.types:
            return
        old, seed = self.types, self.seed
        for jid, got in self.received.items():
            by_name = dict(zip(old, got, strict=True))
            self.received[jid] = [by_name.get(t, seed) for t in types]
        for jid, owed in self.deficit.items():
            by_name = dict(zip(old, owed, strict=True))
            self.deficit[jid] = [by_name.get(t, 0.0) for t in types]
        self.types = types

    def of(self, job_id: int) -> tuple[list[float], list[float]]:
        """The job's (received, deficit) per type in ``types`` order (a job never counted: the seeds)."""
        got = self.received.get(job_id)
        owed = self.deficit.get(job_id)
        n = len(self.types)
        return (got if got is not None else [self.seed] * n, owed if owed is not None else [0.0] * n)

    def reset(self, state: SchedulerState, allocation: Allocation | None) -> None:
        """A re-solve at ``state.now_s``: fold the time each active job received since the last reset into
        its deficit against ``allocation`` (the one in force until now; None: nothing was due), reseed."""
        self.sync(state)
        elapsed, seed, n = state.now_s - self.last_reset_s, self.seed, len(self.types)
        cols = [allocation.gpu_types.index(t) if t in allocation.gpu_types else -1 for t in self.types] \
            if allocation is not None else []
        none = [0.0 * elapsed] * n if allocation is not None else [0.0] * n
        received: dict[int, list[float]] = {}
        deficit: dict[int, list[float]] = {}
        for job in state.jobs:
            jid = job.job_id
            got, owed = self.of(jid)
            owed = list(owed)
            row = allocation.row(jid) if allocation is not None else None
            should = none if row is None else [row[c] * elapsed if c >= 0 else none[0] for c in cols]
            for j in range(n):
                owed[j] = owed[j] + (should[j] - (got[j] - seed))
            deficit[jid] = owed
            received[jid] = [seed] * n
        self.received, self.deficit = received, deficit  # ended jobs leave with the reset
        self.last_reset_s = state.now_s

    def stalled(self) -> None:
        """Gavel's stall breaker: the next fold counts the whole run."""
        self.last_reset_s = 0.0

    def observe(self, plan: RoundPlan, report: RoundReport) -> None:
        """Each lease that did not fail ran on its GPUs' types from the round's start to its end."""
        cluster = self._cluster
        if cluster is None:
            return
        start, n, sets = report.start_s, len(self.types), self._type_sets
        for res in report.results:
            if res.failed:
                continue
            busy = res.end_s - start
            busy = busy if busy > 0.0 else 0.0
            used = sets.get(res.gpus)
            if used is None:
                if len(sets) > 100_000:
                    sets.clear()
                index = {t: j for j, t in enumerate(self.types)}
                used = sets[res.gpus] = tuple(sorted({index[cluster.gpu_type_of[g]] for g in res.gpus}))
            got = self.received.get(res.job_id)
            if got is None:
                got = self.received[res.job_id] = [self.seed] * n
            for j in used:
                got[j] += busy

    # ---- persistence (a restarted service continues with the same counters) -------------------
    def dump(self) -> dict[str, Any]:
        return {"types": list(self.types), "last_reset_s": self.last_reset_s, "seed": self.seed,
                "received": {str(k): v for k, v in self.received.items()},
                "deficit": {str(k): v for k, v in self.deficit.items()}}

    def load(self, data: dict[str, Any]) -> None:
        self.types = tuple(str(t) for t in data["types"])
        self.last_reset_s, self.seed = float(data["last_reset_s"]), float(data["seed"])
        self.received = {int(k): [float(x) for x in v] for k, v in data["received"].items()}
        self.deficit = {int(k): [float(x) for x in v] for k, v in data["deficit"].items()}
