"""``hadar serve``: check the options, open the state directory, start the engine and the HTTP server."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from pathlib import Path

from hadar.errors import HadarError, InputError, MissingExtraError
from hadar.model.cluster import Cluster

log = logging.getLogger(__name__)
#: import name -> distribution name, for the modules of the ``service`` extra.
SERVICE_MODULES = {"fastapi": "fastapi", "uvicorn": "uvicorn"}


class ServiceFailure(HadarError):
    """The scheduler stopped on an error (Ray could not start, a node file did not match, ...)."""


def require_service_extra() -> None:
    from importlib.util import find_spec

    missing = [dist for mod, dist in SERVICE_MODULES.items() if find_spec(mod) is None]
    if missing:
        raise MissingExtraError(f"`hadar serve` needs the service extra ({', '.join(missing)} not installed): "
                                "pip install 'hadar[runtime,service]' (in a checkout: pip install -e "
                                "'.[runtime,service]')")


def _cluster(args: argparse.Namespace) -> Cluster | None:
    from hadar.config import parse_cluster
    from hadar.runtime.cli import MAX_EMULATED_GPUS
    from hadar.runtime.demo import demo_cluster

    cluster: Cluster | None
    if args.cluster:
        cluster = parse_cluster(args.cluster, args.gpus_per_node)
    else:
        cluster = None if args.address else demo_cluster()
    if cluster is not None and args.address is None and cluster.num_gpus > MAX_EMULATED_GPUS:
        raise InputError(f"an emulated cluster runs one training process per GPU on this machine; "
                         f"{cluster.num_gpus} GPUs is more than {MAX_EMULATED_GPUS}")
    return cluster


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: any free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.listen(128)
    return sock


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from hadar.build import policy_for_run
    from hadar.cli_simulate import load_profiles
    from hadar.service.api import BodyLimit, make_app
    from hadar.service.auth import ensure_token, lock_state_dir, prepare_state_dir, write_server_file
    from hadar.service.cli import check_serve_args
    from hadar.service.scheduler import ServeOptions, Service
    from hadar.service.specs import MAX_BODY_BYTES
    from hadar.service.store import Store

    check_serve_args(args)
    profiles = load_profiles(args)
    cluster = _cluster(args)
    policy_for_run(args.policy, seed=args.seed, profiles=profiles)  # an unknown policy fails here, not later
    state_dir = prepare_state_dir(args.state)
    lock = lock_state_dir(state_dir)
    try:
        token = ensure_token(state_dir)
        store = Store(state_dir)
        opts = ServeOptions(state_dir=state_dir.resolve(), cluster=cluster, address=args.address, policy=args.policy,
                            profiles=profiles, round_s=args.round_s, seed=args.seed, dilation=args.dilation)
        service = Service(opts, store)
        sock = bind(args.host, args.port)
        config = uvicorn.Config(BodyLimit(make_app(service, token), MAX_BODY_BYTES), log_level="warning",
                                access_log=False, lifespan="off", timeout_graceful_shutdown=5)
        server = uvicorn.Server(config)
        service.start(on_exit=lambda: setattr(server, "should_exit", True))
        url = _url(args.host, sock.getsockname()[1])
        write_server_file(state_dir, url, os.getpid())
        print(f"hadar serve: {url}/ (state {state_dir}; token in {Path(state_dir) / 'token'})", file=sys.stderr,
              flush=True)
        server.run(sockets=[sock])
        service.stop()
        store.close()
    finally:
        lock.close()
    if service.state == "failed":
        raise ServiceFailure(f"the scheduler stopped: {service.error}")
    return 0


def _url(host: str, port: int) -> str:
    shown = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"
