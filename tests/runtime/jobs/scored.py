"""A job whose reported ``score`` is its step number (reported every step), for jobs that end at a target
score: its state keeps the steps it did, so a test can see where it stopped."""


def train(ctx):
    state = ctx.load_state() or {"done": 0}
    for step in ctx.steps():
        state["done"] += 1
        ctx.report(score=step)
    ctx.report(finished=1.0 if ctx.finished else 0.0)
    ctx.save_state(state)
