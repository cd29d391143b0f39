"""The bundled workloads: small models written against the job API (``hadar.job``), like any user job.

A workload is a model + a data set with learnable structure + a held-out metric; its
``train(ctx)`` (``train_workload``) is an ordinary job function: it builds the model from
``ctx.seed``, resumes from ``ctx.load_state()``, wraps the model with
``ctx.data_parallel``, trains one global batch per item of ``ctx.steps()`` (this rank reads
slice ``ctx.shard_index`` of ``ctx.num_shards`` of each), reports its loss and its held-out
metric (once untrained, once when the job is done) and saves ``{"model", "optimizer"}``.
Everything is a deterministic function of the seed: every rank builds the same model and data.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

from hadar.job import Context


class Workload:
    """Base class: subclasses set the class attributes and implement the four hooks (torch imported lazily)."""

    name: ClassVar[str]  # the job type: a key of the runtime's throughput table
    alias: ClassVar[str]  # the short name job files use
    family: ClassVar[str]  # image, lstm-lm, transformer, recommendation
    mirrors: ClassVar[str]  # the Gavel job type whose per-GPU-type ratios the emulation uses
    batch_size: ClassVar[int]  # per-worker batch (Gavel's "batch size")
    metric: ClassVar[str]
    higher_is_better: ClassVar[bool]
    lr: ClassVar[float] = 1e-3

    def build_model(self, seed: int) -> Any:
        """The workload's network with weights drawn from ``seed`` (identical for equal seeds)."""
        import torch

        torch.manual_seed(seed)
        return self.network(torch.nn)

    def network(self, nn: Any) -> Any:
        """A fresh ``nn.Module`` (``nn`` is ``torch.nn``); seeding is done by ``build_model``."""
        raise NotImplementedError

    def make_data(self, seed: int) -> tuple[Any, Any]:
        """(train, test) tensors; deterministic in ``seed``; no downloads."""
        raise NotImplementedError

    def loss(self, model: Any, batch: Any) -> Any:
        raise NotImplementedError

    def evaluate(self, model: Any, test: Any) -> float:
        raise NotImplementedError

    # ---- shared machinery --------------------------------------------------
    @property
    def quality(self) -> str:
        """The job-file ``quality`` of this workload: its metric, ``-``-prefixed when lower is better."""
        return self.metric if self.higher_is_better else "-" + self.metric

    def batch(self, train: Any, iteration: int, shard: int, shards: int, seed: int) -> Any:
        """Slice ``shard`` of ``shards`` of global batch number ``iteration`` (epoch-wise shuffles)."""
        import torch

        data = train if isinstance(train, tuple) else (train,)
        n = data[0].shape[0]
        per_epoch = max(1, n // (self.batch_size * shards))
        epoch, pos = divmod(iteration, per_epoch)
        g = torch.Generator().manual_seed(seed * 100_003 + epoch)
        perm = torch.randperm(n, generator=g)
        start = (pos * shards + shard) * self.batch_size
        idx = perm[start:start + self.batch_size].to(data[0].device)
        out = tuple(t[idx] for t in data)
        return out if isinstance(train, tuple) else out[0]

    def better(self, new: float, old: float) -> bool:
        return new > old if self.higher_is_better else new < old


@functools.lru_cache(maxsize=8)
def _data(cls: type[Workload], seed: int, device: str) -> tuple[Any, Any]:
    """A worker builds each data set once (per seed and device) and keeps it for later leases."""
    train, test = cls().make_data(seed)
    return _to(train, device), _to(test, device)


def train_workload(wl: Workload, ctx: Context) -> None:
    """The bundled workloads' ``train(ctx)``: the job API, nothing else."""
    import torch

    model = wl.build_model(ctx.seed).to(ctx.device)
    opt = torch.optim.Adam(model.parameters(), lr=float(ctx.args.get("lr", wl.lr)))
    train, test = _data(type(wl), ctx.seed, ctx.device)
    state = ctx.load_state()
    if state is None:
        ctx.report(**{wl.metric: wl.evaluate(model, test)})  # untrained: the first value is the baseline
    else:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    net = ctx.data_parallel(model)
    loss = None
    for step in ctx.steps():
        net.train()
        opt.zero_grad(set_to_none=True)
        loss = wl.loss(net, wl.batch(train, step, ctx.shard_index, ctx.num_shards, ctx.seed))
        loss.backward()
        opt.step()
    if loss is not None:
        ctx.report(loss=float(loss.detach()))
    if ctx.finished and ctx.rank == 0:
        ctx.report(**{wl.metric: wl.evaluate(model, test)})
    ctx.save_state({"model": model.state_dict(), "optimizer": opt.state_dict()})


def _to(data: Any, device: str) -> Any:
    if isinstance(data, tuple):
        return tuple(_to(d, device) for d in data)
    return data.to(device)
