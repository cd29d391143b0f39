"""``hadar serve``: check the options, open the state directory, start the engine and the HTTP server."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

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


def _cluster(config: Any) -> Cluster | None:
    """The cluster ``hadar serve`` runs on: the file or shorthand given, the demo one on a local Ray, or None
    (what the Ray nodes or sinfo say, once the engine starts)."""
    from hadar.config import parse_cluster
    from hadar.runtime.cli import MAX_EMULATED_GPUS
    from hadar.runtime.demo import demo_cluster

    run, train = config.run, config.training
    cluster: Cluster | None
    if train.slurm:
        return None  # what sinfo says, once the engine starts
    if run.cluster:
        cluster = parse_cluster(run.cluster, run.gpus_per_node)
    else:
        cluster = None if train.address else demo_cluster()
    if cluster is not None and train.address is None and cluster.num_gpus > MAX_EMULATED_GPUS:
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


def http_server(service: Any, token: str, log_level: str = "warning", access_log: bool = False) -> Any:
    """The HTTP server (``uvicorn.Server``) of the API on ``service``: bodies capped (413), no access log
    (``hadar serve``), and ``token`` redacted from every line the server's log handlers write, the access
    log's included where one is kept."""
    import uvicorn

    from hadar.service.api import BodyLimit, make_app
    from hadar.service.auth import redact_in_logs
    from hadar.service.specs import MAX_BODY_BYTES

    config = uvicorn.Config(BodyLimit(make_app(service, token), MAX_BODY_BYTES), log_level=log_level,
                            access_log=access_log, lifespan="off", timeout_graceful_shutdown=5)
    redact_in_logs(token, ("", "uvicorn", "uvicorn.error", "uvicorn.access"))  # after uvicorn set its handlers
    return uvicorn.Server(config)


def serve(args: argparse.Namespace) -> int:
    from hadar.build import policy_for_run
    from hadar.cli_simulate import load_fork_efficiency, load_profiles
    from hadar.model.fork_efficiency import IDEAL
    from hadar.service.auth import ensure_token, lock_state_dir, prepare_state_dir, write_server_file
    from hadar.service.cli import serve_config
    from hadar.service.scheduler import ServeOptions, Service
    from hadar.service.store import Store

    config = serve_config(args)  # flags and --config as the one RunConfig, checked
    run, train = config.run, config.training
    assert train is not None and train.state is not None  # serve_config made it; --state is required
    profiles = load_profiles(args)
    efficiency = load_fork_efficiency(args)  # a bad file: one line, exit 2, before Ray starts
    cluster = _cluster(config)
    policy_for_run(config.policy.name, seed=run.seed, profiles=profiles)  # an unknown policy fails here, not later
    if run.tenants is not None:  # a bad tenants file: one line, exit 2, nothing made
        from hadar.service.tenants import load_tenants

        load_tenants(run.tenants, None if cluster is None else set(cluster.listed_types))
    state_dir = prepare_state_dir(train.state)
    lock = lock_state_dir(state_dir)
    try:
        token = ensure_token(state_dir)
        store = Store(state_dir)
        slurm = _slurm(config, state_dir, store.run_id)
        opts = ServeOptions(state_dir=state_dir.resolve(), cluster=cluster, address=train.address,
                            policy=config.policy.name, profiles=profiles, round_s=run.round_s, seed=run.seed,
                            dilation=train.dilation, fork_efficiency=efficiency or IDEAL,
                            tenants_path=None if run.tenants is None else run.tenants.resolve(),
                            min_run_s=run.min_run_s, slurm=slurm)
        service = Service(opts, store)
        sock = bind(train.host, train.port)
        server = http_server(service, token)
        service.start(on_exit=lambda: setattr(server, "should_exit", True))
        url = _url(train.host, sock.getsockname()[1])
        write_server_file(state_dir, url, os.getpid())
        print(f"hadar serve: {url}/ (state {state_dir}; token in {Path(state_dir) / 'token'})", file=sys.stderr,
              flush=True)
        if run.tenants is not None:
            on_sighup(service)
        run_http(server, sock, service.ray_started)
        service.stop()
        store.close()
    finally:
        lock.close()
    if service.state == "failed":
        raise ServiceFailure(f"the scheduler stopped: {service.error}")
    return 0


def _slurm(config: Any, state_dir: Path, run_id: str) -> Any:
    """With ``--slurm``: its options, once what a killed server of this state left on Slurm is adopted."""
    if not config.training.slurm:
        return None
    from hadar.slurm.serve import SlurmServe, adopt

    opts = SlurmServe(partition=config.training.partition)
    adopt(opts, state_dir.resolve(), run_id)
    return opts


def on_sighup(service: Any) -> None:
    """SIGHUP reloads the tenants file: in force from the next round if it passes every check, else the
    old one stays (the log says why, on one line)."""

    def reload(sig: int, frame: FrameType | None) -> None:
        try:
            new = service.reload_tenants("SIGHUP")
            log.warning("tenants file reloaded: %d teams, %d users", len(new.teams), len(new.users))
        except HadarError as e:
            log.error("tenants file not reloaded, the old one stays: %s", e)

    signal.signal(signal.SIGHUP, reload)


def run_http(server: Any, sock: socket.socket, ray_started: threading.Event) -> None:
    """Serve until SIGINT/SIGTERM, then return (the caller stops the scheduler: the round in flight ends,
    Ray shuts down). Ray's core installs a handler of its own for SIGTERM when it starts (it prints a
    stack and kills the process), so once Ray is up the server's handlers are put back. After the server
    stops, a second signal exits at once."""
    count = [0]

    def later(sig: int, frame: FrameType | None) -> None:
        count[0] += 1
        if count[0] >= 2:
            os._exit(128 + sig)

    for sig in (signal.SIGINT, signal.SIGTERM):  # what uvicorn restores and re-raises when it stops
        signal.signal(sig, later)

    async def main() -> None:
        async def reclaim() -> None:
            while not ray_started.is_set():
                await asyncio.sleep(0.2)
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, server.handle_exit)

        task = asyncio.ensure_future(reclaim())
        try:
            await server.serve(sockets=[sock])
        finally:
            task.cancel()

    asyncio.run(main())


def _url(host: str, port: int) -> str:
    shown = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"
