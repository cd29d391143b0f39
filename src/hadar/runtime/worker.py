"""The worker actor: one per GPU; trains whatever lease the executor hands it.

A worker keeps the training state of the job it ran last in memory. A lease
whose job it already holds at the expected progress continues without a
restore (Gavel's lease extension); otherwise it restores the job from its
checkpoint (or builds it fresh). At the end of every lease, rank 0 writes
the job's checkpoint atomically; only then is the lease's progress reported,
so the scheduler never counts work that a crash could lose.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from hadar.runtime import checkpoint, workloads

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaseSpec:
    """What one worker (rank ``rank`` of ``world``) must do this round."""

    job_id: int
    job_type: str
    seed: int
    rank: int
    world: int
    max_iterations: int  # stop after this many synchronous iterations (the job is then done)
    budget_s: float  # stop starting iterations this long after the call began
    speed: float  # emulated speed factor in (0, 1]; 1.0 = no waiting
    checkpoint: str  # file path (shared storage on multi-node clusters)
    expect_steps: float  # the job's progress (table steps) in its latest checkpoint, as the executor knows it
    store: tuple[str, int] | None = None  # rank 0's TCPStore for torch.distributed (world > 1)
    group: str = ""  # unique per lease: prefix of the process group's keys
    timeout_s: float = 60.0  # collective-operation timeout
    run_id: str = ""  # checkpoints of other runs (same folder, same job id) are never restored
    # HadarE copies: copy ``copy`` of ``copies`` restores from ``restore_from`` (the canonical checkpoint),
    # writes ``checkpoint`` (its own) and reads slices ``shard_offset + rank`` of ``shards`` of every
    # global batch, so the copies of one round train on disjoint data
    copy: int = 0
    copies: int = 1
    restore_from: str = ""  # "" = ``checkpoint``
    shard_offset: int = 0
    shards: int = 0  # 0 = ``world``


@dataclass(slots=True)
class LeaseOutcome:
    """What the worker did. ``iterations`` are synchronous iterations (x world = table steps)."""

    ok: bool
    iterations: int = 0
    steps_start: float = 0.0  # the job's progress when this lease began training (from memory or checkpoint)
    steps_total: float = 0.0  # the job's progress after this lease, in table steps
    train_s: float = 0.0
    restore_s: float = 0.0
    save_s: float = 0.0
    restored: bool = False  # loaded from a checkpoint (False: continued in memory, or fresh start)
    finished: bool = False
    loss: float = float("nan")
    metrics: dict[str, float] = field(default_factory=dict)
    error: str = ""
    start_digest: str = ""  # fingerprint of the model weights this lease started from


@dataclass(slots=True)
class _Held:
    job_id: int
    state: Any  # workloads.TrainState
    steps: float  # table steps done (matches the checkpoint written at the end of the last lease)
    initial: float  # metric before any training
    forked: bool = False  # trained as a HadarE copy since its restore: differs from the canonical checkpoint


class Worker:
    """Ray actor body (wrapped by ``ray.remote`` in ``pool.py``)."""

    def __init__(self, gpu_id: int, node: str, gpu_type: str) -> None:
        import torch

        torch.set_num_threads(1)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
        self.gpu_id, self.node, self.gpu_type = gpu_id, node, gpu_type
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self._held: _Held | None = None
        self._data: dict[tuple[str, int], Any] = {}
        self._store: Any = None
        try:  # pay for the heavy imports now, while the pool starts, not inside a lease
            import sklearn.datasets  # noqa: F401
            import torch.distributed
        except ImportError:
            pass
        torch.optim.Adam(torch.nn.Linear(1, 1).parameters())  # its first use imports much of torch (~1 s)

    def info(self) -> dict[str, Any]:
        return {"gpu": self.gpu_id, "node": self.node, "gpu_type": self.gpu_type, "pid": os.getpid(),
                "host": socket.gethostname(), "device": self.device}

    def open_store(self) -> tuple[str, int]:
        """Rank 0 of a multi-GPU lease: host a TCPStore for the group; returns (address, port)."""
        import ray
        import torch.distributed as dist

        addr = ray.util.get_node_ip_address()
        self._store = dist.TCPStore(addr, 0, is_master=True, wait_for_workers=False,
                                    timeout=timedelta(seconds=60))
        return addr, int(self._store.port)

    # ---- one lease -------------------------------------------------------------
    def run_lease(self, spec: LeaseSpec) -> LeaseOutcome:
        t0 = time.monotonic()
        out = LeaseOutcome(ok=False)
        wl = workloads.get(spec.job_type)
        group = None
        try:
            held = self._ensure_state(spec, wl, out)
            out.steps_start = held.steps
            out.start_digest = weights_digest(held.state.model)
            if spec.world > 1:
                group = self._join_group(spec)
            self._train(spec, wl, held, out, t0)
            if out.finished and spec.rank == 0 and spec.copies == 1:  # copies: the tracker evaluates the average
                out.metrics[wl.metric] = wl.evaluate(held.state.model, held.state.test)
            if spec.rank == 0:
                ts = time.monotonic()
                checkpoint.save_atomic(self._snapshot(spec, held, out), spec.checkpoint)
                out.save_s = time.monotonic() - ts
            out.metrics["initial_" + wl.metric] = held.initial
            out.steps_total = held.steps
            out.ok = True
        except Exception as e:  # noqa: BLE001 - any training error fails the lease; the job resumes from its checkpoint
            out.error = f"{type(e).__name__}: {e}"
            log.warning("gpu %d: lease of job %d failed: %s", self.gpu_id, spec.job_id, traceback.format_exc())
            self._held = None  # in-memory state may be half-updated: never continue from it
        finally:
            if group is not None:
                self._leave_group()
        return out

    def _ensure_state(self, spec: LeaseSpec, wl: workloads.Workload, out: LeaseOutcome) -> _Held:
        held = self._held
        if (held is not None and held.job_id == spec.job_id and not held.forked
                and abs(held.steps - spec.expect_steps) < 1e-6):
            held.forked = spec.copies > 1
            return held  # lease extension: continue in memory
        self._held = None
        ts = time.monotonic()
        data = self._dataset(wl, spec.seed)
        state = wl.new_state(spec.seed, data, self.device)
        source = spec.restore_from or spec.checkpoint
        ckpt = checkpoint.load(source)
        if ckpt is not None and (ckpt.get("run_id") != spec.run_id or ckpt.get("job_type") != spec.job_type):
            log.warning("ignoring %s: written by another run", source)
            ckpt = None
        if ckpt is not None:
            state.model.load_state_dict(ckpt["model"])
            state.optimizer.load_state_dict(ckpt["optimizer"])
            state.iteration = int(ckpt["iteration"])
            held = _Held(spec.job_id, state, float(ckpt["steps"]), float(ckpt["initial_metric"]))
            out.restored = True
        else:
            held = _Held(spec.job_id, state, 0.0, wl.evaluate(state.model, state.test))
        held.forked = spec.copies > 1
        out.restore_s = time.monotonic() - ts
        self._held = held
        return held

    def _dataset(self, wl: workloads.Workload, seed: int) -> Any:
        key = (wl.name, seed)
        if key not in self._data:
            if len(self._data) >= 4:
                self._data.pop(next(iter(self._data)))
            self._data[key] = wl.make_data(seed)
        return self._data[key]

    def _train(self, spec: LeaseSpec, wl: workloads.Workload, held: _Held, out: LeaseOutcome, t0: float) -> None:
        import torch

        start = time.monotonic()
        emulated = 0.0  # the emulated time spent so far, from ``start``
        reduce = _make_allreduce(spec) if spec.world > 1 else None
        stop = spec.max_iterations <= 0
        shard, shards = spec.shard_offset + spec.rank, spec.shards or spec.world
        while not stop:
            ts = time.monotonic()
            last = out.iterations + 1 >= spec.max_iterations or ts - t0 >= spec.budget_s
            flag = torch.tensor([1.0 if last else 0.0])
            out.loss = wl.train_step(held.state, shard, shards, spec.seed,
                                     functools.partial(reduce, flag=flag) if reduce else None)
            stop = bool(flag.item() > 0) if reduce else last
            out.iterations += 1
            held.steps += spec.world
            if spec.speed < 1.0:
                emulated += (time.monotonic() - ts) / spec.speed
                wait = start + emulated - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
        out.train_s = time.monotonic() - start
        out.finished = out.iterations >= spec.max_iterations

    def _snapshot(self, spec: LeaseSpec, held: _Held, out: LeaseOutcome) -> dict[str, Any]:
        st = held.state
        return {"model": st.model.state_dict(), "optimizer": st.optimizer.state_dict(), "iteration": st.iteration,
                "steps": held.steps, "job_id": spec.job_id, "copy": spec.copy, "samples": out.iterations * spec.world
                * workloads.get(spec.job_type).batch_size, "job_type": spec.job_type, "run_id": spec.run_id,
                "initial_metric": held.initial, "final_metric": out.metrics.get(workloads.get(spec.job_type).metric,
                                                                                float("nan"))}

    # ---- torch.distributed -----------------------------------------------------------
    def _join_group(self, spec: LeaseSpec) -> bool:
        import torch.distributed as dist

        assert spec.store is not None
        if spec.rank == 0:
            store = self._store
        else:
            store = dist.TCPStore(spec.store[0], spec.store[1], is_master=False, timeout=timedelta(seconds=60))
        backend = "nccl" if self.device == "cuda" else "gloo"
        dist.init_process_group(backend, store=dist.PrefixStore(spec.group, store), rank=spec.rank,
                                world_size=spec.world, timeout=timedelta(seconds=spec.timeout_s))
        return True

    def _leave_group(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        # rank 0 keeps hosting its store until its next lease: peers may still be leaving the group

    def crash(self) -> None:
        """Testing aid: die at once, as a worker killed by the OS would."""
        os._exit(1)


def weights_digest(model: Any) -> str:
    """A short fingerprint of a model's weights (parameters and buffers): equal weights, equal digest."""
    import hashlib

    h = hashlib.blake2b(digest_size=8)
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _make_allreduce(spec: LeaseSpec) -> Any:
    """Average gradients over the group in ONE all-reduce, with a stop flag riding along."""
    import torch
    import torch.distributed as dist

    def reduce(model: Any, flag: Any) -> None:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads] + [flag.to(grads[0].device)])
        dist.all_reduce(flat)
        flag.copy_(flat[-1:].cpu())
        flat = flat[:-1] / spec.world
        i = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[i:i + n].view_as(g))
            i += n

    return reduce
