"""The closed-form optima of Hadar's horizon and JCT-plan LPs (policies/hadar/closed.py): where they
apply they give what HiGHS gives (the LP is solved with them turned off, on the same work), and
where capacity binds or a job's fastest type is not unique they step aside."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hadar.policies.hadar import closed
from hadar.policies.hadar.keeper import Work, horizon, jct_plan
from hadar.policies.hadar.plan_lp import Periods

ROUND_S = 360.0


def work(rates, remaining, scale, capacity) -> Work:
    return Work(np.array(rates, dtype=float), np.array(remaining, dtype=float), np.array(scale, dtype=float),
                np.array(capacity, dtype=float))


def roomy(seed: int, m: int = 8, n: int = 3, capacity: int = 64) -> Work:
    """Jobs of random rates and work on a cluster where they all fit on their fastest types at once."""
    rng = np.random.default_rng(seed)
    rates = rng.uniform(0.5, 5.0, (m, n))
    rates[rng.uniform(size=(m, n)) < 0.2] = 0.0
    rates[:, 0] = np.maximum(rates[:, 0], 0.5)
    return work(rates, rng.uniform(2e3, 2e6, m), rng.choice([1, 2, 4], m), [capacity] * n)


def solved(monkeypatch: pytest.MonkeyPatch, fn, *args, **kwargs):
    """``fn`` with the closed forms turned off: HiGHS's answer."""
    with monkeypatch.context() as mp:
        mp.setattr(closed, "horizon", lambda *a: None)
        mp.setattr(closed, "plan", lambda *a: None)
        return fn(*args, **kwargs)


@pytest.mark.parametrize("seed", range(8))
def test_the_closed_horizon_is_the_lp_optimum(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    w = roomy(seed)
    ii, rr = w.pairs()
    assert closed.horizon(w.remaining, w.rates, w.scale, w.capacity, w.gangs(), ii, rr) is not None
    got, lp = horizon(w), solved(monkeypatch, horizon, w)
    assert got.s == lp.s  # both rounded to the millisecond
    # its plan is a feasible one of the same time: the keeper's bound from it is the horizon itself
    assert got.bound_s(w) == pytest.approx(got.s, abs=1e-3)
    left = dataclasses.replace(w, remaining=w.remaining * np.linspace(0.2, 1.0, w.remaining.size))
    assert got.bound_s(left) >= solved(monkeypatch, horizon, left).s - 1e-3


def test_the_closed_horizon_steps_aside_where_capacity_binds() -> None:
    # two 4000-step jobs share one fast GPU: the capacity sets 2000 s, not either job's 1000 s
    w = work([[4.0], [4.0]], [4000, 4000], [1, 1], [1])
    ii, rr = w.pairs()
    assert closed.horizon(w.remaining, w.rates, w.scale, w.capacity, w.gangs(), ii, rr) is None
    assert horizon(w).s == pytest.approx(2000.0)


def test_the_closed_horizon_steps_aside_for_a_job_no_type_can_run() -> None:
    w = work([[4.0, 0.0], [0.0, 0.0]], [4000, 4000], [1, 1], [2, 2])
    ii, rr = w.pairs()
    assert closed.horizon(w.remaining, w.rates, w.scale, w.capacity, w.gangs(), ii, rr) is None
    assert horizon(w).s == float("inf")


@pytest.mark.parametrize("seed", range(8))
def test_the_closed_plan_is_the_lp_optimum(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    w = roomy(seed)
    total = 3 * horizon(w).s
    got = jct_plan(w, np.ones(w.remaining.size), ROUND_S, total)
    lp = solved(monkeypatch, jct_plan, w, np.ones(w.remaining.size), ROUND_S, total)
    assert got is not None and lp is not None
    assert np.array_equal(got[0], lp[0]) and np.array_equal(got[1], lp[1])  # rounded to 1e-9 of a round
    # every job runs a whole round on its fastest type, or as much of it as finishes the job
    fastest = np.where(w.rates > 0, w.remaining[:, None] / np.where(w.rates > 0, w.rates, 1.0), np.inf).argmin(1)
    assert (got[0].argmax(axis=1) == fastest).all()


def test_the_closed_plan_steps_aside_where_the_fast_gpus_are_short(monkeypatch: pytest.MonkeyPatch) -> None:
    # one fast GPU, two jobs that prefer it: the LP decides who waits (the short one goes first)
    w = work([[4.0, 1.0], [4.0, 1.0]], [400, 40000], [1, 1], [1, 4])
    called = []
    real = closed.plan
    monkeypatch.setattr(closed, "plan", lambda *a: called.append(real(*a)) or called[-1])
    x, now = jct_plan(w, np.ones(2), ROUND_S, 3 * horizon(w).s)
    assert called == [None]
    assert now[0] == pytest.approx(1.0) and x[0].sum() > 0  # the short job finishes this round


def test_the_closed_plan_steps_aside_for_a_tie_between_types() -> None:
    # job 0 runs as fast on either type: which one the LP picks is the LP's (warm-start) choice
    w = work([[2.0, 2.0], [4.0, 1.0]], [4000, 4000], [1, 1], [4, 4])
    ii, rr = w.pairs()
    dur = w.remaining[ii] / w.rates[ii, rr] / 3600.0
    lens = np.array([0.1, 0.1, 0.1, 0.1, 10.0])
    args = (dur, (ii, rr), Periods(lens, 3), np.ones(2), w.scale, w.gangs(), w.capacity, w.remaining > 0)
    assert closed.plan(*args) is None
    untied = work([[2.0, 1.9], [4.0, 1.0]], [4000, 4000], [1, 1], [4, 4])
    dur = untied.remaining[ii] / untied.rates[ii, rr] / 3600.0
    assert closed.plan(dur, *args[1:]) is not None
