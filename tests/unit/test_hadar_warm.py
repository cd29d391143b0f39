"""Hadar's warm starts are its default: they must decide exactly as cold starts do (keeper.py's
rounding of LP answers and the plan's tie rule; highs.py's bases read from the basic variables)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import sparse

from hadar.config import parse_cluster
from hadar.policies.hadar.keeper import Work, horizon_s, jct_plan
from hadar.sim.generate import JobGenerator
from hadar.sim.run import simulate
from hadar.solve import highs


def test_a_run_is_the_same_from_warm_and_from_cold_starts(table) -> None:
    jobs = list(itertools.islice(JobGenerator(table, 6.0, seed=11, multi_gpu=True), 40))
    runs = [simulate(jobs, parse_cluster("4:4:4"), table, "hadar", policy_kwargs={"warm_start": warm})
            for warm in (True, False)]
    assert runs[0].rows == runs[1].rows
    assert runs[0].summary["avg_jct_s"] == runs[1].summary["avg_jct_s"]


def test_the_plan_puts_work_on_the_faster_type_when_it_finishes_as_early_on_either() -> None:
    # 100 steps at 2 or 1 steps/s: 50 s or 100 s, either within the first third of a 360 s round, so the
    # mean-time objective alone is indifferent; the tie rule picks the faster type, from any start
    w = Work(np.array([[2.0, 1.0]]), np.array([100.0]), np.array([1]), np.array([1, 1]))
    for warm in (None, highs.Warm()):
        got = jct_plan(w, np.ones(1), 360.0, 720.0, warm=warm, names=None if warm is None else np.arange(1))
        assert got is not None
        assert got[0][0, 1] == 0.0 and got[0][0, 0] == pytest.approx(50.0 / 360.0, abs=1e-9)
        assert got[1][0] == 1.0


def test_lp_answers_are_rounded_so_round_off_cannot_decide() -> None:
    rng = np.random.default_rng(2)
    w = Work(rng.uniform(0.5, 5.0, (9, 3)), rng.uniform(2e3, 2e5, 9), rng.choice([1, 2, 4], 9), np.array([4, 8, 4]))
    h = horizon_s(w)
    assert h == round(h, 3)  # the millisecond
    got = jct_plan(w, np.ones(9), 360.0, 3 * h)
    assert got is not None
    assert np.array_equal(got[0], np.round(got[0], 9)) and np.array_equal(got[1], np.round(got[1], 9))


def test_a_kept_basis_has_the_statuses_highs_reports() -> None:
    rng = np.random.default_rng(4)
    a = sparse.random(30, 60, density=0.2, random_state=rng, format="csc")
    c, b = -rng.uniform(0, 1, 60), rng.uniform(1, 2, 30)
    lower = np.concatenate([np.full(24, -np.inf), b[24:]])  # the last 6 rows are equalities
    warm = highs.Warm()
    res = highs.minimize(c, a, b, lower=lower, start=highs.Start(warm, key="lp"))
    assert res is not None and warm.basis is not None
    native = warm.basis.native()
    cols, rows = warm.basis.codes
    assert cols == bytes(v.value for v in native.col_status)
    own = np.array([v.value for v in native.row_status])
    ours = np.frombuffer(rows, dtype=np.uint8)
    assert np.array_equal(ours[:24], own[:24])
    # an equality row's bounds are one value: nonbasic there, HiGHS says lower or upper, the basis says upper
    assert np.array_equal(ours[24:], np.where(own[24:] == 1, 1, 2))
    assert cols.count(1) + rows.count(1) == 30  # one basic variable per row



def test_hadare_with_hadars_lps_starts_them_warm_and_decides_as_cold(table, monkeypatch: pytest.MonkeyPatch) -> None:
    import hadar.policies.hadare as hadare

    kept: list[int] = []
    real = hadare.warm_memo
    monkeypatch.setattr(hadare, "warm_memo", lambda warm: kept.append(len(real(warm))) or real(warm))
    jobs = list(itertools.islice(JobGenerator(table, 6.0, seed=3, multi_gpu=True), 24))
    kw = {"plan": "lp", "keep_slack": 0.01}
    runs = [simulate(jobs, parse_cluster("4:4:4"), table, "hadare", policy_kwargs={**kw, "warm_start": warm})
            for warm in (True, False)]
    assert runs[0].rows == runs[1].rows
    assert max(kept) == 2  # warm: the plan's and the horizon LPs' bases go to the next round
