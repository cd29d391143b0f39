"""Job functions that misuse the API (each lease of them fails or warns)."""


def no_steps(ctx):
    ctx.save_state({"x": 1})


def bad_state(ctx):
    for _ in ctx.steps():
        pass
    ctx.save_state({"model": object()})


def exits(ctx):
    raise SystemExit(3)
