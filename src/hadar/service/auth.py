"""The state directory's secrets and address: the API token and where the server listens.

``DIR/token``: made at the first start (``secrets.token_urlsafe``), mode
0600, never rewritten; every API request must carry it
(``Authorization: Bearer TOKEN``), compared in constant time.
``DIR/server.json``: the URL of the running server (written at each start),
so ``hadar submit --state DIR`` finds it. ``DIR/lock``: held (``flock``)
while a server runs, so two servers never share one state directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import logging
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from hadar.errors import InputError

TOKEN_FILE = "token"
SERVER_FILE = "server.json"
LOCK_FILE = "lock"


def prepare_state_dir(state_dir: Path) -> Path:
    """Create the state directory (0700) if needed; refuse a path that is a file."""
    state_dir = Path(state_dir)
    if state_dir.exists() and not state_dir.is_dir():
        raise InputError(f"--state {state_dir}: exists and is not a directory")
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    return state_dir


def ensure_token(state_dir: Path) -> str:
    """The state directory's token, made (0600) at the first start."""
    path = Path(state_dir) / TOKEN_FILE
    if not path.exists():
        token = secrets.token_urlsafe(32)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return read_token(state_dir)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
            f.flush()
            os.fsync(f.fileno())
        return token
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        os.chmod(path, 0o600)  # someone loosened it: the token is a password
    return read_token(state_dir)


def read_token(state_dir: Path) -> str:
    path = Path(state_dir) / TOKEN_FILE
    try:
        token = path.read_text().strip()
    except OSError as e:
        raise InputError(f"cannot read the token in {state_dir}: {e.strerror} (has `hadar serve --state "
                         f"{state_dir}` run yet?)") from None
    if not token:
        raise InputError(f"{path} is empty")
    return token


def new_user_token() -> str:
    """A user's API token (``hadar token create``): shown once, stored only as ``token_digest``."""
    return "hdr_" + secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    """What the store keeps of a user's token: its SHA-256 (the token is 256 random bits, so no salt or
    slow hash is needed to keep it from being guessed back)."""
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def token_matches(given: str | None, expected: str) -> bool:
    """Constant-time comparison of a presented token with the real one."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


class RedactToken(logging.Filter):
    """Replace the token in a log record (its message, arguments and traceback) by ``[token]``."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        if self.token in record.getMessage():  # arguments redacted one by one: formatters may read them
            if isinstance(record.msg, str):
                record.msg = self._clean(record.msg)
            if isinstance(record.args, tuple):
                record.args = tuple(self._clean(a) if isinstance(a, str) else a for a in record.args)
            message = record.getMessage()
            if self.token in message:
                record.msg, record.args = self._clean(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text and self.token in record.exc_text:
            record.exc_text = self._clean(record.exc_text)
        return True

    def _clean(self, text: str) -> str:
        return text.replace(self.token, "[token]")


def redact_in_logs(token: str, loggers: Iterable[str]) -> None:
    """Put a ``RedactToken`` on every handler of ``loggers`` (a record is filtered by the handlers it reaches)."""
    for name in loggers:
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, RedactToken) and f.token == token for f in handler.filters):
                handler.addFilter(RedactToken(token))


def write_server_file(state_dir: Path, url: str, pid: int) -> None:
    path = Path(state_dir) / SERVER_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"url": url, "pid": pid}) + "\n")
    os.replace(tmp, path)


def read_server_url(state_dir: Path) -> str:
    path = Path(state_dir) / SERVER_FILE
    try:
        data = json.loads(path.read_text())
        return str(data["url"])
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError(f"no server address in {state_dir} (is `hadar serve --state {state_dir}` running?)") from None


def lock_state_dir(state_dir: Path) -> IO[str]:
    """Hold the state directory's lock for the life of the returned file (one server per directory)."""
    f = open(Path(state_dir) / LOCK_FILE, "a+")  # noqa: SIM115 - held open on purpose
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise InputError(f"another hadar server is using {state_dir}") from None
    return f
