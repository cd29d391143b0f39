"""A horizon computed ahead (starts.py): taken only for the very work it was computed on, and then the
answer a solve would give; a run decides as it does when every horizon is solved."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hadar.config import parse_cluster
from hadar.policies.hadar import starts
from hadar.policies.hadar.keeper import Work, horizon_s
from hadar.policies.hadar.starts import Horizons, Starts
from hadar.sim.generate import JobGenerator
from hadar.sim.run import simulate


def _work(remaining: float = 5e4) -> Work:
    rates = np.array([[2.0, 1.0, 0.5], [1.5, 1.2, 0.0], [3.0, 2.0, 1.0]])
    return Work(rates, np.array([remaining, 8e4, 3e4]), np.array([1, 2, 1]), np.array([2, 2, 2]))


def test_a_work_key_changes_with_any_bit_of_the_work() -> None:
    names = np.array([7, 3, 9])
    w = _work()
    assert w.key(names) == _work().key(names)
    assert w.key(names) != _work(np.nextafter(5e4, 1e5)).key(names)
    assert w.key(names) != w.key(np.array([7, 3, 8]))
    assert w.key(names) != Work(w.rates, w.remaining, w.scale, np.array([2, 2, 3])).key(names)


def test_the_horizon_kept_ahead_is_taken_for_that_work_only(monkeypatch: pytest.MonkeyPatch) -> None:
    names = np.array([7, 3, 9])
    st = Starts()
    hz = Horizons(st, names)
    after = _work(4e4)
    h = hz.after(after)
    assert st.ahead is not None and h == horizon_s(after)  # the cold answer
    solves: list[int] = []
    monkeypatch.setattr(starts, "horizon_s", lambda *a, **k: solves.append(1) or horizon_s(*a, **k))
    nxt = Horizons(Starts(ahead=st.ahead), names)
    assert nxt.now(_work(4e4)) == h and not solves  # the same work: taken, not solved
    assert nxt.starts is not None and nxt.starts.ahead is None  # used once
    other = Horizons(Starts(ahead=st.ahead), names)
    assert other.now(_work(4e4 + 1)) == horizon_s(_work(4e4 + 1)) and solves == [1]
    memo = Starts(ahead=st.ahead).memo()
    assert Starts.of(memo).ahead == st.ahead


def test_a_run_decides_as_it_does_when_every_horizon_is_solved(table, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = list(itertools.islice(JobGenerator(table, 2.0, seed=5, multi_gpu=True), 30))
    taken: list[int] = []
    real_now = Horizons.now

    def now(self: Horizons, work: Work) -> float:
        st = self.starts
        if st is not None and st.ahead is not None and self.names is not None and st.ahead[0] == work.key(self.names):
            taken.append(1)
        return real_now(self, work)

    monkeypatch.setattr(Horizons, "now", now)
    kept = simulate(jobs, parse_cluster("4:4:4"), table, "hadar")
    assert taken, "no round went as placed: the test needs a workload where one does"
    real_memo = Starts.memo  # now no horizon is kept ahead: every one is solved
    monkeypatch.setattr(Starts, "memo", lambda self: {k: v for k, v in real_memo(self).items() if k != starts._AHEAD})
    solved = simulate(jobs, parse_cluster("4:4:4"), table, "hadar")
    assert kept.rows == solved.rows
