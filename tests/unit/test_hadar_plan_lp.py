"""The JCT plan's LP keeps its layout from one round to the next (plan_lp.py): an LP of the shape of
the last one must reach HiGHS exactly as if it were built from scratch, and one of another shape
must not get the last one's layout."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from hadar.policies.hadar import keeper, plan_lp
from hadar.policies.hadar.keeper import Work
from hadar.solve import highs
from tests.unit.test_hadar_lp_build import _random_work


def _work(seed: int, shrink: float = 1.0) -> Work:
    """test_hadar_lp_build's random work, with ``shrink`` x its remaining steps."""
    work = _random_work(seed, grouped=False)
    return dataclasses.replace(work, remaining=work.remaining * shrink)


def _handed(monkeypatch: pytest.MonkeyPatch, work: Work, round_s: float, warm: bool, rounds: float = 40.0
            ) -> list[Any]:
    """What the plan over ``rounds`` rounds hands HiGHS (costs, matrix, bounds, names) as plain bytes."""
    seen: list[Any] = []

    def capture(c, a, upper, *, lower=None, col_upper=None, start=None, options=None):
        assert options is highs.PLAN
        names = None if start is None else start.names
        seen.append([c.tobytes(), a.indptr.tobytes(), a.indices.tobytes(), a.data.tobytes(), a.shape,
                     upper.tobytes(), lower.tobytes(), None if names is None else [x.tobytes() for x in names]])
        return None

    monkeypatch.setattr(plan_lp.highs, "minimize", capture)
    monkeypatch.setattr(keeper.closed, "plan", lambda *a: None)  # the LP even where the plan has a closed form
    names = np.arange(work.remaining.size) * 7 + 3 if warm else None
    keeper.jct_plan(work, np.ones(work.remaining.size), round_s, rounds * round_s, warm=highs.Warm() if warm else None,
                    names=names)
    return seen


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("warm", [False, True])
def test_a_kept_layout_hands_highs_what_a_fresh_build_does(monkeypatch: pytest.MonkeyPatch, seed: int,
                                                           warm: bool) -> None:
    before, now = _work(seed), _work(seed, shrink=0.75)  # the same jobs, pairs and periods; less work left
    if now.pairs()[0].size == 0:
        return
    plan_lp._LAST.clear()
    _handed(monkeypatch, before, 360.0, warm)
    kept = _handed(monkeypatch, now, 360.0, warm)
    assert plan_lp._LAST  # the layout was kept, and this solve read it
    plan_lp._LAST.clear()
    assert kept == _handed(monkeypatch, now, 360.0, warm)


def test_another_shape_gets_its_own_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    plan_lp._LAST.clear()
    work = _work(3)
    first = _handed(monkeypatch, work, 360.0, True)
    fewer = Work(work.rates, np.where(np.arange(work.remaining.size) == 0, 0.0, work.remaining), work.scale,
                 work.capacity)  # job 0 done: fewer pairs and rows
    other = _handed(monkeypatch, fewer, 360.0, True)
    plan_lp._LAST.clear()
    assert other == _handed(monkeypatch, fewer, 360.0, True) and other[0][4] != first[0][4]
    longer = _handed(monkeypatch, fewer, 360.0, True, rounds=400.0)  # a longer plan: more periods
    plan_lp._LAST.clear()
    assert longer == _handed(monkeypatch, fewer, 360.0, True, rounds=400.0) and longer[0][4] != other[0][4]
