"""Accounting from the recorded rounds: GPU-seconds per team, user, job and GPU type.

Each round of the store's ``rounds`` table holds its leases ``[job, copy, gpus, failed]`` and its span
(service clock); a lease is charged ``(end_s - start_s)`` seconds for each GPU it held, failed or not
(the GPU was taken from everyone else). A GPU's type is the one the cluster in force gives its id (ids
keep their meaning across node changes). A job's team and user are those it was submitted under
(``owners``; "" for a job submitted without teams). ``since_at``: rounds committed at or after this
wall-clock time (Unix seconds) only.

Normalized throughput: where the rates the scheduler uses are given (job type, GPU count -> steps/s per
GPU type), each team's ``normalized_s`` adds, for each lease, its seconds times the job's rate on the
lease's GPU type over the job's proportional rate (its rate at an equal share of the whole cluster:
``sum_t rate_t N_t / N``, Gavel's normalization): one normalized second is what the job makes in a
second on its share of the cluster, so a team's ``normalized_s`` over the period's length is the
normalized throughput it received, summed over its jobs.

On Slurm with accounting (``hadar serve --slurm``), the store's ``slurm_usage`` holds sacct's record of
each ended lease: its elapsed seconds in Slurm (its start included) on each of its GPUs of each type, from
Slurm's typed TRES, not its billing. Where the store holds any, they are the answer (``source``: ``sacct``;
``since_at`` cuts by each lease's end), else the rounds are (``source``: ``rounds``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hadar.service.store import Store

#: (job type, GPU count) -> steps/s per GPU type (the rates the scheduler uses)
Rates = Mapping[tuple[str, int], Mapping[str, float]]


def gpu_types_by_id(cluster_json: str | None) -> list[str]:
    """GPU id -> its type, from the store's ``cluster`` meta (nodes in order, each node's GPUs in a row)."""
    if not cluster_json:
        return []
    out: list[str] = []
    for _name, gpu_type, gpus in json.loads(cluster_json)["nodes"]:
        out.extend([str(gpu_type)] * int(gpus))
    return out


def _add(into: dict[str, float], key: str, seconds: float) -> None:
    into[key] = into.get(key, 0.0) + seconds


def _normalizer(store: Store, type_of: list[str], rates: Rates | None) -> dict[int, tuple[dict[str, float], float]]:
    """Job id -> (its rates per GPU type, its proportional rate), for the jobs with known rates."""
    if rates is None or not type_of:
        return {}
    caps: dict[str, int] = {}
    for t in type_of:
        caps[t] = caps.get(t, 0) + 1
    out = {}
    for row in store.jobs():
        per = dict(rates.get((str(row["job_type"]), int(row["scale_factor"])), {}))
        prop = sum(per.get(t, 0.0) * n for t, n in caps.items()) / len(type_of)
        if prop > 0:
            out[int(row["id"])] = (per, prop)
    return out


class _View:
    """The sums of one usage answer, charged lease by lease."""

    def __init__(self, owners: Mapping[int, tuple[str, str]], team: str | None,
                 norm: Mapping[int, tuple[dict[str, float], float]]) -> None:
        self.owners, self.team, self.norm = owners, team, norm
        self.teams: dict[str, dict[str, Any]] = {}
        self.users: dict[str, dict[str, Any]] = {}
        self.jobs: dict[int, dict[str, Any]] = {}
        self.by_type: dict[str, float] = {}

    def charge(self, job_id: int, seconds: float, gpu_types: list[str]) -> bool:
        """``seconds`` on each GPU of ``gpu_types`` for job ``job_id`` (its normalized seconds on the first's
        type); False if the job is not of the team asked for."""
        user, owner_team = self.owners.get(job_id, ("", ""))
        if self.team is not None and owner_team != self.team:
            return False
        t_rec = self.teams.setdefault(owner_team, {"gpu_s": 0.0, "by_type": {}, "normalized_s": 0.0})
        if job_id in self.norm and gpu_types and gpu_types[0] != "?":
            per, prop = self.norm[job_id]
            t_rec["normalized_s"] += seconds * per.get(gpu_types[0], 0.0) / prop
        u_rec = self.users.setdefault(user, {"team": owner_team, "gpu_s": 0.0, "by_type": {}})
        j_rec = self.jobs.setdefault(job_id, {"id": job_id, "team": owner_team, "user": user, "gpu_s": 0.0,
                                              "by_type": {}})
        for gpu_type in gpu_types:
            for rec in (t_rec, u_rec, j_rec):
                rec["gpu_s"] += seconds
                _add(rec["by_type"], gpu_type, seconds)
            _add(self.by_type, gpu_type, seconds)
        return True


def usage(store: Store, *, since_at: float | None = None, team: str | None = None,
          rates: Rates | None = None) -> dict[str, Any]:
    """GPU-seconds per team, user, job and GPU type (``team``: that team's jobs only); with ``rates``, each
    team's normalized seconds too (module docstring). ``source``: ``sacct`` where the store holds Slurm's
    records of the service's leases (``hadar serve --slurm`` with accounting), else ``rounds``."""
    type_of = gpu_types_by_id(store.meta("cluster"))
    view = _View(store.owners(), team, _normalizer(store, type_of, rates))
    rounds, records = 0, store.slurm_usage(since_at)
    if records:
        for rec in records:  # one record per lease and GPU type: its elapsed seconds on each of its GPUs
            types = [str(rec["gpu_type"])] * int(rec["gpus"])
            rounds += view.charge(int(rec["job_id"]), float(rec["elapsed_s"]), types)
    else:
        for row in store.all_rounds(since_at):
            seconds = max(0.0, float(row["end_s"]) - float(row["start_s"]))
            counted = False
            for job_id, _copy, gpus, *_ in json.loads(row["leases"]):
                types = [type_of[g] if 0 <= g < len(type_of) else "?" for g in gpus]
                counted = view.charge(int(job_id), seconds, types) or counted
            rounds += counted
    count = {"slurm_records": rounds} if records else {"rounds": rounds}
    return {"since_at": since_at, "team": team, "source": "sacct" if records else "rounds", **count,
            "gpu_s": sum(view.by_type.values()), "by_type": view.by_type, "teams": view.teams, "users": view.users,
            "jobs": [view.jobs[j] for j in sorted(view.jobs)]}


def usage_csv(view: Mapping[str, Any]) -> str:
    """``usage``'s answer as CSV: one row per (level, name, GPU type): levels team, user, job."""
    lines = ["level,name,team,gpu_type,gpu_s"]
    for name, rec in sorted(view["teams"].items()):
        lines += [f"team,{name},{name},{t},{s:.3f}" for t, s in sorted(rec["by_type"].items())]
    for name, rec in sorted(view["users"].items()):
        lines += [f"user,{name},{rec['team']},{t},{s:.3f}" for t, s in sorted(rec["by_type"].items())]
    for rec in view["jobs"]:
        lines += [f"job,{rec['id']},{rec['team']},{t},{s:.3f}" for t, s in sorted(rec["by_type"].items())]
    return "\n".join(lines) + "\n"
