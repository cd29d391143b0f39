"""A job without torch (for the Slurm executor's contract): each step sleeps ``step_s`` seconds.

A Slurm lease is a new process; this job's starts in a fraction of a second, where one that imports
torch spends seconds before its first step on a busy machine. It saves no state (the contract counts
steps, not models): the runner warns once that it restarts from scratch at every lease.
"""

import time


def train(ctx):
    step_s = float(ctx.args.get("step_s", 0.02))
    n = 0
    for _ in ctx.steps():
        time.sleep(step_s)
        n += 1
    ctx.report(steps=n)
