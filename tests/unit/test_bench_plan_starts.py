"""bench/bench_plan_starts.py on a short stretch of the steady state: Hadar's own warm start gives
every kept answer again; a cold start takes more simplex iterations."""

from __future__ import annotations

import sys

import pytest

from hadar.policies.hadar import plan_lp
from hadar.solve import highs
from tests.helpers import load_bench

bench = load_bench("bench_plan_starts")


def test_the_warm_replay_is_hadars_own_answer(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                                               ) -> None:
    monkeypatch.setattr(sys, "argv", ["bench_plan_starts.py", "--window", "1500", "1520", "--skip", "20",
                                      "--lps", "30"])
    bench.main()
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("30 plan LPs of window 1500-1520")
    rows = {line[:38].strip(): line[38:].split() for line in out[2:9]}
    assert set(rows) == {label for _, label, _, _ in bench.WAYS}
    warm, cold = rows["warm (Hadar's)"], rows["cold (presolve, crash)"]
    assert warm[2:] == ["0", "30"]  # no other optimum, every answer the same
    assert all(rows[label][2] == "0" for label in ("cold (presolve, crash)", "warm, dual simplex",
                                                   "cold, dual simplex", "warm, dual simplex, scaled"))
    assert int(cold[0].replace(",", "")) > int(warm[0].replace(",", ""))
    assert out[9].startswith("warm and cold answers 1e-6 or more apart: 0 of 30 at tolerances of 1e-9")
    assert plan_lp.highs is highs  # the wrapper is gone


def test_the_plan_is_solved_to_1e_9_unscaled_and_the_other_lps_as_highs_would() -> None:
    assert (highs.PLAN.tolerance, highs.PLAN.scale, highs.PLAN.strategy) == (1e-9, 0, 4)  # 4: the primal simplex
    assert (highs.DUAL_PRESOLVE.tolerance, highs.DUAL_PRESOLVE.scale) == (None, None)
    native = highs._native(highs.PLAN)
    assert native.primal_feasibility_tolerance == native.dual_feasibility_tolerance == 1e-9
    assert native.simplex_scale_strategy == 0 and native.simplex_strategy == 4
    assert highs._native(highs.DUAL_PRESOLVE).dual_feasibility_tolerance == 1e-7  # HiGHS's own


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
