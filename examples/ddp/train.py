"""A data-parallel job: an MLP classifier on a synthetic data set, trained on all the GPUs of its lease.

Every rank builds the same model and data; ``ctx.data_parallel`` wraps the model in torch's
DistributedDataParallel (gradients averaged over the ranks each step: NCCL on GPUs, gloo on
CPUs); each step every rank trains on its own slice (``ctx.shard``) of the same global batch.
With ``gpus: 1`` the same code trains on one GPU. Args: ``lr`` (default 0.05),
``batch_per_gpu`` (default 32), ``hidden`` (default 64).
"""

import torch
from sklearn.datasets import make_classification
from torch import nn


def build(ctx):
    x, y = make_classification(n_samples=4000, n_features=20, n_informative=12, n_classes=4, random_state=7)
    x = torch.tensor(x, dtype=torch.float32, device=ctx.device)
    y = torch.tensor(y, device=ctx.device)
    torch.manual_seed(ctx.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    hidden = int(ctx.args.get("hidden", 64))
    model = nn.Sequential(nn.Linear(20, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                          nn.Linear(hidden, 4)).to(ctx.device)
    return (x[:3500], y[:3500]), (x[3500:], y[3500:]), model


def train(ctx):
    (x, y), (x_test, y_test), model = build(ctx)
    opt = torch.optim.SGD(model.parameters(), lr=float(ctx.args.get("lr", 0.05)), momentum=0.9)
    state = ctx.load_state()
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    net = ctx.data_parallel(model)
    per_gpu = int(ctx.args.get("batch_per_gpu", 32))
    for step in ctx.steps():
        # the global batch of this step, the same on every rank; each rank trains on its own slice
        batch = torch.randint(0, len(x), (per_gpu * ctx.num_shards,), generator=torch.Generator().manual_seed(step))
        mine = ctx.shard(batch).to(ctx.device)
        loss = nn.functional.cross_entropy(net(x[mine]), y[mine])
        opt.zero_grad()
        loss.backward()  # DDP averages the gradients over the ranks here
        opt.step()
        if step % 200 == 0 and ctx.rank == 0:
            print(f"step {step}: loss {loss.item():.3f}")
    if ctx.rank == 0:
        with torch.no_grad():
            accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
        ctx.report(accuracy=accuracy)
    ctx.save_state({"model": model.state_dict(), "optimizer": opt.state_dict()})
