"""How much the JCT plan LP's answer depends on where the simplex starts (issue 19, item 2).

Runs Hadar on Gavel's steady state in this process (``hadar simulate --generate --jobs-per-hour 2
--multi-gpu --cluster 36:36:36 --seed 0 --window A B --policy hadar``) and keeps, after the first
``--skip`` plan LPs that reach HiGHS, the next ``--lps`` of them with the answer each got from its
warm start (the last plan's basis, mapped by name: what Hadar runs). Then it solves each kept LP
again from a cold start (HiGHS's presolve and crash) and, from the same warm start, with Devex
pricing in place of steepest edge, and prints per way: simplex iterations, HiGHS seconds, and in
how many LPs the answer differs from the warm start's by 1e-6 or more (another optimum: the LP is
degenerate) or by less than 1e-9 (the same one). A way of solving it that ends elsewhere moves
Hadar's decisions.

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

    def keep(c: Any, a: Any, upper: Any, *, lower: Any = None, col_upper: Any = None, warm: Any = None,
             key: Any = None, names: Any = None) -> Any:
        start = None if warm is None or warm.basis is None else warm.basis
        got = solve(c, a, upper, lower=lower, col_upper=col_upper, warm=warm, key=key, names=names)
        seen[0] += 1
        if seen[0] > skip and got is not None:
            kept.append({"lp": (c, a, upper, lower, names), "start": start, "x": got.x})
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


def replay(kept: list[dict[str, Any]], way: str) -> tuple[int, float, int, int]:
    """Solve every kept LP ``way`` ("warm", "cold", "devex"): iterations, HiGHS seconds, answers
    1e-6 or more away from the kept one, answers within 1e-9 of it."""
    options = dataclasses.replace(highs.DUAL_PRESOLVE, edge_weights=1) if way == "devex" else highs.DUAL_PRESOLVE
    its, secs, apart, same = 0, 0.0, 0, 0
    for k in kept:
        c, a, upper, lower, names = k["lp"]
        warm = highs.Warm(None if way == "cold" else k["start"])
        t0 = time.perf_counter()
        res = highs.solve(c, a, upper, row_lower=lower, options=options, warm=warm, names=names)
        secs += time.perf_counter() - t0
        its += int(highs._LOCAL.highs.getInfo().simplex_iteration_count)
        gap = float(np.abs(res.x - k["x"]).max()) if res.status == 0 else float("inf")
        apart += gap >= 1e-6
        same += gap < 1e-9
    return its, secs, apart, same


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
    print(f"{'start':<34}{'iterations':>12}{'HiGHS s':>10}{'other optimum':>15}{'same':>7}")
    ways = (("warm", "warm (Hadar's)"), ("devex", "warm, Devex pricing"), ("cold", "cold (presolve, crash)"))
    for way, label in ways:
        its, secs, apart, same = replay(kept, way)
        print(f"{label:<34}{its:>12,}{secs:>10.2f}{apart:>15,}{same:>7,}")


if __name__ == "__main__":
    main()
