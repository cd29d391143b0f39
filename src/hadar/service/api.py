"""The HTTP API (FastAPI) and the dashboard's files; every ``/api`` call needs the token.

Errors are JSON ``{"error": "<one line naming the problem>"}`` with a 4xx
status: 400 bad input (malformed file, unknown job type, bad numbers, a
schema violation), 401 missing, wrong or revoked token, 403 another team's
job or an admin's call, 404 no such job, 409 the job
already ended, 413 body too large, 422 a job the cluster can never run, 503
the scheduler is not ready. A rejected submission stores nothing.
See docs/api.md.
"""

from __future__ import annotations

import json
import logging
import unicodedata
import uuid
from importlib import resources
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hadar.errors import HadarError, InfeasibleError, InputError
from hadar.service import views
from hadar.service.api_teams import team_routes, user_principal
from hadar.service.auth import token_matches
from hadar.service.scheduler import Conflict, Forbidden, Service, Unauthorized, Unavailable
from hadar.service.specs import MAX_FILE_BYTES, MAX_JOBS_PER_SUBMISSION, check_request_id, text_problem
from hadar.service.tenants import OPERATOR, Principal

log = logging.getLogger(__name__)
_ASSETS = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
           "style.css": "text/css; charset=utf-8"}
MAX_BODY_DEPTH = 32  # JSON nested deeper than this is refused (a job file's fields need 4 levels)
MAX_MESSAGE_CHARS = 500  # an error message is cut there (it may quote the input)
MAX_ID = (1 << 63) - 1  # job and round ids are SQLite integers
#: The dashboard loads nothing from elsewhere, and no other site may frame it.
_CSP = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'none'"


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class JobFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=255, description="file name; its suffix gives the format")
    text: str = Field(max_length=MAX_FILE_BYTES)


class SubmitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file: JobFile | None = None
    jobs: list[dict[str, Any]] | None = Field(default=None, min_length=1, max_length=MAX_JOBS_PER_SUBMISSION)
    base_dir: str | None = Field(default=None, max_length=4096)
    cwd: str | None = Field(default=None, max_length=4096)
    request_id: str | None = Field(default=None, max_length=64)


class _TooLarge(Exception):
    pass


class BodyLimit:
    """Refuse (413) any request whose body is larger than ``limit`` bytes, declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _error(413, f"request body larger than {self.limit} bytes")(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await _error(413, f"request body larger than {self.limit} bytes")(scope, receive, send)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": one_line(message)}, status_code=status)


def one_line(message: str) -> str:
    """``message`` on one line: control and format characters escaped (``\\u202e``), whitespace runs one
    space, cut at ``MAX_MESSAGE_CHARS``."""
    text = "".join(c if unicodedata.category(c)[0] != "C" and c not in "\u2028\u2029" else
                   " " if c in "\t\n\r" else f"\\u{ord(c):04x}" for c in message[:4 * MAX_MESSAGE_CHARS])
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS - 3] + "..."


def _json(obj: Any, status: int = 200) -> Response:
    """JSON without FastAPI's generic encoder (our views are plain JSON types; it costs 16 ms for 200 jobs)."""
    return Response(json.dumps(obj).encode(), status_code=status, media_type="application/json")


def make_app(service: Service, token: str) -> FastAPI:
    app = FastAPI(title="hadar", docs_url=None, redoc_url=None, openapi_url=None)

    async def authorized(request: Request) -> Principal:  # async: no thread hop for a header check
        header = request.headers.get("authorization", "")
        if not header:
            raise ApiError(401, "missing token: send 'Authorization: Bearer TOKEN' (the token is in the "
                                "server's state directory, file 'token')")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer":
            raise ApiError(401, "wrong token")
        if token_matches(given.strip(), token):
            return OPERATOR
        return user_principal(service, given.strip())

    _errors(app)
    _pages(app)
    who = Depends(authorized)
    _job_routes(app, service, who)
    _view_routes(app, service, [who])
    team_routes(app, service, who)
    return app


def _job_routes(app: FastAPI, service: Service, auth: Any) -> None:
    """Submit, list, show, cancel, logs (a user: their team's jobs only; 403 on another team's)."""
    jobs_cache = views.JobsCache(service)

    @app.post("/api/jobs", status_code=201)
    async def submit(request: Request, who: Principal = auth) -> Response:
        body = await request.body()
        req = _parse_body(body)
        text, name = _job_text(req)
        rid = check_request_id(req.request_id) if req.request_id else uuid.uuid4().hex
        sub = await run_in_threadpool(service.submit, text, name, req.base_dir, req.cwd, rid, who)
        return _json({"ids": list(sub.ids), "duplicate": sub.duplicate, "request_id": rid}, 201)

    @app.get("/api/jobs")
    async def jobs(status: str | None = None, who: Principal = auth) -> Response:
        if status is not None and status not in ("queued", "running", "done", "failed", "cancelled"):
            raise ApiError(400, f"unknown status {status!r}: queued, running, done, failed or cancelled")
        if not who.admin:
            return await run_in_threadpool(lambda: _json(views.jobs_view(service, status, team=who.team)))
        if status is None:  # the common call: served from the cache on the event loop (a rebuild is ~4 ms)
            return Response(jobs_cache.get(), media_type="application/json")
        return await run_in_threadpool(lambda: _json(views.jobs_view(service, status)))

    @app.get("/api/jobs/{job_id}")
    def job(job_id: int, who: Principal = auth) -> Response:
        row = service.store.job(_known_id(job_id))
        if row is None:
            raise ApiError(404, f"no job {job_id}")
        service.check_access(job_id, who)
        return _json(views.job_view(row, service, service.clock.now(), service.store.owner(job_id)))

    @app.post("/api/jobs/{job_id}/cancel")
    def cancel(job_id: int, who: Principal = auth) -> Response:
        try:
            return _json({"id": job_id, "status": service.cancel(_known_id(job_id), who)})
        except KeyError:
            raise ApiError(404, f"no job {job_id}") from None

    @app.get("/api/jobs/{job_id}/logs")
    def logs(job_id: int, who: Principal = auth) -> Response:
        if service.store.job(_known_id(job_id)) is None:
            raise ApiError(404, f"no job {job_id}")
        service.check_access(job_id, who)
        return _json({"id": job_id, "lines": views.log_lines(service, job_id)})


def _known_id(job_id: int) -> int:
    """``job_id`` if it can be a job's id (a positive SQLite integer), else 404 at once."""
    if not 0 < job_id <= MAX_ID:
        raise ApiError(404, f"no job {job_id}")
    return job_id


def _view_routes(app: FastAPI, service: Service, auth: list[Any]) -> None:
    """The cluster, the rounds, the service's health."""

    @app.get("/api/cluster", dependencies=auth)
    def cluster() -> Response:
        return _json(views.cluster_view(service))

    @app.get("/api/timeline", dependencies=auth)
    def timeline(since: int = 0, limit: int = 500) -> Response:
        return _json(views.timeline_view(service, min(max(0, since), MAX_ID), max(1, min(limit, 5000))))

    @app.get("/api/health", dependencies=auth)
    def health() -> Response:
        return _json(views.health_view(service))


def _parse_body(body: bytes) -> SubmitRequest:
    try:
        data = json.loads(body, parse_constant=_not_json)
    except RecursionError:
        raise ApiError(400, f"request body nested more than {MAX_BODY_DEPTH} levels deep") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"request body is not JSON ({e})") from None
    _check_tree(data)
    try:
        req = SubmitRequest.model_validate(data)
    except ValidationError as e:
        raise ApiError(400, _first_problem(e.errors())) from None
    if req.file is not None and (problem := text_problem(req.file.name)):
        raise ApiError(400, f"file.name {problem}")
    return req


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def _check_tree(data: Any) -> None:
    """Refuse JSON nested deeper than ``MAX_BODY_DEPTH`` and strings no UTF-8 text can hold (lone surrogates,
    which JSON's \\u escapes can spell)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_BODY_DEPTH:
            raise ApiError(400, f"request body nested more than {MAX_BODY_DEPTH} levels deep")
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            stack.append((key, depth + 1))
            stack.append((item, depth + 1))
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ApiError(400, f"request body: a string holds a lone surrogate (U+{ord(e.object[e.start]):04X}), "
                                    "which no UTF-8 text can") from None


def _job_text(req: SubmitRequest) -> tuple[str, str]:
    """The job file to parse: the one sent, or the ``jobs`` list as a JSON job file."""
    if (req.file is None) == (req.jobs is None):
        raise ApiError(400, "send exactly one of 'file' ({name, text}) or 'jobs' (a list of jobs)")
    if req.file is not None:
        return req.file.text, req.file.name
    return json.dumps({"jobs": req.jobs}), "request.json"


def _first_problem(errors: Any) -> str:
    first = errors[0] if errors else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "request"
    return f"{where}: {first.get('msg', 'invalid')}"


def _errors(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.message)

    @app.exception_handler(HadarError)
    async def hadar_error(request: Request, exc: HadarError) -> JSONResponse:
        status = (422 if isinstance(exc, InfeasibleError) else 409 if isinstance(exc, Conflict)
                  else 403 if isinstance(exc, Forbidden) else 401 if isinstance(exc, Unauthorized)
                  else 503 if isinstance(exc, Unavailable) else 400 if isinstance(exc, InputError) else 500)
        return _error(status, str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(400, _first_problem(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def bug(request: Request, exc: Exception) -> JSONResponse:  # logged with its traceback by the server
        return _error(500, f"internal error ({type(exc).__name__}); the server's log has the details")


def _pages(app: FastAPI) -> None:
    """The dashboard: static files shipped in the package (no token: they hold no data)."""

    def asset(name: str) -> Response:
        body = resources.files("hadar.service").joinpath("dashboard", name).read_bytes()
        return Response(body, media_type=_ASSETS[name], headers={"Content-Security-Policy": _CSP,
                                                                 "X-Content-Type-Options": "nosniff",
                                                                 "Cache-Control": "no-cache"})

    @app.get("/")
    def index() -> Response:
        return asset("index.html")

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        if name not in _ASSETS or name == "index.html":
            raise ApiError(404, f"no file {name!r}")
        return asset(name)
