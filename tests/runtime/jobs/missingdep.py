"""A job whose module needs a package the workers do not have: the driver's check (which never runs the
file) accepts it; every lease fails on import, until the job ends failed."""

import hadar_test_no_such_package  # noqa: F401


def train(ctx):
    for _ in ctx.steps():
        pass
