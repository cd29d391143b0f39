"""The API's team calls: who a user token is, usage, the teams' view, the audit log, reloading the
tenants file. A user's call is bounded by their team; the audit log and the reload are an admin's."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from hadar.errors import InputError
from hadar.mechanism.quotas import held
from hadar.service.auth import token_digest
from hadar.service.scheduler import Forbidden, Service, Unauthorized
from hadar.service.tenants import Principal
from hadar.service.usage import gpu_types_by_id, usage, usage_csv


def user_principal(service: Service, token: str) -> Principal:
    """Who a token that is not the state directory's names: a user of the tenants file with a live token."""
    tenants = service.tenants
    if tenants is None or not token:
        raise Unauthorized("wrong token")
    name = service.store.token_user(token_digest(token))
    if name is None:
        raise Unauthorized("wrong or revoked token")
    user = tenants.user(name)
    if user is None:
        raise Unauthorized(f"user {name!r} is not in the tenants file")
    return Principal(user.name, user.team, user.admin)


def parse_since(text: str | None) -> float | None:
    """A date or an ISO time (UTC where no zone is given) as Unix seconds; None for none."""
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise InputError(f"since {text[:40]!r}: want a date (2026-12-01) or an ISO time (2026-12-01T09:30)") from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.timestamp()


def _json(obj: Any) -> Response:
    return Response(json.dumps(obj).encode(), media_type="application/json")


def teams_view(service: Service) -> dict[str, Any]:
    """Per team: weight, quota, GPUs in use and borrowed per type, jobs waiting and running."""
    tenants = service.tenants
    if tenants is None:
        return {"teams": []}
    owners = service.store.owners()
    type_of = tuple(gpu_types_by_id(service.store.meta("cluster")))
    running = service.store.jobs(status=("running",))
    team_of = {j: t for j, (_u, t) in owners.items()}
    from hadar.model.plan import Lease

    leases = [Lease(int(r["id"]), "", 1, tuple(g for g in json.loads(r["gpus"]) if 0 <= g < len(type_of)), 0.0)
              for r in running]
    use = held(leases, type_of, team_of)
    queued = [int(r["id"]) for r in service.store.jobs(status=("queued",))]
    out = []
    for team in tenants.teams:
        in_use = {t: k for (name, t), k in sorted(use.items()) if name == team.name}
        quota = dict(team.quota) if team.quota is not None else None
        borrowed = {t: k - (quota or {}).get(t, 0) for t, k in in_use.items()
                    if quota is not None and k > quota.get(t, 0)}
        out.append({"team": team.name, "weight": team.weight, "borrow": team.borrow, "quota": quota,
                    "in_use": in_use, "borrowed": borrowed,
                    "running": sum(1 for r in running if team_of.get(int(r["id"])) == team.name),
                    "waiting": sum(1 for j in queued if team_of.get(j) == team.name)})
    return {"teams": out}


def team_routes(app: FastAPI, service: Service, auth: Any) -> None:
    @app.get("/api/whoami")
    def whoami(who: Principal = auth) -> Response:
        return _json({"user": who.user, "team": who.team, "admin": who.admin, "tenants": service.tenants is not None})

    @app.get("/api/usage")
    async def usage_route(team: str | None = None, since: str | None = None, format: str = "json",
                          who: Principal = auth) -> Response:
        if not who.admin:
            if team not in (None, who.team):
                raise Forbidden(f"usage of team {team!r}: a user sees their own team's ({who.team!r}) only")
            team = who.team
        if format not in ("json", "csv"):
            raise InputError(f"format {format[:20]!r}: json or csv")
        at = parse_since(since)
        rates = {key: {t: est for t, (_m, est, _k) in per.items()} for key, per in service.rates.items()}
        view = await run_in_threadpool(lambda: usage(service.store, since_at=at, team=team, rates=rates))
        if format == "csv":
            return Response(usage_csv(view), media_type="text/csv; charset=utf-8")
        return _json(view)

    @app.get("/api/teams")
    def teams(who: Principal = auth) -> Response:
        view = teams_view(service)
        if not who.admin:
            view["teams"] = [t for t in view["teams"] if t["team"] == who.team]
        return _json(view)

    @app.get("/api/audit")
    def audit(limit: int = 1000, who: Principal = auth) -> Response:
        _admin(who, "the audit log")
        rows = service.store.audit_log(max(1, min(limit, 10_000)))
        return _json({"entries": [{"seq": int(r["seq"]), "at": float(r["at"]), "user": r["user"],
                                   "action": r["action"], "detail": json.loads(r["detail"])} for r in rows]})

    @app.post("/api/tenants/reload")
    def reload(who: Principal = auth) -> Response:
        _admin(who, "reloading the tenants file")
        new = service.reload_tenants(who.user)
        return _json({"teams": [t.name for t in new.teams], "users": [u.name for u in new.users]})


def _admin(who: Principal, what: str) -> None:
    if not who.admin:
        raise Forbidden(f"{what} is for admins; {who.user!r} is not one")
