"""The contract every real workload implements (torch imported by subclasses only).

A workload is a small model + a data set with learnable structure + a
held-out metric. Everything is a deterministic function of ``seed``: every
worker of a data-parallel job builds the same initial model and data, and
rank ``r`` of ``w`` reads a disjoint slice of each global batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(slots=True)
class TrainState:
    """A job's live training state inside one worker (model, optimizer, data)."""

    model: Any
    optimizer: Any
    train: Any  # tensors (or tuple of tensors), first dim = examples
    test: Any
    iteration: int = 0  # synchronous iterations done (a k-GPU iteration = k throughput-table steps)


class Workload:
    """Base class: subclasses set the class attributes and implement the four hooks."""

    name: ClassVar[str]  # the job type: a key of the runtime's throughput table
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
    def new_state(self, seed: int, data: tuple[Any, Any] | None = None, device: str = "cpu") -> TrainState:
        """Fresh model + optimizer on ``device``; ``data`` (from ``make_data``) is moved there too."""
        import torch

        model = self.build_model(seed).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=self.lr)
        train, test = data if data is not None else self.make_data(seed)
        return TrainState(model, opt, _to(train, device), _to(test, device))

    def batch(self, state: TrainState, rank: int, world: int, seed: int) -> Any:
        """Rank ``rank``'s slice of global batch number ``state.iteration`` (epoch-wise shuffles)."""
        import torch

        data = state.train if isinstance(state.train, tuple) else (state.train,)
        n = data[0].shape[0]
        per_epoch = max(1, n // (self.batch_size * world))
        epoch, pos = divmod(state.iteration, per_epoch)
        g = torch.Generator().manual_seed(seed * 100_003 + epoch)
        perm = torch.randperm(n, generator=g)
        start = (pos * world + rank) * self.batch_size
        idx = perm[start:start + self.batch_size].to(data[0].device)
        out = tuple(t[idx] for t in data)
        return out if isinstance(state.train, tuple) else out[0]

    def train_step(self, state: TrainState, rank: int, world: int, seed: int, allreduce: Any = None) -> float:
        """One synchronous iteration: forward, backward, gradient all-reduce (if given), update."""
        state.model.train()
        state.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(state.model, self.batch(state, rank, world, seed))
        loss.backward()
        if allreduce is not None:
            allreduce(state.model)
        state.optimizer.step()
        state.iteration += 1
        return float(loss.detach())

    def better(self, new: float, old: float) -> bool:
        return new > old if self.higher_is_better else new < old


def _to(data: Any, device: str) -> Any:
    if isinstance(data, tuple):
        return tuple(_to(d, device) for d in data)
    return data.to(device)
