"""A job that measures its gradient noise scale at fixed weights (learning rate 0): linear regression on a
fixed dataset, each rank's batch drawn with replacement, so the estimate's expectation is the dataset's
exact ``|G|^2`` and ``S`` (``truth``)."""

from __future__ import annotations

import numpy as np
import torch


def dataset(seed: int, n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = x @ rng.normal(size=d) + 0.5 * rng.normal(size=n) + 1.0
    return x, y


def truth(seed: int, n: int, d: int) -> tuple[float, float]:
    """(|G|^2, S) at zero weights: a sample's gradient of 0.5 (w.x + b - y)^2 is (-y x, -y)."""
    x, y = dataset(seed, n, d)
    g = np.concatenate([-y[:, None] * x, -y[:, None]], axis=1)
    mean = g.mean(axis=0)
    return float(mean @ mean), float(((g - mean) ** 2).sum(axis=1).mean())


def train(ctx):
    a = ctx.args
    n, d, batch = a["n"], a["d"], a["batch"]
    x, y = dataset(a["data_seed"], n, d)
    xs, ys = torch.tensor(x), torch.tensor(y)
    model = torch.nn.Linear(d, 1).double()
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    net = ctx.data_parallel(model)
    noise = ctx.gradient_noise(net, batch, smoothing=a["smoothing"])
    gen = torch.Generator().manual_seed(1000 * ctx.seed + ctx.rank)
    for _ in ctx.steps():
        idx = torch.randint(0, n, (batch,), generator=gen)
        net.zero_grad()
        loss = 0.5 * ((net(xs[idx]).squeeze(1) - ys[idx]) ** 2).mean()
        loss.backward()
        noise.observe()
    ctx.save_state({"model": model.state_dict()})
