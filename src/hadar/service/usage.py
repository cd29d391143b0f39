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


def usage(store: Store, *, since_at: float | None = None, team: str | None = None,
          rates: Rates | None = None) -> dict[str, Any]:
    """GPU-seconds per team, user, job and GPU type (``team``: that team's jobs only); with ``rates``, each
    team's normalized seconds too (module docstring)."""
    type_of = gpu_types_by_id(store.meta("cluster"))
    norm = _normalizer(store, type_of, rates)
    owners: Mapping[int, tuple[str, str]] = store.owners()
    teams: dict[str, dict[str, Any]] = {}
    users: dict[str, dict[str, Any]] = {}
    jobs: dict[int, dict[str, Any]] = {}
    by_type: dict[str, float] = {}
    rounds = 0
    for row in store.all_rounds(since_at):
        seconds = max(0.0, float(row["end_s"]) - float(row["start_s"]))
        counted = False
        for job_id, _copy, gpus, *_ in json.loads(row["leases"]):
            user, owner_team = owners.get(int(job_id), ("", ""))
            if team is not None and owner_team != team:
                continue
            counted = True
            t_rec = teams.setdefault(owner_team, {"gpu_s": 0.0, "by_type": {}, "normalized_s": 0.0})
            if int(job_id) in norm and gpus and 0 <= gpus[0] < len(type_of):
                per, prop = norm[int(job_id)]
                t_rec["normalized_s"] += seconds * per.get(type_of[gpus[0]], 0.0) / prop
            u_rec = users.setdefault(user, {"team": owner_team, "gpu_s": 0.0, "by_type": {}})
            j_rec = jobs.setdefault(int(job_id), {"id": int(job_id), "team": owner_team, "user": user,
                                                  "gpu_s": 0.0, "by_type": {}})
            for g in gpus:
                gpu_type = type_of[g] if 0 <= g < len(type_of) else "?"
                for rec in (t_rec, u_rec, j_rec):
                    rec["gpu_s"] += seconds
                    _add(rec["by_type"], gpu_type, seconds)
                _add(by_type, gpu_type, seconds)
        rounds += counted
    return {"since_at": since_at, "team": team, "rounds": rounds, "gpu_s": sum(by_type.values()), "by_type": by_type,
            "teams": teams, "users": users, "jobs": [jobs[j] for j in sorted(jobs)]}


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
