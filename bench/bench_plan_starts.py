"""How much the JCT plan LP's answer depends on how it is solved (issue 19, item 2).

Runs Hadar on Gavel's steady state in this process (``hadar simulate --generate --jobs-per-hour 2
--multi-gpu --cluster 36:36:36 --seed 0 --window A B --policy hadar``) and keeps, after the first
``--skip`` plan LPs that reach HiGHS, the next ``--lps`` of them with the answer each got from its
warm start (the last plan's basis, mapped by name: what Hadar runs, under ``highs.PLAN``: the
primal simplex, no scaling, feasibility tolerances of 1e-9). Then it solves each kept LP again
other ways: from a cold start (HiGHS's presolve and crash); with the dual simplex (steepest edge)
from the warm and the cold start, and scaled; and under HiGHS's own tolerances (1e-7, scaled,
the dual simplex: what Hadar ran until stop 37) from the warm and the cold start. Per way it
prints simplex iterations, HiGHS seconds, and in how many LPs the answer is off Hadar's own by
1e-6 or more (another optimum) or within 1e-9 of it (the same one); a way that ends elsewhere
would move Hadar's decisions. The last line says in how many LPs the warm and the cold answers
end 1e-6 or more apart, at either tolerance.

    .venv/bin/python bench/bench_plan_starts.py [--window A B] [--skip N] [--lps N]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import sys
import time
from typing import Any

import numpy as np

from hadar.cli import main as hadar_main
from hadar.policies.hadar import plan_lp
from hadar.solve import highs


class _Enough(Exception):
    pass


def capture(window: tuple[int, int], skip: int, lps: int) -> list[dict[str, Any]]:
    """The plan LPs ``skip`` .. ``skip + lps`` of the run, each with its warm start and answer."""
    kept: list[dict[str, Any]] = []
    seen = [0]
    solve = highs.minimize

    def keep(c: Any, a: Any, upper: Any, *, lower: Any = None, col_upper: Any = None,
             start: highs.Start | None = None, options: highs.Options = highs.DUAL_PRESOLVE) -> Any:
        basis = None if start is None else start.warm.basis
        got = solve(c, a, upper, lower=lower, col_upper=col_upper, start=start, options=options)
        seen[0] += 1
        if seen[0] > skip and got is not None:
            names = None if start is None else start.names
            kept.append({"lp": (c, a, upper, lower, names), "start": basis, "x": got.x})
            if len(kept) >= lps:
                raise _Enough
        return got

    plan_lp.highs = _Proxy(keep)  # only the plan LP's module sees the wrapper
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(_Enough):
            hadar_main(["simulate", "--generate", "--jobs-per-hour", "2", "--multi-gpu", "--cluster", "36:36:36",
                        "--seed", "0", "--window", str(window[0]), str(window[1]), "--policy", "hadar", "--json",
                        "--no-progress", "-q"])
    finally:
        plan_lp.highs = highs
    return kept


class _Proxy:
    """``hadar.solve.highs`` with ``minimize`` replaced."""

    def __init__(self, minimize: Any) -> None:
        self.minimize = minimize

    def __getattr__(self, name: str) -> Any:
        return getattr(highs, name)


_DUAL = dataclasses.replace(highs.PLAN, strategy=1, edge_weights=2)  # the dual simplex, steepest edge
#: the ways: (name, label, options, cold)
WAYS = (("warm", "warm (Hadar's)", highs.PLAN, False),
        ("cold", "cold (presolve, crash)", highs.PLAN, True),
        ("dual", "warm, dual simplex", _DUAL, False),
        ("dual-cold", "cold, dual simplex", _DUAL, True),
        ("scaled", "warm, dual simplex, scaled", dataclasses.replace(_DUAL, scale=None), False),
        ("loose-warm", "warm, tolerances 1e-7 (to stop 37)", highs.DUAL_PRESOLVE, False),
        ("loose-cold", "cold, tolerances 1e-7 (to stop 37)", highs.DUAL_PRESOLVE, True))


def replay(kept: list[dict[str, Any]], options: highs.Options, cold: bool) -> tuple[int, float, list[Any]]:
    """Solve every kept LP under ``options``, from its warm start or ``cold``: iterations, HiGHS
    seconds, the answers (None where none)."""
    its, secs, answers = 0, 0.0, []
    for k in kept:
        c, a, upper, lower, names = k["lp"]
        warm = highs.Warm(None if cold else k["start"])
        t0 = time.perf_counter()
        res = highs.solve(c, a, upper, row_lower=lower, options=options, start=highs.Start(warm, names=names))
        secs += time.perf_counter() - t0
        its += int(highs._LOCAL.highs.getInfo().simplex_iteration_count)
        answers.append(res.x if res.status == 0 else None)
    return its, secs, answers


def apart(xs: list[Any], ys: list[Any]) -> tuple[int, int]:
    """How many answers are 1e-6 or more apart (or one is missing), and how many within 1e-9."""
    gaps = [float(np.abs(x - y).max()) if x is not None and y is not None else float("inf")
            for x, y in zip(xs, ys, strict=True)]
    return sum(g >= 1e-6 for g in gaps), sum(g < 1e-9 for g in gaps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=int, nargs=2, default=(4000, 5000), metavar=("A", "B"))
    ap.add_argument("--skip", type=int, default=3000, help="plan LPs passed over first (the run settles)")
    ap.add_argument("--lps", type=int, default=1500, help="plan LPs kept and solved again")
    args = ap.parse_args()
    if args.skip < 0 or args.lps < 1:
        print("bench_plan_starts: --skip must be >= 0 and --lps >= 1", file=sys.stderr)
        raise SystemExit(2)
    kept = capture((args.window[0], args.window[1]), args.skip, args.lps)
    if not kept:
        print(f"bench_plan_starts: no plan LP past the first {args.skip} reached HiGHS in window "
              f"{args.window[0]}-{args.window[1]}", file=sys.stderr)
        raise SystemExit(2)
    print(f"{len(kept)} plan LPs of window {args.window[0]}-{args.window[1]} after the first {args.skip}")
    print(f"{'start':<38}{'iterations':>12}{'HiGHS s':>10}{'1e-6 off Hadar':>15}{'same':>7}")
    hadars = [k["x"] for k in kept]
    got: dict[str, list[Any]] = {}
    for way, label, options, cold in WAYS:
        its, secs, got[way] = replay(kept, options, cold)
        far, same = apart(got[way], hadars)
        print(f"{label:<38}{its:>12,}{secs:>10.2f}{far:>15,}{same:>7,}")
    ours, loose = apart(got["warm"], got["cold"])[0], apart(got["loose-warm"], got["loose-cold"])[0]
    print(f"warm and cold answers 1e-6 or more apart: {ours:,} of {len(kept):,} at tolerances of 1e-9 (Hadar's), "
          f"{loose:,} at 1e-7")


if __name__ == "__main__":
    main()
