"""Gavel's steady-state experiment, hadar and Gavel's own simulator side by side: 36:36:36,
multi-GPU jobs, 2 jobs/hour (Gavel's -l 1800), seed 0, measured window jobs [4000, 5000),
max_min_fairness_perf; hadar in --gavel-compat mode (Gavel's 1,920 s re-solve cadence).

Both run as subprocesses of this bench, one after the other (hadar, then Gavel, ``--repeat``
times), each with OPENBLAS_NUM_THREADS=1: hadar's CLI (`hadar simulate --generate ... --json`)
and Gavel's generated-jobs driver (bench/gavel_peer.py; -v, without which it prints nothing).
Wall times are the whole subprocess, start-up included. Without Gavel's environment only hadar's
figures are printed. ``--window 1000 1200`` makes a quick run; ``--solve-times`` adds the policy
solve-time table (bench_policies.py) for LAS, makespan and finish-time fairness.

    .venv/bin/python bench/bench_steady_state.py [--window A B] [--policy NAME] [--default-mode] [--repeat N]
        [--no-gavel] [--setup-gavel] [--solve-times]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_policies
import gavel_peer

CLUSTER = "36:36:36"
JOBS_PER_HOUR = 2.0


def run_hadar(window: tuple[int, int], policy: str, gavel_compat: bool) -> tuple[dict, float]:
    cmd = [sys.executable, "-m", "hadar.cli", "simulate", "--generate", "--jobs-per-hour", f"{JOBS_PER_HOUR:g}",
           "--multi-gpu", "--window", str(window[0]), str(window[1]), "--cluster", CLUSTER, "--policy", policy,
           "--seed", "0", "--json", "--no-progress", "-q"] + (["--gavel-compat"] if gavel_compat else [])
    out, _, wall = gavel_peer.timed(cmd)
    return json.loads(out), wall


def _walls(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f}" + (f" ({', '.join(f'{x:.1f}' for x in xs)})" if len(xs) > 1 else "")


def main() -> None:
    gavel_peer.pin_blas()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=int, nargs=2, default=(4000, 5000), metavar=("A", "B"),
                    help="measure jobs with id in [A, B) (default 4000 5000; 1000 1200 for a quick run)")
    ap.add_argument("--policy", default="max_min_fairness_perf")
    ap.add_argument("--default-mode", action="store_true",
                    help="hadar re-solves every round with a change (not Gavel's cadence: not like for like)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each side, interleaved (medians printed)")
    ap.add_argument("--no-gavel", action="store_true", help="hadar only, even when Gavel's environment is there")
    ap.add_argument("--solve-times", action="store_true", help="then the policy solve-time table, both sides")
    gavel_peer.add_args(ap)
    args = ap.parse_args()
    window = (args.window[0], args.window[1])
    env = bench_policies.gavel_or_note(args)
    mode = "default" if args.default_mode else "--gavel-compat"
    print(f"steady state {CLUSTER}, {JOBS_PER_HOUR:g} jobs/h, multi-GPU, seed 0, window {window[0]}-{window[1]}, "
          f"{args.policy}; hadar {mode}" + (", Gavel's simulator (ECOS)" if env else "")
          + "; OPENBLAS_NUM_THREADS=1, one run after the other", flush=True)
    ours: list[tuple[dict, float]] = []
    theirs: list[gavel_peer.GavelRun] = []
    for i in range(args.repeat):
        ours.append(run_hadar(window, args.policy, not args.default_mode))
        print(f"  run {i + 1}: hadar {ours[-1][1]:.1f} s", end="", flush=True)
        if env:
            theirs.append(gavel_peer.run_generated(env, CLUSTER, args.policy, JOBS_PER_HOUR, window))
            print(f", Gavel {theirs[-1].wall_s:.1f} s ({theirs[-1].wall_s / ours[-1][1]:.1f}x)", end="", flush=True)
        print()
    s = ours[-1][0]  # deterministic: every run of a side prints the same figures
    hw = [w for _, w in ours]
    if theirs:
        print(f"\n{'':26}{'hadar':>14}{'Gavel':>14}{'Gavel / hadar':>15}")
        g, gw = theirs[-1], [t.wall_s for t in theirs]
        print(f"{'wall time, median (s)':26}{statistics.median(hw):14.1f}{statistics.median(gw):14.1f}"
              f"{statistics.median(gw) / statistics.median(hw):14.1f}x")
        print(f"{'avg JCT of window (h)':26}{s['avg_jct_s'] / 3600:14.2f}{g.avg_jct_s / 3600:14.2f}"
              f"{g.avg_jct_s / s['avg_jct_s']:15.3f}")
        mk = g.makespan_s / 3600 if g.makespan_s is not None else float("nan")
        print(f"{'makespan (h)':26}{s['makespan_s'] / 3600:14.1f}{mk:14.1f}")
        print(f"{'utilization':26}{s['utilization']:14.3f}{g.utilization:14.3f}")
        if len(hw) > 1:
            print(f"wall times, every run (s): hadar {', '.join(f'{x:.1f}' for x in hw)}; "
                  f"Gavel {', '.join(f'{x:.1f}' for x in gw)}")
    else:
        print(f"\n{'':26}{'hadar':>14}   (Gavel not measured)")
        print(f"{'wall time (s)':26}{_walls(hw):>14}")
        print(f"{'avg JCT of window (h)':26}{s['avg_jct_s'] / 3600:14.2f}")
        print(f"{'makespan (h)':26}{s['makespan_s'] / 3600:14.1f}")
        print(f"{'utilization':26}{s['utilization']:14.3f}")
    print(f"hadar: {s['wall_s']:.1f} s inside its simulate() of {hw[-1]:.1f} s; rounds {s['rounds']}, "
          f"re-solves {s['resolves']}, solver {s['solve_s_total']:.1f} s, jobs completed "
          f"{s['jobs_completed']}/{s['jobs']}")
    per_solve = s["solve_s_total"] / max(1, s["resolves"]) * 1e3
    per_round = (s["wall_s"] - s["solve_s_total"]) / max(1, s["rounds"]) * 1e3
    print(f"hadar: {per_solve:.2f} ms per re-solve, {per_round:.2f} ms per round besides the solves (last run)")
    if args.solve_times:
        print("\npolicy solve time, n jobs on n/4 GPUs of each type (bench/bench_policies.py):")
        bench_policies.run(list(bench_policies.FIRST), [32, 128, 512, 2048], 3, gavel=env)


if __name__ == "__main__":
    main()
