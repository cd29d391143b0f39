"""Per-round overhead of the real runtime as a fraction of the round (prints; no asserts).

Overhead per round = scheduler decision (policy re-solve + round planning)
+ dispatch (building and submitting the leases, incl. the torch.distributed
rendezvous of multi-GPU jobs) + checkpoint restore (the slowest lease's)
+ checkpoint save (the slowest lease's). Also printed: how far rounds
overran their length (the last step in flight at the deadline, the save,
the answer's trip back). Goal: overhead < 5 % of a 30 s round.

Run: ``.venv/bin/python bench/bench_runtime_overhead.py [--round-s 30] [--scale 1.5]
[--policy max_min_fairness_perf]`` (about 5 minutes at the defaults on 2 cores).
"""

from __future__ import annotations

import argparse
import statistics

from hadar.runtime.demo import demo_cluster, demo_jobs
from hadar.runtime.run import run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="max_min_fairness_perf")
    ap.add_argument("--round-s", type=float, default=30.0)
    ap.add_argument("--scale", type=float, default=1.5, help="multiply every demo job's steps")
    args = ap.parse_args()
    rounds: list[dict] = []
    res = run(demo_jobs(args.scale), demo_cluster(), args.policy, round_s=args.round_s,
              on_event=lambda e: rounds.append(e) if e["event"] == "round" else None)
    decisions = res.stats.per_round_decision_s
    solve = res.stats.solve_s / max(1, len(res.rounds))
    print(f"policy {args.policy}, round {args.round_s:g} s, {len(res.rounds)} rounds, "
          f"{res.summary['jobs_completed']} jobs completed in {res.summary['makespan_s']:.0f} s")
    print(f"{'round':>5} {'leases':>6} {'decide_s':>9} {'dispatch_s':>10} {'restore_s':>9} {'save_s':>7} "
          f"{'overrun_s':>9} {'overhead':>8}")
    fractions, overruns = [], []
    for i, (st, ev) in enumerate(zip(res.rounds, rounds, strict=True)):
        decide = decisions[i] if i < len(decisions) else 0.0
        total = decide + st.dispatch_s + st.restore_s + st.save_s
        wall = ev["end"] - ev["t"]
        overrun = max(0.0, wall - args.round_s)  # 0 for rounds cut short (their jobs finished)
        fractions.append(total / args.round_s)
        overruns.append(overrun)
        print(f"{i:>5} {st.leases:>6} {decide:9.4f} {st.dispatch_s:10.4f} {st.restore_s:9.4f} {st.save_s:7.4f} "
              f"{overrun:9.3f} {100 * total / args.round_s:7.2f}%")
    print(f"mean overhead {100 * statistics.mean(fractions):.2f} % of the round, max "
          f"{100 * max(fractions):.2f} % (goal < 5 %); of the decision time, policy re-solves take {solve:.4f} s "
          "per round on average")
    print(f"mean overrun past the deadline {statistics.mean(overruns):.3f} s "
          f"({100 * statistics.mean(overruns) / args.round_s:.2f} % of the round)")


if __name__ == "__main__":
    main()
