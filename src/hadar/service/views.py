"""The JSON the API returns, built from the store (jobs, rounds, events) and the live service
(cluster view, throughput estimates, service clock). Documented in docs/api.md."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from typing import Any

from hadar.service import joblog
from hadar.service.scheduler import Service


def job_view(row: sqlite3.Row, service: Service, now_s: float,
             owner: tuple[str, str] | None = None) -> dict[str, Any]:
    total = float(row["total_steps"])
    done = float(row["done_steps"])
    end = row["finished_s"]
    jct = (end if end is not None else now_s) - float(row["arrival_s"])
    k = int(row["scale_factor"])
    rates = service.rates.get((row["job_type"], k), {})
    return {
        "id": int(row["id"]), "name": row["name"], "job_type": row["job_type"], "gpus": k,
        "status": row["status"], "progress": min(1.0, done / total) if total > 0 else 0.0,
        "done_steps": done, "total_steps": total,
        "submitted_s": float(row["submitted_s"]),
        "arrival_s": float(row["arrival_s"]), "submitted_at": float(row["submitted_at"]),
        "first_start_s": row["first_start_s"], "finished_s": end,
        "jct_s": max(0.0, jct),
        "attained_gpu_s": float(row["attained_gpu_s"]), "restarts": int(row["restarts"]),
        "held_gpus": json.loads(row["gpus"]) if row["status"] == "running" else [],
        "steps_by_type": json.loads(row["steps_by_type"]),
        "throughput": {t: {"measured": m, "estimated": e, "kind": kind} for t, (m, e, kind) in rates.items()},
        "failure": row["failure"], "cancel_requested": bool(row["cancel_requested"]),
        "user": owner[0] if owner else "", "team": owner[1] if owner else "",
    }


def jobs_view(service: Service, status: str | None = None, team: str | None = None) -> dict[str, Any]:
    """Every job (of ``status``; of ``team`` only, where given)."""
    now = service.clock.now()
    rows = service.store.jobs(status=(status,) if status else None)
    owners = service.store.owners()
    if team is not None:
        rows = [r for r in rows if team and owners.get(int(r["id"]), ("", ""))[1] == team]
    return {"now_s": now, "jobs": [job_view(r, service, now, owners.get(int(r["id"]))) for r in rows]}


class JobsCache:
    """The full job list as JSON bytes, rebuilt when the store changed or ``max_age_s`` passed (times
    "so far" move on): status calls stay cheap with many jobs."""

    def __init__(self, service: Service, max_age_s: float = 0.5) -> None:
        self.service, self.max_age_s = service, max_age_s
        self._lock = threading.Lock()
        self._key: tuple[int, float] = (-1, 0.0)
        self._body = b""

    def get(self) -> bytes:
        version, now = self.service.store.version, time.monotonic()
        with self._lock:
            if version == self._key[0] and now - self._key[1] < self.max_age_s:
                return self._body
            self._body = json.dumps(jobs_view(self.service)).encode()
            self._key = (version, now)
            return self._body


def cluster_view(service: Service) -> dict[str, Any]:
    """Nodes, GPU types, and which job holds which GPU now."""
    cluster = service.cluster
    if cluster is None:
        return {"nodes": [], "gpu_types": [], "gpus_up": 0, "gpus": 0}
    holder: dict[int, int] = {}
    for row in service.store.jobs(status=("running",)):
        for g in json.loads(row["gpus"]):
            holder[int(g)] = int(row["id"])
    nodes = []
    for i, node in enumerate(cluster.nodes):
        gpus = [{"id": g, "job": holder.get(g)} for g in cluster.gpus_of_node(i)]
        nodes.append({"name": node.name, "gpu_type": node.gpu_type, "up": node.name not in cluster.down,
                      "gpus": gpus})
    return {"nodes": nodes, "gpu_types": list(cluster.gpu_types), "gpus_up": len(cluster.up_gpus),
            "gpus": cluster.num_gpus}


def timeline_view(service: Service, since: int = 0, limit: int = 500) -> dict[str, Any]:
    """Rounds after ``since``: their span, leases ``[job, copy, gpus, failed]`` and utilization."""
    rounds = [{"id": int(r["id"]), "start_s": float(r["start_s"]), "end_s": float(r["end_s"]),
               "leases": json.loads(r["leases"]), "busy_gpus": int(r["busy_gpus"]), "up_gpus": int(r["up_gpus"])}
              for r in service.store.rounds(since, limit)]
    return {"now_s": service.clock.now(), "rounds": rounds}


def health_view(service: Service) -> dict[str, Any]:
    return {"state": service.state, "error": service.error, "policy": service.run_policy.label,
            "round_s": service.opts.round_s, "now_s": service.clock.now(), "run_id": service.store.run_id}


def log_lines(service: Service, job_id: int, limit: int = 1000) -> list[str]:
    """The last ``limit`` lines of the job's log (``joblog``): its scheduler events, what its leases
    printed, warnings and tracebacks."""
    return joblog.read(service.log_dir, job_id, limit)
