"""An adaptive job on the job API: an MLP on scikit-learn's digits that trains at the batch the scheduler
gives it (``ctx.batch_size``), scales its learning rate by ``ctx.lr_scale``, measures its gradient noise
scale (``ctx.gradient_noise``) and reports its held-out loss before and after every lease (``holdout_loss``,
what the job tracker judges HadarE's merges by) and its test accuracy every ``eval_every`` steps (so that
a ``target`` ends it as soon as it is reached). ``hadar experiment time-to-target`` runs it.

``ctx.args``: ``batch`` (its own batch, used when the job file names none; default 16), ``lr`` (plain SGD's
learning rate at its own batch; default 0.02), ``hidden`` (default 64), ``eval_every`` (default 10).
Data: 1,497 digits to train on, 300 held back (a fixed split); every step's batch is drawn from a
generator seeded with the job's seed and the step, so a resumed job sees the batches it would have.
"""

from __future__ import annotations

from typing import Any

from hadar.job import Context

_DATA: dict[str, Any] = {}  # the worker keeps the data between leases


def _data() -> tuple[Any, Any, Any, Any]:
    if not _DATA:
        import torch
        from sklearn.datasets import load_digits

        d = load_digits()
        x = torch.tensor(d.data, dtype=torch.float32) / 16.0
        y = torch.tensor(d.target, dtype=torch.long)
        perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(12345))
        tr, te = perm[:1497], perm[1497:]
        _DATA.update(x=x[tr], y=y[tr], tx=x[te], ty=y[te])
    return _DATA["x"], _DATA["y"], _DATA["tx"], _DATA["ty"]


def train(ctx: Context) -> None:
    import torch
    from torch import nn

    x, y, tx, ty = _data()
    args = ctx.args
    batch = ctx.batch_size or int(args.get("batch", 16))
    torch.manual_seed(ctx.seed)
    hidden = int(args.get("hidden", 64))
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10)).to(ctx.device)
    lr = float(args.get("lr", 0.02))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    net = ctx.data_parallel(model)
    noise = ctx.gradient_noise(net, max(1, batch // max(ctx.num_shards, 1)))
    state = ctx.load_state()
    if state is not None:
        model.load_state_dict(state["model"])
        if "noise" in state:
            noise.estimate.load_state_dict(state["noise"])
    every = int(args.get("eval_every", 10))

    def evaluate() -> None:
        with torch.no_grad():
            out = model(tx)
            ctx.report(holdout_loss=nn.functional.cross_entropy(out, ty).item(),
                       accuracy=(out.argmax(1) == ty).float().mean().item())

    evaluate()
    for step in ctx.steps():
        g = torch.Generator().manual_seed(ctx.seed * 1_000_003 + step)
        idx = ctx.shard(torch.randint(0, len(y), (batch,), generator=g))
        loss = nn.functional.cross_entropy(net(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        noise.observe()
        for group in opt.param_groups:
            group["lr"] = lr * ctx.lr_scale
        opt.step()
        if (step + 1) % every == 0:
            evaluate()
    evaluate()
    ctx.report(batch=float(batch), lr_scale=ctx.lr_scale)
    ctx.save_state({"model": model.state_dict(), "noise": noise.estimate.state_dict()})
