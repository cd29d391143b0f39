"""The gradient noise scale a job measures as it trains: the statistical-efficiency model's ``Bn``.

A step at batch ``B`` estimates the true gradient ``G`` with noise whose covariance is the per-sample
gradients' covariance over ``B``; its trace per sample is ``S``. Two squared gradient norms measured at
two batch sizes, ``|g_s|^2`` at ``B_s`` and ``|g_b|^2`` at ``B_b > B_s``, give unbiased estimates of both::

    |G|^2 ~ (B_b |g_b|^2 - B_s |g_s|^2) / (B_b - B_s)
    S     ~ (|g_s|^2 - |g_b|^2) / (1/B_s - 1/B_b)

and the noise scale is ``Bn = S / |G|^2`` (a step at batch ``B`` is then worth ``(Bn + B0) / (Bn + B)``
of ``B / B0`` steps at ``B0``: ``model/efficiency.py``). Each estimate is an exponential moving average
(bias-corrected, as Adam's moments are) and the ratio is taken of the averages: single pairs are noisy,
and a ratio of noisy estimates is biased.

Where the two norms come from:

- **A gang** (``ctx.data_parallel``, DDP): ``B_s`` is one rank's batch and ``|g_s|^2`` the mean over the
  ranks of each rank's own gradient's squared norm, taken before the all-reduce (a DDP communication hook);
  ``B_b`` is the gang's batch and ``|g_b|^2`` the averaged gradient's.
- **One replica**: two consecutive steps (pairs that do not overlap): ``B_s`` the batch, ``|g_s|^2`` the
  mean of the two gradients' squared norms, ``B_b = 2 B_s`` and ``g_b`` their mean. The model moves
  between the two steps, which the estimate ignores (as AdaptDL's does).

``NoiseEstimate`` is the arithmetic (no torch); ``GradientNoise`` reads a torch model's gradients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

SMOOTHING = 0.99  # the moving averages' weight on their past (about the last 100 pairs count)


def pair(small_sqr: float, small_batch: float, big_sqr: float, big_batch: float) -> tuple[float, float]:
    """One pair's unbiased ``(|G|^2, S)`` from ``|g|^2`` at ``small_batch`` and at ``big_batch`` samples."""
    if not 0 < small_batch < big_batch:
        raise ValueError(f"want 0 < small batch < big batch, got {small_batch} and {big_batch}")
    sqr = (big_batch * big_sqr - small_batch * small_sqr) / (big_batch - small_batch)
    var = (small_sqr - big_sqr) / (1.0 / small_batch - 1.0 / big_batch)
    return sqr, var


@dataclass
class NoiseEstimate:
    """Moving averages of ``|G|^2`` and ``S`` from pairs of squared gradient norms at two batch sizes."""

    smoothing: float = SMOOTHING
    pairs: int = 0
    _sqr: float = 0.0  # the averages before bias correction
    _var: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.smoothing < 1.0:
            raise ValueError(f"smoothing must be in [0, 1), got {self.smoothing}")

    def add(self, small_sqr: float, small_batch: float, big_sqr: float, big_batch: float) -> None:
        """One pair: ``|g|^2`` measured at ``small_batch`` samples and at ``big_batch`` (> small) samples."""
        if not (math.isfinite(small_sqr) and math.isfinite(big_sqr)):
            if not 0 < small_batch < big_batch:
                raise ValueError(f"want 0 < small batch < big batch, got {small_batch} and {big_batch}")
            return  # an overflowed step (mixed precision): no information
        sqr, var = pair(small_sqr, small_batch, big_sqr, big_batch)
        b = self.smoothing
        self._sqr = b * self._sqr + (1.0 - b) * sqr
        self._var = b * self._var + (1.0 - b) * var
        self.pairs += 1

    def _corrected(self, value: float) -> float | None:
        if self.pairs == 0:
            return None
        return value / (1.0 - self.smoothing ** self.pairs)

    @property
    def grad_sqr(self) -> float | None:
        """The true gradient's squared norm ``|G|^2`` (None before the first pair)."""
        return self._corrected(self._sqr)

    @property
    def grad_var(self) -> float | None:
        """The per-sample gradient variance's trace ``S`` (None before the first pair)."""
        return self._corrected(self._var)

    @property
    def noise_scale(self) -> float | None:
        """``Bn = S / |G|^2`` in samples; ``inf`` while the averaged ``|G|^2`` is not positive (noise
        dominates: every larger batch scales perfectly), 0 while ``S`` is not; None before the first pair."""
        sqr, var = self.grad_sqr, self.grad_var
        if sqr is None or var is None:
            return None
        if sqr <= 0.0:
            return math.inf
        return max(var, 0.0) / sqr

    def gain(self, batch: float, ref_batch: float) -> float:
        """What a step at ``batch`` is worth in steps at ``ref_batch``: ``(S/B0 + |G|^2) / (S/B + |G|^2)``
        (AdaScale's learning-rate scale); 1 before the first pair."""
        bn = self.noise_scale
        if bn is None:
            return 1.0
        if math.isinf(bn):
            return batch / ref_batch
        return (bn / ref_batch + 1.0) / (bn / batch + 1.0)

    def state_dict(self) -> dict[str, float]:
        return {"smoothing": self.smoothing, "pairs": self.pairs, "sqr": self._sqr, "var": self._var}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.smoothing = float(state["smoothing"])
        self.pairs, self._sqr, self._var = int(state["pairs"]), float(state["sqr"]), float(state["var"])


class GradientNoise:
    """Measures a torch model's gradient noise scale; call ``observe()`` after every ``backward()`` (before
    the optimizer's step; on a gang, on every rank: it is a collective).

    ``model`` is the module the job trains: the ``DistributedDataParallel`` wrapper ``ctx.data_parallel``
    returns on a gang (a communication hook is registered on it, so build this before the first
    backward), the model itself on one replica. ``batch_size`` is one rank's batch (samples per step).
    """

    def __init__(self, model: Any, batch_size: int, world: int = 1, smoothing: float = SMOOTHING) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.estimate = NoiseEstimate(smoothing)
        self.batch_size, self.world = batch_size, world
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._previous: Any = None  # one replica: the first gradient of a pair (flattened)
        self._local: Any = None  # a gang: this rank's squared norm before the all-reduce, summed over buckets
        if world > 1:
            if not hasattr(model, "register_comm_hook"):
                raise TypeError("on a gang, measure the model ctx.data_parallel returned (DistributedDataParallel)")
            model.register_comm_hook(self, _allreduce_hook)

    def _gradient(self) -> Any:
        import torch

        return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).double()
                          for p in self._params])

    def _sqr_norm(self) -> float:
        """The gradient's squared norm, summed parameter by parameter (no flattened copy of it)."""
        import torch

        sums = [p.grad.detach().double().pow(2).sum() for p in self._params if p.grad is not None]
        return float(torch.stack(sums).sum()) if sums else 0.0

    def observe(self) -> None:
        """Take this step's gradient into the estimate."""
        if self.world > 1:
            self._observe_gang()
            return
        g = self._gradient()
        if self._previous is None:
            self._previous = g.clone()
            return
        a, self._previous = self._previous, None
        small = 0.5 * (float(a.pow(2).sum()) + float(g.pow(2).sum()))
        big = float((0.5 * (a + g)).pow(2).sum())
        self.estimate.add(small, self.batch_size, big, 2 * self.batch_size)

    def _observe_gang(self) -> None:
        import torch
        import torch.distributed as dist

        device = self._params[0].device
        big = self._sqr_norm()  # DDP left the averaged gradient in .grad
        local = self._local if self._local is not None else torch.zeros((), dtype=torch.float64, device=device)
        self._local = None
        small = local.detach().double().reshape(1).to(device)
        dist.all_reduce(small)  # the ranks' own squared norms, summed
        self.estimate.add(float(small.sum()) / self.world, self.batch_size, big, self.world * self.batch_size)

    @property
    def noise_scale(self) -> float | None:
        return self.estimate.noise_scale

    def gain(self, batch: float, ref_batch: float | None = None) -> float:
        """What a step at ``batch`` samples is worth in steps at ``ref_batch`` (default this rank's batch)."""
        return self.estimate.gain(batch, self.batch_size if ref_batch is None else ref_batch)

    def metrics(self) -> dict[str, float]:
        """What a lease reports: ``noise_scale`` (samples), ``grad_sqr`` and ``grad_var``, once finite."""
        e = self.estimate
        out = {"grad_sqr": e.grad_sqr, "grad_var": e.grad_var, "noise_scale": e.noise_scale}
        return {k: float(v) for k, v in out.items() if v is not None and math.isfinite(v)}


def _allreduce_hook(noise, bucket):  # no annotations: DDP rejects any it cannot evaluate
    """DDP's averaging all-reduce of one gradient bucket, after adding this rank's own squared norm of it."""
    import torch.distributed as dist

    buf = bucket.buffer()
    sq = buf.detach().double().pow(2).sum()
    noise._local = sq if noise._local is None else noise._local + sq
    buf.div_(noise.world)
    return dist.all_reduce(buf, async_op=True).get_future().then(lambda fut: fut.value()[0])
