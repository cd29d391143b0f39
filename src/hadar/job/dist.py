"""The process group of a multi-GPU lease: rank 0's rendezvous store, joining and leaving (torch lazily).

Security: rank 0's ``TCPStore`` (torch's rendezvous server, unauthenticated) listens only on
the address the lease's ranks use: loopback when they share a machine, else the node's
address. torch's own ``TCPStore`` binds every interface, so ``open_store`` binds a socket
to that one address and hands torch its descriptor. The store lives only while the lease
runs: rank 0 waits until every other rank has left the group, then closes it. When the
ranks share a machine, gloo and NCCL are told to use the loopback interface as well.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from hadar.job.lease import LeaseSpec

log = logging.getLogger(__name__)
LEAVE_WAIT_S = 5.0  # rank 0 waits at most this long for the other ranks to leave before closing its store


def open_store(host: str, timeout_s: float = 60.0, port: int = 0) -> tuple[Any, int]:
    """Rank 0's rendezvous store, listening on ``host`` only, on ``port`` (0: any free one); returns (store, port)."""
    import torch.distributed as dist

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if port:  # agreed on beforehand (a Slurm gang's): closed connections of an earlier store must not block it
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        port = int(sock.getsockname()[1])
    except OSError:
        sock.close()
        raise
    fd = sock.detach()  # the store owns the descriptor from here on
    try:
        store = dist.TCPStore(host, port, is_master=True, wait_for_workers=False,
                              timeout=timedelta(seconds=timeout_s), master_listen_fd=fd)
    except BaseException:
        os.close(fd)
        raise
    return store, port


def loopback_interface() -> str:
    """The name of the loopback network interface (``lo`` on Linux)."""
    for _, name in socket.if_nameindex():
        if name == "lo" or name.startswith("lo"):
            return name
    return "lo"


@contextmanager
def process_group(spec: LeaseSpec, device: str, store: Any = None) -> Iterator[None]:
    """torch.distributed set up for ``spec``'s gang (NCCL on CUDA, gloo otherwise) for the duration.

    ``store``: rank 0's store, opened by the caller (``open_store``) before the other ranks were
    told its address; without one a rank connects to ``spec.rendezvous``, and rank 0 with neither
    opens a store on loopback (a gang of one, e.g. a check of NCCL)."""
    import torch.distributed as dist

    own = None
    if store is None and spec.rendezvous is None:
        if spec.rank != 0:
            raise ValueError("rank > 0 needs the rendezvous address of rank 0's store")
        own, _ = open_store("127.0.0.1", spec.timeout_s)
        store = own
    elif store is None:  # a rank joining a store someone else hosts
        assert spec.rendezvous is not None
        store = dist.TCPStore(spec.rendezvous[0], spec.rendezvous[1], is_master=False,
                              timeout=timedelta(seconds=spec.timeout_s))
    _preload()
    saved_env = _pin_interfaces(spec)
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl":
        import torch

        torch.cuda.set_device(torch.device(device))
    prefixed = dist.PrefixStore(spec.group or f"job{spec.job_id}/", store)
    try:
        dist.init_process_group(backend, store=prefixed, rank=spec.rank, world_size=spec.world,
                                timeout=timedelta(seconds=spec.timeout_s))
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        _leave(spec, prefixed)
        os.environ.update({k: v for k, v in saved_env.items() if v is not None})
        for k in [k for k, v in saved_env.items() if v is None]:
            os.environ.pop(k, None)
        del prefixed, store, own
        gc.collect()  # the store sits in reference cycles: collect them now, so that a store opened here closes now


#: Whether ``process_group`` imports torch._dynamo first (``_preload``); a process that ends with its one lease
#: (a Slurm lease) sets it False: a store left open dies with the process, and the import costs seconds.
PRELOAD_DYNAMO = True


def _preload() -> None:
    """Import torch._dynamo before the first process group: imported while a group is up (an optimizer's first
    use does), it keeps a reference to that group's store for good (seen with torch 2.13), leaving it open."""
    if not PRELOAD_DYNAMO:
        return
    with contextlib.suppress(ImportError):  # a torch without it leaks nothing either
        import torch._dynamo  # noqa: F401


def _pin_interfaces(spec: LeaseSpec) -> dict[str, str | None]:
    """Point gloo and NCCL at the loopback interface when every rank is here; returns what to restore."""
    keys = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
    saved = {k: os.environ.get(k) for k in keys}
    if spec.local_group:
        lo = loopback_interface()
        for k in keys:
            os.environ[k] = lo
    return saved


def _leave(spec: LeaseSpec, store: Any) -> None:
    """Ranks > 0 say they left; rank 0 waits (briefly) until they all did, so its store outlives their use of it."""
    try:
        if spec.rank != 0:
            store.set(f"left/{spec.rank}", "1")
        elif spec.world > 1:
            store.wait([f"left/{r}" for r in range(1, spec.world)], timedelta(seconds=LEAVE_WAIT_S))
    except Exception as e:
        log.debug("rank %d of job %d: leaving the group: %s", spec.rank, spec.job_id, e)
