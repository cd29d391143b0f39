"""A user job written only against hadar's documented job API (docs/jobs.md): linear regression.

The state keeps ``seen``, the number of steps on the trajectory the job resumes from: when the job
is done it equals the job's step count exactly if every resume started from the last committed
checkpoint (no step lost, none done twice). Args: ``fail``: "" (never), "first" (raise in the job's
first lease, once), "resume" (once, in the first lease that resumed from a checkpoint, after training
and saving), "always" (every lease, with a two-line, coloured message); ``marker``: a file that
records the one-time failure; ``lr`` (default 0.05); ``step_s``: extra seconds per step (a heavier model).
"""

import os
import time

import torch


def train(ctx):
    torch.manual_seed(0)
    true_w = torch.arange(1.0, 9.0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=float(ctx.args.get("lr", 0.05)))
    state = ctx.load_state()
    seen = 0
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        seen = int(state["seen"])
    fail = ctx.args.get("fail", "")
    if fail == "always":
        raise RuntimeError("\x1b[31mthe job's code failed\x1b[0m\nsecond line of the reason")
    if fail == "first" and state is None and _first_time(ctx):
        raise ValueError("failing on the first lease, once")
    loss = torch.tensor(float("nan"))
    for step in ctx.steps():
        x = torch.randn(32, 8, generator=torch.Generator().manual_seed(step))
        loss = ((model(x).squeeze(1) - (x @ true_w + 0.5)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += 1
        time.sleep(float(ctx.args.get("step_s", 0.0)))
    print(f"lease done: {seen} steps seen")
    ctx.report(loss=loss.item(), seen=seen)
    ctx.save_state({"model": model.state_dict(), "optimizer": opt.state_dict(), "seen": seen})
    if fail == "resume" and state is not None and _first_time(ctx):
        raise RuntimeError("failing after saving, once, in a lease that resumed")


def _first_time(ctx):
    """True the first time it is called for this job (across workers: a marker file)."""
    marker = ctx.args["marker"]
    if os.path.exists(marker):
        return False
    with open(marker, "w") as f:
        f.write("failed once\n")
    return True
