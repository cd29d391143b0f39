"""Joining a Ray cluster that is not there: one line, at once, without Ray's retry warnings."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

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


def test_what_is_written_while_joining_is_held_and_written_out_only_if_the_join_works():
    code = """
import os, sys
from hadar.runtime import session
for passed in (False, True):
    try:
        with session._held_stderr():
            os.write(2, f"retry warning, passed={passed}\\n".encode())
            if not passed:
                raise ConnectionError("no cluster")
    except ConnectionError:
        pass
print("done", flush=True)
"""
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0 and done.stdout == "done\n"
    assert done.stderr == "retry warning, passed=True\n"
