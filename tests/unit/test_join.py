"""Joining a Ray cluster that is not there: one line, at once, without Ray's retry warnings."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from hadar.runtime import session
from hadar.runtime.pool import RuntimeFailure


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.runtime
def test_an_address_where_nothing_listens_fails_before_ray_retries_it(monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    port = closed_port()
    with pytest.raises(RuntimeFailure) as e:
        session.join(f"127.0.0.1:{port}")
    assert str(e.value) == (f"could not connect to the Ray cluster at 127.0.0.1:{port}: nothing answers at "
                            f"127.0.0.1:{port} (Connection refused)")
    assert session._silent(f"ray://127.0.0.1:{port}") is not None
    assert session._silent("auto") is None  # no port: Ray finds the cluster itself


@contextlib.contextmanager
def answering(reply: bytes | None) -> Iterator[int]:
    """A local port whose server reads what a client sends and answers ``reply`` (None: never answers)."""
    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(64)
            if reply is not None:
                conn.sendall(reply)
            stop.wait(10)

    worker = threading.Thread(target=serve, daemon=True)
    worker.start()
    try:
        yield int(srv.getsockname()[1])
    finally:
        stop.set()
        worker.join(10)
        srv.close()


SETTINGS = bytes.fromhex("000006040000000000") + bytes.fromhex("000300000064")  # a gRPC server's first frame


def test_an_address_that_answers_as_something_else_fails_in_one_line_without_asking_ray(monkeypatch):
    """What answers but is not gRPC (a web server, say) fails at once: Ray would retry it for minutes,
    its C++ client writing a warning per try to file descriptor 2."""
    import ray

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    monkeypatch.setattr(ray, "init", lambda **kw: pytest.fail("Ray was asked"))
    with answering(b"HTTP/1.1 400 Bad Request\r\n\r\n") as port, pytest.raises(RuntimeFailure) as e:
        session.join(f"127.0.0.1:{port}")
    assert str(e.value) == (f"could not connect to the Ray cluster at 127.0.0.1:{port}: what answers at "
                            f"127.0.0.1:{port} is not a Ray cluster (it gives no gRPC answer)")
    with answering(None) as port:
        assert session._silent(f"127.0.0.1:{port}", timeout_s=0.2) is not None  # answers nothing
    with answering(SETTINGS) as port:
        assert session._silent(f"ray://127.0.0.1:{port}") is None  # HTTP/2's SETTINGS: a gRPC server
    monkeypatch.setenv("RAY_USE_TLS", "1")  # Ray's gRPC speaks TLS first: only the port is checked
    with answering(None) as port:
        assert session._silent(f"127.0.0.1:{port}", timeout_s=0.2) is None


def test_the_driver_token_mode_is_set_for_the_join_alone(monkeypatch):
    """``RAY_AUTH_MODE=token`` while the driver joins (Ray's configuration reloaded with it), then the environment
    as it was, even when the join fails; a mode the user set is left alone."""
    import os

    reloads: list[str | None] = []
    monkeypatch.setattr(session, "_reload_ray_config", lambda: reloads.append(os.environ.get("RAY_AUTH_MODE")))
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    with session.driver_token_mode():
        assert os.environ["RAY_AUTH_MODE"] == "token"
    assert "RAY_AUTH_MODE" not in os.environ and reloads == ["token"]
    with pytest.raises(RuntimeError, match="join failed"), session.driver_token_mode():
        raise RuntimeError("join failed")
    assert "RAY_AUTH_MODE" not in os.environ
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with session.driver_token_mode():
        assert os.environ["RAY_AUTH_MODE"] == "disabled"
    assert os.environ["RAY_AUTH_MODE"] == "disabled" and reloads == ["token", "token"]


#: what the test below runs in a process of its own: Ray's process-wide configuration is reloaded, which a
#: test process holding a live Ray session (``ray_session``, another test's) must not see
_KEEPS_TOKEN = """
import os
from ray._raylet import AuthenticationMode, get_authentication_mode
from hadar.runtime import session
os.environ.pop("RAY_AUTH_MODE", None)
with session.driver_token_mode():
    pass
assert "RAY_AUTH_MODE" not in os.environ
assert get_authentication_mode() == AuthenticationMode.TOKEN and session.auth_in_force() == "token"
print("ok")
"""


@pytest.mark.runtime
def test_rays_configuration_keeps_the_token_mode_after_the_join_scope():
    """The driver's Ray keeps the mode it joined with (its configuration, read inside the scope), while the
    process's environment is back to what it was."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _KEEPS_TOKEN], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
