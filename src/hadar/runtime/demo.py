"""The demo ``hadar run`` uses with no files: 3 logical nodes, 3 GPU types, 6 jobs of 4 families."""

from __future__ import annotations

from hadar.model.cluster import Cluster, Node
from hadar.model.job import Job


def demo_cluster() -> Cluster:
    return Cluster((Node("node-v100", "v100", 2), Node("node-p100", "p100", 1), Node("node-k80", "k80", 1)))


def demo_jobs(scale: float = 1.0) -> list[Job]:
    """Six jobs (one 2-GPU data-parallel job); ``scale`` multiplies every job's steps."""
    spec = [  # (job type, GPUs, steps, arrival s)
        ("ResNet (digits, batch size 32)", 1, 1500, 0.0),
        ("LSTM-LM (batch size 20)", 1, 2500, 0.0),
        ("Transformer (batch size 16)", 1, 1200, 0.0),
        ("Recoder (batch size 64)", 1, 6000, 0.0),
        ("ResNet (digits, batch size 32)", 2, 3000, 5.0),
        ("LSTM-LM (batch size 20)", 1, 2000, 10.0),
    ]
    return [Job(job_id=i, job_type=jt, scale_factor=k, total_steps=max(1, round(steps * scale)), arrival_s=t,
                origin=f"demo job {i}") for i, (jt, k, steps, t) in enumerate(spec)]
