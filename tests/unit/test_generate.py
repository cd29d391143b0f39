from __future__ import annotations

import itertools

import numpy as np
import pytest

from hadar.errors import InputError
from hadar.sim.generate import TEMPLATES, JobGenerator


def take(gen, n):
    return list(itertools.islice(iter(gen), n))


def test_seeded_and_reproducible(table):
    a = take(JobGenerator(table, 2.0, seed=3, multi_gpu=True), 50)
    b = take(JobGenerator(table, 2.0, seed=3, multi_gpu=True), 50)
    c = take(JobGenerator(table, 2.0, seed=4, multi_gpu=True), 50)
    assert a == b and a != c


def test_gavel_distributions(table):
    jobs = take(JobGenerator(table, 2.0, seed=0, multi_gpu=True), 4000)
    sf = np.array([j.scale_factor for j in jobs])
    for k, share in ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05)):
        assert np.mean(sf == k) == pytest.approx(share, abs=0.025)
    gaps = np.diff([j.arrival_s for j in jobs])
    assert jobs[0].arrival_s == 0.0
    assert gaps.mean() == pytest.approx(1800.0, rel=0.06)
    hours = np.array([j.total_steps / table.get(j.job_type, j.scale_factor, "v100") for j in jobs]) / 3600
    assert hours.min() >= 0.5 - 1e-9 and hours.max() <= 166.7
    assert hours.mean() == pytest.approx(16.8, rel=0.12)
    distributed = {m for m, d in TEMPLATES if d}
    assert all(j.job_type in distributed for j in jobs if j.scale_factor > 1)


def test_single_gpu_by_default_and_priorities(table):
    jobs = take(JobGenerator(table, 1.0, seed=0, multi_priority=True), 1000)
    assert {j.scale_factor for j in jobs} == {1}
    assert np.mean([j.priority_weight == 5.0 for j in jobs]) == pytest.approx(0.2, abs=0.04)
    assert len({j.job_type for j in jobs}) == 26


def test_rate_must_be_positive(table):
    with pytest.raises(InputError, match="jobs-per-hour must be positive"):
        JobGenerator(table, 0)
