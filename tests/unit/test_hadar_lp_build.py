"""Hadar's keeper LPs are built column by column: the arrays handed to HiGHS must be exactly those
that ``highs.Csc.of`` builds from the (row, column, value) triplets (the plan LP is degenerate: any
other order or value can end at another optimum)."""

from __future__ import annotations

import numpy as np
import pytest

from hadar.policies.hadar import keeper
from hadar.policies.hadar.keeper import Work, horizon_s, round_plan
from hadar.solve import highs


def _triplets(ii, rr, frac, scale, m, n, offset):
    """The former builder: demand rows i, capacity rows m + r and job rows m + n + i for columns offset.."""
    k = ii.size
    cols = offset + np.arange(k)
    return (np.concatenate([ii, m + rr, m + n + ii]), np.concatenate([cols, cols, cols]),
            np.concatenate([-frac, scale[ii].astype(float), np.ones(k)]))


def _horizon_matrix(work: Work) -> highs.Csc:
    ii, rr = work.pairs()
    m, n = work.rates.shape
    k = ii.size
    frac = work.rates[ii, rr] * keeper._HOUR / work.remaining[ii]
    rows, cols, vals = _triplets(ii, rr, frac, work.scale, m, n, 0)
    rows = np.concatenate([rows, m + np.arange(n), m + n + np.arange(m)])
    cols = np.concatenate([cols, np.full(n + m, k)])
    vals = np.concatenate([vals, -work.capacity.astype(float), -work.gangs()])
    return highs.Csc.of(rows, cols, vals, (m + n + m, k + 1))


def _round_matrix(work: Work, round_s: float) -> highs.Csc:
    ii, rr = work.pairs()
    m, n = work.rates.shape
    k = ii.size
    per_h = work.rates[ii, rr] * keeper._HOUR / work.remaining[ii]
    r1, c1, v1 = _triplets(ii, rr, per_h * (round_s / keeper._HOUR), work.scale, m, n, 0)
    r2, c2, v2 = _triplets(ii, rr, per_h, work.scale, m, n, k)
    r2 = np.where(r2 >= m, r2 + m + n, r2)
    rows = np.concatenate([r1, r2, 2 * m + n + np.arange(n), 2 * m + 2 * n + np.arange(m)])
    cols = np.concatenate([c1, c2, np.full(n + m, 2 * k)])
    vals = np.concatenate([v1, v2, -work.capacity.astype(float), -work.gangs()])
    return highs.Csc.of(rows, cols, vals, (2 * (m + n) + m, 2 * k + 1))


def _random_work(seed: int, grouped: bool) -> Work:
    rng = np.random.default_rng(seed)
    m, n = int(rng.integers(1, 30)), int(rng.integers(1, 5))
    rates = rng.uniform(0.1, 10.0, (m, n)) * (rng.random((m, n)) < 0.8)
    remaining = rng.uniform(100.0, 1e6, m) * (rng.random(m) < 0.9)
    scale = rng.choice([1, 2, 4, 8], m)
    capacity = rng.integers(0, 40, n)  # a type with no GPU left gives explicit zeros
    count = rng.integers(1, 6, m).astype(float) if grouped else None
    return Work(rates, remaining, scale, capacity, count)


def _same(got: highs.Csc, want: highs.Csc) -> None:
    assert got.shape == want.shape
    for a, b in ((got.indptr, want.indptr), (got.indices, want.indices), (got.data, want.data)):
        assert a.dtype == b.dtype
        assert a.tobytes() == b.tobytes()  # bit for bit (-0.0 included)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("grouped", [False, True])
def test_keeper_lps_get_the_matrix_csc_of_builds(monkeypatch: pytest.MonkeyPatch, seed: int, grouped: bool) -> None:
    work = _random_work(seed, grouped)
    seen: list[highs.Csc] = []

    def capture(c, a, *args, **kw):
        seen.append(a)
        return None  # "no optimum": each function then takes its fallback

    monkeypatch.setattr(keeper.highs, "minimize", capture)
    monkeypatch.setattr(keeper.closed, "horizon", lambda *a: None)  # the LP even where its optimum has a closed form
    if work.pairs()[0].size == 0:
        assert horizon_s(work) == 0.0
        return
    horizon_s(work)
    round_plan(work, np.ones(work.rates.shape), 360.0, 7200.0)
    assert len(seen) == 2
    _same(seen[0], _horizon_matrix(work))
    _same(seen[1], _round_matrix(work, 360.0))
