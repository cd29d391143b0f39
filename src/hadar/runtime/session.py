"""Starting or joining a Ray cluster, safely, and finding its GPUs.

Security defaults: a Ray cluster runs whatever code reaches it, so
* token authentication stays on: Ray >= 2.59 turns it on for every local
  cluster it starts; we never turn it off, warn when ``RAY_AUTH_MODE`` in
  the environment does, and report the mode in force in the run's summary
  (``ray_auth``). Ray writes the token it generates to ``~/.ray/auth_token``
  with the default umask (0644: readable by every user of the machine), so
  hadar makes that file itself, mode 0600 in a 0700 folder, before Ray
  would (``ensure_private_token``), and tightens one it finds readable by
  others;
* a local cluster is always a new one (``address="local"``): ``ray.init()``
  alone would join whatever cluster a ``ray start`` on this machine left;
* the dashboard is off unless asked for, and then bound to 127.0.0.1
  unless another host is given;
* ``--address`` joins an existing cluster, which must have been started
  with the same token (``RAY_AUTH_TOKEN`` / ``RAY_AUTH_TOKEN_PATH`` or
  ``~/.ray/auth_token`` on every machine and on the driver); the driver
  joins in token mode (``RAY_AUTH_MODE=token`` for the join alone, unless the
  environment says otherwise: ``driver_token_mode``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from hadar.errors import InputError
from hadar.model.cluster import Cluster, Node
from hadar.runtime.emulation import NODE_RESOURCE, TYPE_RESOURCE, local_resources
from hadar.runtime.pool import NodePin, RuntimeFailure

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RaySession:
    """The cluster as the run sees it: nodes, how to pin actors, whether GPU speeds are emulated."""

    cluster: Cluster
    pins: dict[str, NodePin]
    emulated: bool
    address: str | None
    auth: str  # "token" or "disabled"
    owned: bool = True  # this run started (or connected) Ray and shuts it down at the end


def check_auth_env() -> None:
    """Warn when the environment turns Ray's token authentication off."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None and mode.lower() != "token":
        log.warning("RAY_AUTH_MODE=%s: Ray token authentication is OFF; anyone who can reach this "
                    "cluster's ports can run code on it", mode)


def default_token_path() -> str:
    """Where Ray looks for its token when neither RAY_AUTH_TOKEN nor RAY_AUTH_TOKEN_PATH is set."""
    return os.path.join(os.path.expanduser("~"), ".ray", "auth_token")


def ensure_private_token() -> None:
    """Make Ray's default token file ourselves (0600, folder 0700) before Ray makes it world-readable;
    tighten an existing one that others can read. Nothing to do when the token comes from the environment
    or token authentication is off."""
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return
    if os.environ.get("RAY_AUTH_MODE", "token").lower() != "token":
        return
    path = default_token_path()
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode & 0o077 and os.stat(path).st_uid == os.getuid():
            os.chmod(path, 0o600)
            log.warning("%s was readable by other users (mode %o; Ray writes it so): made it 0600", path, mode)
        return
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))  # what `ray get-auth-token --generate` writes: 256 random bits


def auth_in_force() -> str:
    """``token`` or ``disabled``: the mode this driver's Ray uses (``unknown`` on Ray without token auth)."""
    try:
        from ray._raylet import AuthenticationMode, get_authentication_mode
    except ImportError:
        return "unknown"
    return "token" if get_authentication_mode() == AuthenticationMode.TOKEN else "disabled"


def start_local(cluster: Cluster, *, dashboard_host: str | None = None, num_cpus: int | None = None) -> RaySession:
    """A one-machine Ray cluster emulating ``cluster`` (see ``emulation``)."""
    import ray

    pins = {n.name: NodePin(resource=NODE_RESOURCE + n.name) for n in cluster.nodes}
    if ray.is_initialized():  # e.g. a test session's cluster: reuse it if it has the logical nodes
        have = ray.cluster_resources()
        missing = [k for k, v in local_resources(cluster).items() if have.get(k, 0) < v]
        if missing:
            raise RuntimeFailure(f"the running Ray instance lacks the resources {', '.join(missing)}")
        return RaySession(cluster, pins, emulated=True, address=None, auth=auth_in_force(), owned=False)
    check_auth_env()
    ensure_private_token()
    try:
        ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 1, num_gpus=0,
                 resources=local_resources(cluster),
                 include_dashboard=dashboard_host is not None, dashboard_host=dashboard_host or "127.0.0.1",
                 object_store_memory=256 * 1024 ** 2, log_to_driver=False, logging_level=logging.WARNING,
                 configure_logging=True, namespace="hadar")
    except (RuntimeError, ConnectionError, ValueError, ray.exceptions.RayError) as e:
        raise RuntimeFailure(f"could not start a local Ray cluster: {type(e).__name__}: {e}") from None
    return RaySession(cluster, pins, emulated=True, address=None, auth=auth_in_force())


#: HTTP/2's client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS, or the Ray Client
#: server a ``ray://`` address names) answers it with a SETTINGS frame of its own
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(3) + b"\x04" + bytes(5)


def _silent(address: str, timeout_s: float = 5.0) -> str | None:
    """Why ``address`` (``HOST:PORT``, or ``ray://HOST:PORT``) is not a Ray cluster to join, or None: it
    answers as gRPC does, or the address names no port (``auto``). Ray itself retries an address that
    does not answer, or answers as something else, for minutes, and its C++ client writes a warning
    line to standard error per try (file descriptor 2, where no option of Ray's turns it off); this
    check lets ``join`` fail in one line without asking Ray. Under ``RAY_USE_TLS`` only the port is
    checked (Ray's gRPC then speaks TLS first)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        return None
    try:
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)
    except OSError as e:
        return f"nothing answers at {host}:{port} ({e.strerror or type(e).__name__})"
    with conn:
        if os.environ.get("RAY_USE_TLS", "").lower() in ("1", "true"):
            return None
        head = b""
        try:
            conn.sendall(_H2_HELLO)
            while len(head) < 9 and (chunk := conn.recv(9 - len(head))):
                head += chunk
        except OSError:
            pass
    if len(head) == 9 and head[3] == 4 and head[5:] == bytes(4):  # a SETTINGS frame on stream 0
        return None
    return f"what answers at {host}:{port} is not a Ray cluster (it gives no gRPC answer)"


def join(address: str) -> str:
    """Connect this driver to the existing Ray cluster at ``address``, with token authentication unless
    ``RAY_AUTH_MODE=disabled`` accepts the risk; returns the mode in force. ``connect`` and ``hadar compare
    --address`` (``hadar.sweep``) both join through here."""
    check_auth_env()
    silent = _silent(address)
    if silent:
        raise RuntimeFailure(f"could not connect to the Ray cluster at {address}: {silent}")
    import ray

    try:
        with driver_token_mode():
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING, namespace="hadar")
    except (RuntimeError, ConnectionError, ValueError, ray.exceptions.RayError) as e:
        raise RuntimeFailure(f"could not connect to the Ray cluster at {address}: {type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else ''} (with token authentication, the driver "
                             "needs the cluster's token: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)"
                             ) from None
    mode = auth_in_force()
    if mode != "token" and os.environ.get("RAY_AUTH_MODE", "").lower() != "disabled":
        ray.shutdown()
        raise RuntimeFailure(f"the Ray cluster at {address} was joined without token authentication: anyone who "
                             "can reach it can run code on it. Generate a token (`ray get-auth-token --generate`), "
                             "give it to every node and this driver (~/.ray/auth_token or RAY_AUTH_TOKEN), start "
                             "the nodes with RAY_AUTH_MODE=token, or set RAY_AUTH_MODE=disabled here to accept the "
                             "risk")
    return mode


def connect(address: str, cluster: Cluster | None = None) -> RaySession:
    """Join an existing Ray cluster; ``cluster`` (a cluster file) or the nodes' resources say its GPUs."""
    import ray

    mode = join(address)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if cluster is not None:
        return RaySession(cluster, pins_for_file(cluster, nodes), emulated=not _has_gpus(nodes), address=address,
                          auth=mode)
    found, pins = detect_cluster(nodes)
    return RaySession(found, pins, emulated=not _has_gpus(nodes), address=address, auth=mode)


@contextlib.contextmanager
def driver_token_mode() -> Iterator[None]:
    """While a driver joins a cluster: token authentication, unless ``RAY_AUTH_MODE`` says otherwise (Ray's
    driver does not authenticate by default when given an address: it joins unauthenticated and the error then
    blames a missing token). Ray takes the mode from that environment variable only (``ray.init`` has no
    parameter for it and refuses it in ``_system_config``) and reads it into its configuration, so the variable
    is set for the join alone and the configuration reloaded; afterwards the variable is as it was (unset) and
    the driver's connection keeps the mode it was made with. Nothing else of the process's environment changes;
    the variable a user set is never touched."""
    if "RAY_AUTH_MODE" in os.environ:
        yield
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    try:
        _reload_ray_config()
        yield
    finally:
        os.environ.pop("RAY_AUTH_MODE", None)


def _reload_ray_config() -> None:
    try:
        from ray._raylet import Config
    except ImportError:  # a Ray without token authentication
        return
    Config.initialize("")


def shutdown() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


def _has_gpus(nodes: Iterable[Mapping[str, Any]]) -> bool:
    return any(n.get("Resources", {}).get("GPU", 0) > 0 for n in nodes)


def _suffix(resources: Mapping[str, float], prefix: str) -> list[str]:
    return sorted(k[len(prefix):] for k in resources if k.startswith(prefix))


def detect_cluster(nodes: Iterable[Mapping[str, Any]]) -> tuple[Cluster, dict[str, NodePin]]:
    """Nodes and GPU types from ``ray.nodes()`` records.

    A node counts if it has ``GPU`` resources or ``hadar_node:<name>``
    resources (one per logical node). Its GPU type comes from a
    ``hadar_gpu:<type>`` resource, else Ray's ``accelerator_type:<T>``
    (lower-cased). Start real nodes with e.g.
    ``ray start --address=HEAD:6379 --resources='{"hadar_gpu:v100": 4}'``. Nodes are listed by name,
    so GPU ids do not depend on the order Ray reports its nodes in (a restarted service sees the same ids).
    """
    found: list[Node] = []
    pins: dict[str, NodePin] = {}
    for rec in nodes:
        res = rec.get("Resources", {})
        gpus = int(res.get("GPU", 0))
        names = _suffix(res, NODE_RESOURCE)
        if not gpus and not names:
            continue
        types = _suffix(res, TYPE_RESOURCE) or [t.lower() for t in _suffix(res, "accelerator_type:")]
        where = rec.get("NodeManagerAddress", rec.get("NodeID", "?"))
        if len(types) != 1:
            which = "several: " + ", ".join(types) if types else "none given"
            raise InputError(f"Ray node {where}: cannot tell its GPU type ({which}); "
                             "start it with --resources='{\"hadar_gpu:TYPE\": N}' or pass --cluster FILE")
        if names:
            for name in names:
                found.append(Node(name, types[0], int(res[NODE_RESOURCE + name])))
                pins[name] = NodePin(resource=NODE_RESOURCE + name, num_gpus=1.0 if gpus else 0.0)
        else:
            name = f"{types[0]}-{where}"
            found.append(Node(name, types[0], gpus))
            pins[name] = NodePin(node_id=rec.get("NodeID"), num_gpus=1.0)
    found.sort(key=lambda n: n.name)  # GPU ids follow node names, not the order Ray lists nodes in
    if not found:
        raise InputError("the Ray cluster has no GPU nodes: start nodes with GPUs, or with "
                         "--resources='{\"hadar_node:NAME\": N, \"hadar_gpu:TYPE\": N}' to emulate them, "
                         "or give --cluster FILE")
    return Cluster(tuple(found)), pins


def pins_for_file(cluster: Cluster, nodes: Iterable[Mapping[str, Any]]) -> dict[str, NodePin]:
    """A cluster file on an existing Ray cluster: every node name needs a ``hadar_node:<name>`` resource."""
    have: dict[str, float] = {}
    gpus = False
    for rec in nodes:
        res = rec.get("Resources", {})
        gpus = gpus or res.get("GPU", 0) > 0
        for k, v in res.items():
            if k.startswith(NODE_RESOURCE):
                have[k] = have.get(k, 0.0) + v
    missing = [n.name for n in cluster.nodes if have.get(NODE_RESOURCE + n.name, 0) < n.gpus]
    if missing:
        raise InputError(f"the Ray cluster lacks nodes of the cluster file: {', '.join(missing)}; start each "
                         "with --resources='{\"hadar_node:NAME\": GPUS}'")
    return {n.name: NodePin(resource=NODE_RESOURCE + n.name, num_gpus=1.0 if gpus else 0.0) for n in cluster.nodes}
