"""`hadar serve`'s HTTP API with no Ray and no engine, for the tests that need only the API.

``python -m tests.service.apiserver --state DIR [-v] [--access-log]`` serves the real app
(``server.http_server``: the same routes, body cap, logging and token redaction as ``hadar serve``) on
127.0.0.1, on a port the OS picks, for a ``Service`` whose engine is never started: submissions are
checked against the demo cluster and stored, and no job ever runs, so nothing a submission names is
imported by anything but the server itself. ``--access-log``: uvicorn's access log too, at the level
``-v`` gives (``hadar serve`` keeps none), to show that the token is redacted from it. ``--tenants FILE``:
teams and users, as ``hadar serve --tenants`` (SIGHUP reloads the file). It writes
``DIR/server.json`` like ``hadar serve`` and stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path

from hadar.cli import configure_logging
from hadar.runtime.demo import demo_cluster
from hadar.service.auth import ensure_token, lock_state_dir, prepare_state_dir, write_server_file
from hadar.service.scheduler import ServeOptions, Service
from hadar.service.server import bind, http_server, on_sighup, run_http
from hadar.service.store import Store


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="apiserver")
    p.add_argument("--state", required=True)
    p.add_argument("-v", "--verbose", action="count", default=0)
    p.add_argument("--access-log", action="store_true")
    p.add_argument("--tenants", type=Path, help="a tenants file, as `hadar serve --tenants` (SIGHUP reloads it)")
    args = p.parse_args(argv)
    configure_logging(args.verbose)
    state_dir = prepare_state_dir(Path(args.state))
    lock = lock_state_dir(state_dir)
    try:
        token = ensure_token(state_dir)
        store = Store(state_dir)
        service = Service(ServeOptions(state_dir=state_dir.resolve(), cluster=demo_cluster(), address=None,
                                       tenants_path=args.tenants), store)
        if args.tenants is not None:
            on_sighup(service)
        sock = bind("127.0.0.1", 0)
        level = {0: "warning", 1: "info"}.get(args.verbose, "debug")
        server = http_server(service, token, log_level=level, access_log=args.access_log)
        write_server_file(state_dir, f"http://127.0.0.1:{sock.getsockname()[1]}", os.getpid())
        no_ray = threading.Event()
        no_ray.set()  # nothing will take the signal handlers: the server keeps its own
        run_http(server, sock, no_ray)
        store.close()
    finally:
        lock.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
