"""hadar.solve.highs reuses one HiGHS instance per thread and hands it its options only when they
change: solves that take turns between option sets must give what a fresh instance gives."""

from __future__ import annotations

import threading

import numpy as np

from hadar.solve import highs


def _lp(seed: int) -> tuple[np.ndarray, highs.Csc, np.ndarray]:
    rng = np.random.default_rng(seed)
    m, n = 6, 10
    dense = rng.random((m, n)) * (rng.random((m, n)) < 0.6)
    return -rng.random(n), highs.Csc.from_sparse(dense), rng.uniform(1.0, 3.0, m)


def _solve(seed: int, options: highs.Options) -> bytes:
    c, a, b = _lp(seed)
    res = highs.solve(c, a, b, col_upper=np.full(c.size, 2.0), options=options)
    assert res.status == 0
    return res.x.tobytes()


def _fresh(seed: int, options: highs.Options) -> bytes:
    """The answer of a new instance (a thread of its own has one)."""
    out: list[bytes] = []
    t = threading.Thread(target=lambda: out.append(_solve(seed, options)))
    t.start()
    t.join()
    return out[0]


def test_solves_taking_turns_between_option_sets_match_fresh_instances() -> None:
    turns = [highs.DUAL, highs.DUAL_PRESOLVE, highs.DUAL_PRESOLVE, highs.DUAL, highs.DUAL_PRESOLVE]
    for seed, options in enumerate(turns * 2):
        assert _solve(seed, options) == _fresh(seed, options)
    assert highs._LOCAL.options is highs._native(turns[-1])  # the last set is the one the instance holds
