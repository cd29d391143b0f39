"""A small MLP on scikit-learn's 8x8 digits: plain.py is a plain PyTorch script, train.py the same as a hadar job."""

import torch
from sklearn.datasets import load_digits
from torch import nn


def train(ctx):
    device = ctx.device
    torch.manual_seed(0)
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32).to(device) / 16.0
    y = torch.tensor(digits.target).to(device)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    state = ctx.load_state()
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    for step in ctx.steps():
        batch = torch.randint(0, len(x), (64,), generator=torch.Generator().manual_seed(step)).to(device)
        loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 500 == 0:
            print(f"step {step}: loss {loss.item():.3f}")
    accuracy = (model(x).argmax(1) == y).float().mean().item()
    ctx.report(accuracy=accuracy)
    ctx.save_state({"model": model.state_dict(), "optimizer": opt.state_dict()})
