"""``ctx``: what a job's ``train(ctx)`` function is given for one lease (see ``hadar.job``)."""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from hadar.job import state as st
from hadar.job.lease import LeaseOutcome, LeaseSpec

_sleep = time.sleep  # how an emulated slower GPU waits (one name, so a test can watch it)
_STOP = threading.Event()  # set by ``request_stop``: every lease of this process ends after its current step


def request_stop() -> None:
    """End the lease running in this process after its current step, as at its deadline (a preemption: the
    job's function then saves and returns). Safe to call from a signal handler."""
    _STOP.set()


class Context:
    """The job's side of one lease on one worker.

    Attributes: ``device`` (``"cpu"`` or ``"cuda:N"``), ``rank`` and ``world_size`` (of this
    lease's gang), ``args`` (the job file's ``args``), ``seed`` (the same on every rank and
    lease of the job), ``job_id``, ``name``, ``total_steps`` (the job's size in steps, every
    worker's iterations counted), ``shard_index``/``num_shards`` (which slice of the data
    this rank reads), ``profiling`` (a measurement-only lease: nothing it saves is kept).
    """

    def __init__(self, spec: LeaseSpec, device: str, cache: st.StateCache, outcome: LeaseOutcome,
                 started: float | None = None) -> None:
        self._spec, self._cache, self._out = spec, cache, outcome
        self._t0 = time.monotonic() if started is None else started
        self._iteration = spec.start_iteration
        self._loaded: dict[str, Any] | None = None
        self._load_done = False
        self._iterated = False
        self._saved = False
        self.device = device
        self.rank, self.world_size = spec.rank, spec.world
        self.args: dict[str, Any] = json.loads(spec.args_json)
        self.seed, self.job_id, self.name = spec.seed, spec.job_id, spec.name
        self.total_steps = spec.total_steps
        self.shard_index = spec.shard_offset + spec.rank
        self.num_shards = spec.shards or spec.world
        self.profiling = spec.mode == "profile"
        self._noise: Any = None

    # ---- batch and learning rate (adaptive jobs) ---------------------------------------------
    @property
    def batch_size(self) -> int | None:
        """The global batch to train at in this lease (the scheduler's choice for an adaptive job, the
        job's own for a rigid one); None where the job file names no batch (train at your own). Each
        rank's share is ``batch_size // world_size``."""
        b = self._spec.batch
        return round(b) if b > 0 else None

    @property
    def lr_scale(self) -> float:
        """What to multiply the learning rate tuned for the job's own batch by at ``batch_size`` (its
        ``lr_rule``; ``adascale`` reads the live noise meter once it has measured, ``hadar.job.goodput``);
        1 for a rigid job."""
        from hadar.job.goodput import lr_scale

        spec = self._spec
        bn = self._noise.noise_scale if self._noise is not None else None
        return lr_scale(spec.lr_rule, spec.batch, spec.own_batch, bn if bn is not None else spec.noise_scale)

    # ---- state -------------------------------------------------------------------------
    def load_state(self) -> dict[str, Any] | None:
        """The dict this job saved last, or None at its first start (or if it never saved)."""
        if self._load_done:
            return self._loaded
        self._load_done = True
        spec = self._spec
        if spec.resume_steps is None:
            return None
        kept = None if self.profiling else self._cache.take(spec.run_id, spec.job_id, spec.resume_steps,
                                                            spec.rank, spec.world)
        if kept is not None:
            self._out.continued = True
            self._loaded = kept
        else:
            t = time.monotonic()
            ckpt = st.load(spec.restore_from or spec.checkpoint)
            meta = st.meta_of(ckpt)
            if ckpt is not None and meta.get("run_id") == spec.run_id and meta.get("job_id") == spec.job_id:
                self._loaded = ckpt["state"]
                self._out.restored = True
            self._out.restore_s = time.monotonic() - t
        if spec.digest:
            self._out.start_digest = st.digest(self._loaded)
        return self._loaded

    def save_state(self, state: dict[str, Any]) -> None:
        """Checkpoint ``state`` (tensors, numbers, strings, lists, dicts) atomically; call it at the end
        of every lease, after the ``steps()`` loop. Put the model's ``state_dict()`` under ``"model"``
        (forked copies' models are averaged). On a gang, every rank may call it; rank 0's is written."""
        if not isinstance(state, dict):
            raise TypeError(f"save_state takes a dict, got {type(state).__name__}")
        st.check_saveable(state)
        self._saved = True
        if self.profiling:
            return
        spec = self._spec
        t = time.monotonic()
        progress = spec.steps_done + (self._iteration - spec.start_iteration) * spec.world
        if spec.rank == 0:
            meta = {"run_id": spec.run_id, "job_id": spec.job_id, "copy": spec.copy, "steps": progress,
                    "iteration": self._iteration, "world": spec.world}
            st.save_atomic({"hadar": meta, "state": state}, spec.checkpoint)
        if not spec.forked:  # a copy's state is merged with the others': never resume from it alone
            self._cache.put(st.Cached(spec.run_id, spec.job_id, progress, spec.rank, spec.world, st.clone(state)))
        self._out.saved_steps = progress
        self._out.save_s += time.monotonic() - t

    # ---- steps ---------------------------------------------------------------------------
    def steps(self) -> Iterator[int]:
        """The job's step numbers (0, 1, 2, ... continuing across leases); do one training step per item.

        Stops when the lease ends (its deadline, a preemption) or the job's steps are done; on a
        gang every rank stops at the same step. Read ``finished`` after the loop."""
        self._iterated = True
        spec, out = self._spec, self._out
        stop = self._stop(out.iterations)  # on a gang, also waits for the slowest rank to be ready
        begin = time.monotonic()
        if out.startup_s is None:  # building the model, loading the state, joining the gang: a restart's cost
            out.startup_s = begin - self._t0
        emulated = 0.0
        try:
            while not stop:
                ts = time.monotonic()
                yield self._iteration
                self._iteration += 1
                out.iterations += 1
                if spec.speed < 1.0:  # an emulated slower GPU: stretch the step
                    emulated += (time.monotonic() - ts) / spec.speed
                    wait = begin + emulated - time.monotonic()
                    if wait > 0:
                        _sleep(wait)
                stop = self._stop(out.iterations)
        finally:
            out.train_s += time.monotonic() - begin

    def _stop(self, done: int) -> bool:
        spec = self._spec
        stop = done >= spec.max_iterations or (done > 0 and (time.monotonic() - self._t0 >= spec.budget_s
                                                             or _STOP.is_set() or self._out.reached_target))
        if spec.world > 1:  # one decision for the gang: no rank may enter a step the others skip
            import torch
            import torch.distributed as dist

            flag = torch.tensor([1.0 if stop else 0.0], device=self.device if self.device.startswith("cuda") else "cpu")
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            stop = bool(flag.item() > 0)
        return stop

    @property
    def finished(self) -> bool:
        """True once the job's steps are all done (after the loop of its last lease): evaluate and report now."""
        spec = self._spec
        if spec.mode == "finalize":
            return True
        return (spec.mode == "train" and not spec.forked
                and (self._out.reached_target or self._iteration - spec.start_iteration >= spec.max_iterations))

    # ---- metrics --------------------------------------------------------------------------
    def report(self, **metrics: float) -> None:
        """Record numbers (loss, accuracy, ...) shown in status and reports; the last value of each counts."""
        for name, value in metrics.items():
            try:
                v = float(value)
            except (TypeError, ValueError):
                raise TypeError(f"report: {name} must be a number, got {type(value).__name__}") from None
            if math.isnan(v):
                continue
            self._out.metrics[name] = v
            self._out.first_metrics.setdefault(name, v)
            if name == self._spec.target_metric.lstrip("-"):
                self._check_target(v)

    def _check_target(self, value: float) -> None:
        spec = self._spec
        if spec.target is None or spec.mode != "train" or spec.forked or self.profiling:
            return  # a forked copy's model is not the job's: the merged one is judged
        lower = spec.target_metric.startswith("-")
        if (value <= spec.target) if lower else (value >= spec.target):
            self._out.reached_target = True

    def gradient_noise(self, model: Any, batch_size: int, smoothing: float | None = None) -> Any:
        """A ``hadar.job.noise.GradientNoise`` measuring ``model``'s gradient noise scale (the samples per
        step past which a larger batch stops paying): call its ``observe()`` after every ``backward()``
        (on every rank of a gang), and ``gain(batch)`` is AdaScale's learning-rate scale for a batch.
        ``model`` is what ``data_parallel`` returned (build this before the first backward); ``batch_size``
        is this rank's samples per step; ``smoothing`` the moving averages' weight on their past (0.99:
        about the last 100 pairs of steps count). Its ``noise_scale``, ``grad_sqr`` and ``grad_var`` are reported
        at the lease's end; keep ``.estimate.state_dict()`` in the saved state to carry it across leases."""
        from hadar.job.noise import SMOOTHING, GradientNoise

        self._noise = GradientNoise(model, batch_size, world=self.world_size,
                                    smoothing=SMOOTHING if smoothing is None else smoothing)
        return self._noise

    # ---- data parallelism --------------------------------------------------------------------
    def data_parallel(self, model: Any, **kwargs: Any) -> Any:
        """``model`` wrapped for synchronous data-parallel training (torch's DistributedDataParallel over
        the gang's process group: NCCL on GPUs, gloo on CPUs), or ``model`` itself on one GPU.
        Keep a reference to ``model``: save ``model.state_dict()``, not the wrapper's."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return model
        from torch.nn.parallel import DistributedDataParallel

        ids = [int(self.device.split(":")[1])] if self.device.startswith("cuda:") else None
        return DistributedDataParallel(model, device_ids=ids, **kwargs)

    def shard(self, data: Any) -> Any:
        """This rank's slice of ``data`` (every ``num_shards``-th item from ``shard_index``): a tensor, array,
        list or tuple is sliced; a torch ``Dataset`` becomes a ``Subset``. Shard again in every lease."""
        i, n = self.shard_index, self.num_shards
        if n == 1:
            return data
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(data, torch.utils.data.Dataset):
            return torch.utils.data.Subset(data, range(i, len(data), n))
        return data[i::n]

    # ---- for the runner ---------------------------------------------------------------------
    def _verdict(self) -> str:
        """"" if the lease went as it should; else why it did not (it then counts as failed)."""
        spec = self._spec
        if spec.mode != "finalize" and spec.max_iterations > 0 and self._out.iterations == 0:
            return ("train(ctx) returned without doing a step of ctx.steps(): the job cannot make progress"
                    if self._iterated else "train(ctx) returned without iterating ctx.steps()")
        if spec.mode == "train" and not self._saved:
            self._out.warnings.append("train(ctx) returned without calling ctx.save_state(...): this job restarts "
                                      "from scratch at every lease")
        if self._noise is not None:
            self._out.metrics.update(self._noise.metrics())
        from hadar.job.goodput import HOLDOUT, HOLDOUT_START

        if HOLDOUT in self._out.first_metrics and HOLDOUT in self._out.metrics:
            self._out.metrics[HOLDOUT_START] = self._out.first_metrics[HOLDOUT]
        self._out.finished = self.finished
        return ""
