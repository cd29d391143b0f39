"""bench/bench_plan_starts.py on a short stretch of the steady state: Hadar's own warm start gives
every kept answer again; a cold start takes more simplex iterations."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from hadar.policies.hadar import plan_lp
from hadar.solve import highs
from tests.helpers import load_bench

bench = load_bench("bench_plan_starts")
costs = plan_lp._costs


def test_the_warm_replay_is_hadars_own_answer(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                                               ) -> None:
    monkeypatch.setattr(sys, "argv", ["bench_plan_starts.py", "--window", "1500", "1520", "--skip", "20",
                                      "--lps", "30"])
    bench.main()
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("30 plan LPs of window 1500-1520")
    rows = {line[:34].strip(): line[34:].split() for line in out[2:7]}
    warm, cold = rows["warm (Hadar's)"], rows["cold (presolve, crash)"]
    assert warm[2:] == ["0", "30"]  # no other optimum, every answer the same
    assert int(cold[0].replace(",", "")) > int(warm[0].replace(",", ""))
    assert set(rows) >= {"tie rule by midpoint, warm", "tie rule by midpoint, cold"}
    assert out[7].startswith("warm and cold answers 1e-6 or more apart: ") and out[7].endswith("by midpoint")
    assert plan_lp.highs is highs and plan_lp._costs is costs  # the wrappers are gone
    assert plan_lp.TIE_SCALE == "first"  # Hadar's own rule, untouched


def test_the_tie_rule_by_midpoint_charges_each_period_its_share() -> None:
    weight, ii, dur, lens = np.array([2.0]), np.array([0, 0]), np.array([1.0, 1.5]), np.array([1.0, 3.0])
    mid = np.array([0.5, 2.5])
    first = plan_lp._costs(weight, ii, dur, lens)
    by_mid = plan_lp._costs(weight, ii, dur, lens, scale="midpoint")
    assert first[:2].tolist() == (2.0 * mid).tolist() == by_mid[:2].tolist()  # the fastest type: no tie charge
    assert first[2:4].tolist() == (2.0 * (mid + plan_lp.TIE * 1.0 * 0.5)).tolist()  # the first period's length
    assert by_mid[2:4].tolist() == (2.0 * (mid + plan_lp.TIE * mid * 0.5)).tolist()  # each period's midpoint
    assert first[4] == by_mid[4]  # the overrun's price


def test_bad_counts_are_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["bench_plan_starts.py", "--lps", "0"])
    with pytest.raises(SystemExit) as e:
        bench.main()
    assert e.value.code == 2 and capsys.readouterr().err.startswith("bench_plan_starts: --skip")


def test_a_window_with_no_plan_lp_is_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    monkeypatch.setattr(sys, "argv", ["bench_plan_starts.py", "--window", "0", "5", "--skip", "100000"])
    with pytest.raises(SystemExit) as e:
        bench.main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("bench_plan_starts: no plan LP") and len(err.splitlines()) == 1
