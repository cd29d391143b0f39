"""The client of the service's HTTP API (standard library only: the client needs no extra).

Where the server is: ``--state DIR`` reads its URL (``DIR/server.json``) and
token (``DIR/token``, unless ``HADAR_TOKEN`` holds a user's own); otherwise
``--server URL`` and the token from the ``HADAR_TOKEN`` environment variable. A 4xx answer becomes ``InputError``
with the server's one-line message (the CLI prints it, exit code 2).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from hadar.errors import HadarError, InputError
from hadar.service.auth import read_server_url, read_token
from hadar.service.specs import MAX_FILE_BYTES

TOKEN_ENV = "HADAR_TOKEN"
RETRIES = 3  # a connection that fails is retried (a submission keeps its request id: never stored twice)


class ServerError(HadarError):
    """The server could not be reached, or failed (5xx)."""


class Client:
    def __init__(self, url: str, token: str, timeout_s: float = 30.0) -> None:
        self.url, self.token, self.timeout_s = url.rstrip("/"), token, timeout_s

    @classmethod
    def locate(cls, state: str | Path | None, server: str | None) -> Client:
        if state is not None and server is not None:
            raise InputError("give --state DIR or --server URL, not both")
        if state is not None:  # a user's own token ($HADAR_TOKEN) goes before the state directory's
            token = os.environ.get(TOKEN_ENV, "").strip()
            return cls(read_server_url(Path(state)), token or read_token(Path(state)))
        if server is None:
            raise InputError("where is the server? give --state DIR (the server's state directory) or --server URL "
                             f"with the token in ${TOKEN_ENV}")
        token = os.environ.get(TOKEN_ENV, "").strip()
        if not token:
            raise InputError(f"--server needs the API token in ${TOKEN_ENV} (the file 'token' in the server's "
                             "state directory)")
        if not server.startswith(("http://", "https://")):
            raise InputError(f"--server {server!r}: want a URL like http://127.0.0.1:8470")
        return cls(server, token)

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, raw: bool = False) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        for attempt in range(RETRIES):
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    data = resp.read()
                    return data.decode() if raw else json.loads(data or b"null")
            except urllib.error.HTTPError as e:
                raise self._error(e) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                if attempt + 1 == RETRIES:
                    reason = getattr(e, "reason", e)
                    raise ServerError(f"cannot reach the hadar server at {self.url}: {reason}") from None
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")

    @staticmethod
    def _error(e: urllib.error.HTTPError) -> HadarError:
        try:
            message = json.loads(e.read()).get("error") or e.reason
        except (ValueError, AttributeError):
            message = e.reason
        text = " ".join(str(message).split())  # one line
        if 400 <= e.code < 500:
            return InputError(f"{text} (HTTP {e.code})")
        return ServerError(f"server error: {text} (HTTP {e.code})")

    # ---- the calls ---------------------------------------------------------------------
    def submit_file(self, path: Path) -> dict[str, Any]:
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise InputError(f"job file not found: {path}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"cannot read {path}: {e}") from None
        if len(text) > MAX_FILE_BYTES:
            raise InputError(f"{path}: larger than {MAX_FILE_BYTES} bytes, the most a submission may be")
        body = {"file": {"name": path.name, "text": text}, "base_dir": str(path.resolve().parent),
                "cwd": str(Path.cwd()), "request_id": uuid.uuid4().hex}
        return self.request("POST", "/api/jobs", body)

    def jobs(self) -> dict[str, Any]:
        return self.request("GET", "/api/jobs")

    def job(self, job_id: int) -> dict[str, Any]:
        return self.request("GET", f"/api/jobs/{job_id}")

    def cancel(self, job_id: int) -> dict[str, Any]:
        return self.request("POST", f"/api/jobs/{job_id}/cancel")

    def logs(self, job_id: int) -> dict[str, Any]:
        return self.request("GET", f"/api/jobs/{job_id}/logs")

    def usage(self, team: str | None = None, since: str | None = None, fmt: str = "json") -> Any:
        """GPU-seconds per team, user, job and type (``fmt`` csv: the CSV text)."""
        query = urllib.parse.urlencode({k: v for k, v in (("team", team), ("since", since), ("format", fmt)) if v})
        return self.request("GET", f"/api/usage?{query}", raw=fmt == "csv")

    def reload_tenants(self) -> dict[str, Any]:
        return self.request("POST", "/api/tenants/reload")
