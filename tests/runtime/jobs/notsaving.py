"""A user job that never saves its state (the runtime warns; every lease starts from scratch)."""


def train(ctx):
    n = 0
    for _ in ctx.steps():
        n += 1
    ctx.report(steps_this_lease=n)
