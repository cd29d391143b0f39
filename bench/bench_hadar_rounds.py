"""CPU seconds of a stretch of Hadar's rounds on one of bench_scale.py's cases, by part.

Runs ``bench_scale.one(WORKLOAD, SIZE, "hadar")`` in this process, skips the first ``--skip``
rounds, times the next ``--rounds`` (process CPU time) and stops. Prints one JSON line: the mean
active jobs, total CPU, Hadar's ``allocate``, the HiGHS solves inside it, ``allocate`` less them,
the placement planner, and the garbage collector's time per generation. Compare two checkouts
back to back on the same machine (``PYTHONPATH=A/src`` then ``PYTHONPATH=B/src``).

    PYTHONPATH=src .venv/bin/python bench/bench_hadar_rounds.py generated 10000 --skip 300 --rounds 300
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scale


class _Stop(Exception):
    pass


def main() -> None:
    from hadar.mechanism.placement import PlacementPlanner
    from hadar.policies.hadar.policy import HadarPolicy
    from hadar.solve import highs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload", choices=["generated", "philly"])
    ap.add_argument("size", type=int)
    ap.add_argument("--skip", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=300)
    args = ap.parse_args()
    spent = {"allocate": 0.0, "highs": 0.0, "placement": 0.0}
    gc_s = [0.0, 0.0, 0.0]
    calls, jobs, started, gc_at = [0], [0], [0.0], [0.0]

    def counting() -> bool:
        return args.skip < calls[0] <= args.skip + args.rounds

    def timed(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def g(*a: Any, **k: Any) -> Any:
            t = time.process_time()
            try:
                return f(*a, **k)
            finally:
                if counting():
                    spent[name] += time.process_time() - t
        return g

    allocate = timed("allocate", HadarPolicy.allocate)

    def hook(self: HadarPolicy, state: Any) -> Any:
        calls[0] += 1
        if calls[0] == args.skip + 1:
            started[0] = time.process_time()
        if calls[0] > args.skip + args.rounds:
            raise _Stop
        if counting():
            jobs[0] += len(state.jobs)
        return allocate(self, state)

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_at[0] = time.perf_counter()
        elif counting():
            gc_s[info["generation"]] += time.perf_counter() - gc_at[0]

    HadarPolicy.allocate = hook  # type: ignore[method-assign]
    PlacementPlanner.plan = timed("placement", PlacementPlanner.plan)  # type: ignore[method-assign]
    highs._run = timed("highs", highs._run)
    gc.callbacks.append(on_gc)
    with contextlib.suppress(_Stop):
        bench_scale.one(args.workload, args.size, "hadar", bench_scale.PHILLY_FILE)
    total = time.process_time() - started[0]
    done = max(min(calls[0] - 1, args.skip + args.rounds) - args.skip, 1)
    print(json.dumps({"workload": args.workload, "size": args.size, "rounds": done,
                      "mean_jobs": round(jobs[0] / done, 1), "cpu_s": round(total, 2),
                      **{k: round(v, 2) for k, v in spent.items()},
                      "allocate_less_highs": round(spent["allocate"] - spent["highs"], 2),
                      "gc_s": [round(v, 2) for v in gc_s]}))


if __name__ == "__main__":
    main()
