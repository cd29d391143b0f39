"""The worker actor: one per GPU; runs whatever lease the executor hands it, through the lease runner.

All the work is ``hadar.job.runner.run_lease`` (which needs no Ray): the actor adds what
must outlive a lease on its GPU: the device, the job state it saved last (a lease of the
same job at that progress resumes from memory, without reading the checkpoint: Gavel's
lease extension), and, for rank 0 of a multi-GPU lease, the rendezvous store, which it
opens on the address the ranks use just before the lease and closes when the lease ends.

The second worker of a GPU (space sharing: ``pool.WorkerPool.actor(gpu, 1)``) is given its
GPU's ``CUDA_VISIBLE_DEVICES`` (``visible``), so that both processes use the same device.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import socket
import time
from dataclasses import replace
from typing import Any

from hadar.job.lease import LeaseOutcome, LeaseSpec
from hadar.job.state import StateCache

log = logging.getLogger(__name__)
STORE_TIMEOUT_S = 60.0


class Worker:
    """Ray actor body (wrapped by ``ray.remote`` in ``pool.py``)."""

    def __init__(self, gpu_id: int, node: str, gpu_type: str, visible: str | None = None) -> None:
        if visible is not None:  # before CUDA starts in this process: the device of the GPU's first worker
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
        import torch

        torch.set_num_threads(1)
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(1)
        self.gpu_id, self.node, self.gpu_type = gpu_id, node, gpu_type
        self.device = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
        self._cache = StateCache()
        self._store: Any = None
        import torch.distributed  # pay for the heavy imports now, while the pool starts

        torch.optim.Adam(torch.nn.Linear(1, 1).parameters())  # its first use imports much of torch (~1 s)

    def info(self) -> dict[str, Any]:
        import ray

        return {"gpu": self.gpu_id, "node": self.node, "gpu_type": self.gpu_type, "pid": os.getpid(),
                "host": socket.gethostname(), "ip": ray.util.get_node_ip_address(), "device": self.device,
                "node_id": ray.get_runtime_context().get_node_id(), "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def open_store(self, host: str) -> tuple[str, int]:
        """Rank 0 of a multi-GPU lease: host the gang's rendezvous store on ``host`` only, until the lease ends."""
        from hadar.job.dist import open_store

        self._store = None  # a store left by a lease that never came: close it
        self._store, port = open_store(host, STORE_TIMEOUT_S)
        return host, port

    def run_lease(self, spec: LeaseSpec, deadline: float | None = None) -> LeaseOutcome:
        """Run the lease; ``deadline`` (wall-clock, ``time.time()``): start no iteration after it, whatever
        ``spec.budget_s`` says (the first iteration always runs), as a Slurm lease does."""
        from hadar.job.runner import run_lease

        started = time.monotonic()
        if deadline is not None:
            spec = replace(spec, budget_s=max(0.0, deadline - time.time()))
        store, self._store = self._store, None
        try:
            out = run_lease(spec, device=self.device, cache=self._cache, store=store if spec.rank == 0 else None,
                            started=started)
        finally:
            if store is not None:  # the lease is over: rank 0's store closes with its last reference
                del store
                gc.collect()  # (the store's Python object sits in a reference cycle: collect it now)
        if not out.ok:
            log.warning("gpu %d: lease of job %d failed: %s", self.gpu_id, spec.job_id, out.error)
        return out

    def crash(self) -> None:
        """Testing aid: die at once, as a worker killed by the OS would."""
        os._exit(1)
