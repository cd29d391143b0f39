"""bench/bench_jct_reference.py's search model: a gang runs only on a type with at least as many GPUs."""

from __future__ import annotations

import numpy as np
import pytest

from hadar.model.cluster import Cluster
from hadar.model.job import Job
from hadar.model.throughput import ThroughputTable
from tests.helpers import load_bench

# a 2-GPU job runs twice as fast on "fast", but the cluster has one fast GPU
TABLE = ThroughputTable({("a", 2): {"fast": 4.0, "slow": 2.0}, ("a", 1): {"fast": 2.0, "slow": 1.0}})
CLUSTER = Cluster.from_counts({"fast": 1, "slow": 2})


def test_a_gang_larger_than_a_type_is_never_searched_onto_it() -> None:
    bench = load_bench("bench_jct_reference")
    jobs = [Job(job_id=0, job_type="a", scale_factor=2, total_steps=400, arrival_s=0.0),
            Job(job_id=1, job_type="a", scale_factor=1, total_steps=200, arrival_s=0.0)]
    model = bench.EventModel(jobs, CLUSTER, TABLE)
    fast, slow = CLUSTER.gpu_types.index("fast"), CLUSTER.gpu_types.index("slow")
    assert model.fastest == [[slow], [fast, slow]]
    # the gang on the two slow GPUs (200 s) while the 1-GPU job runs on the fast one (100 s)
    assert model.completions(np.array([0.0, 1.0]), np.zeros((2, 2), dtype=bool)).tolist() == pytest.approx(
        [200.0, 100.0])
    # a search that bans types never leaves the gang with only a type too small for it
    _rank, ban, avg = bench.anneal(model, 300, seed=0)
    assert not ban[0, slow] and avg == pytest.approx(150.0)
