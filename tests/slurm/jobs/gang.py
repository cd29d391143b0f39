"""A data-parallel job for the Slurm gang tests: each step all-reduces the ranks' numbers (gloo on the CPU).

Each rank writes what it was given (its ranks and rendezvous from the environment, its Slurm node) to
``ctx.args["out"]/rank-<r>.json``; the job reports the all-reduced sum (1 + 2 + ... + world) and how many
steps its trajectory has seen, and saves that count (rank 0's is the one written).
"""

import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist


def train(ctx):
    state = ctx.load_state() or {"seen": 0}
    seen = int(state["seen"])
    total = 0.0
    for _ in ctx.steps():
        t = torch.tensor([float(ctx.rank + 1)])
        dist.all_reduce(t)
        total = float(t.item())
        seen += 1
        time.sleep(float(ctx.args.get("step_s", 0.02)))
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID", "SLURMD_NODENAME")
    seen_env = {k: os.environ.get(k, "") for k in keys}
    out = Path(ctx.args["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank-{ctx.rank}.json").write_text(json.dumps({**seen_env, "rank": ctx.rank, "world": ctx.world_size,
                                                           "group_size": dist.get_world_size()}))
    ctx.report(sum=total, seen=seen)
    ctx.save_state({"seen": seen, "writer": ctx.rank})
