"""Per-round overhead of hadar on Slurm against the round length (prints; no asserts).

Starts a throwaway local Slurm cluster (``tests/slurm/localcluster.py``: N one-GPU nodes of three emulated
types, on loopback ports in a temporary folder; Slurm's daemons must be installed: ``.ci/install-slurm.sh``)
and runs M torch-free jobs (``tests/slurm/jobs/sleeper.py``) through ``hadar run --slurm``'s library entry
point. Per round: the decision (policy and planner), pin and release (writing the leases, ``sbatch
--hold`` each, one ``scontrol release``), and the lease start (from a lease's submission to its first step:
the rest of the round's submissions and the release, Slurm's launch, the process's start; the mean and the
slowest of the round). A round's overhead: the decision plus the mean lease start (which contains the pin
and release). Goal: under 2 s per round for 50 jobs on 20 nodes.

Run: ``.venv/bin/python bench/bench_slurm_overhead.py [--nodes 20] [--jobs 50] [--round-s 20] [--rounds 4]``
(a few minutes on 2 cores; the cluster is stopped at the end).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.slurm.localcluster: the local cluster the tests use

from hadar.model.job import Job, TrainSpec  # noqa: E402
from hadar.slurm.run import SlurmRun, run_on_slurm  # noqa: E402
from tests.slurm.localcluster import NodeSpec, start  # noqa: E402

TYPES = ("v100", "p100", "k80")
JOB = ROOT / "tests" / "slurm" / "jobs" / "sleeper.py"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--round-s", type=float, default=20.0)
    ap.add_argument("--rounds", type=float, default=4.0, help="each job's size in rounds on a V100 (about)")
    ap.add_argument("--policy", default="max_min_fairness_perf")
    args = ap.parse_args()
    logging.getLogger("hadar").setLevel(logging.ERROR)  # (the job saves no state: a warning per job)
    folder = Path(tempfile.mkdtemp(prefix="hadar-bench-slurm-"))
    layout = [NodeSpec(f"n{i:02d}-{TYPES[i % 3]}", TYPES[i % 3], 1) for i in range(args.nodes)]
    cluster = start(folder / "slurm", layout)
    step_s = 0.02
    spec = TrainSpec(entrypoint=f"{JOB}:train", name="sleeper", args_json=json.dumps({"step_s": step_s}))
    steps = int(args.rounds * args.round_s / step_s / max(1.0, args.nodes / 2))  # (dilation: GPUs / 2 cores)
    jobs = [Job(i, "sleeper", 1, float(steps), train=spec) for i in range(args.jobs)]
    rounds: list[dict] = []
    try:
        res = run_on_slurm(jobs, args.policy, SlurmRun(folder / "work", conf=str(cluster.conf), round_s=args.round_s,
                                                       device="cpu"),
                           on_event=lambda e: rounds.append(e) if e["event"] == "round" else None)
    finally:
        cluster.stop()
    r = res.result
    print(f"{args.jobs} jobs on {args.nodes} nodes ({', '.join(TYPES)}), policy {args.policy}, "
          f"round {args.round_s:g} s: {len(r.rounds)} rounds, {r.summary['jobs_completed']} jobs completed in "
          f"{r.summary['makespan_s']:.0f} s")
    starts: dict[int, list[float]] = {}
    for rec in res.leases:
        if rec["start_s"] is not None:
            starts.setdefault(rec["round"], []).append(rec["start_s"])
    decisions = r.stats.per_round_decision_s
    print(f"{'round':>5} {'leases':>6} {'decide_s':>8} {'pin+release_s':>13} {'start_mean_s':>12} {'start_max_s':>11} "
          f"{'overhead_s':>10} {'of round':>8}")
    totals = []
    for i, st in enumerate(r.rounds):
        decide = decisions[i] if i < len(decisions) else 0.0
        s = starts.get(i, [0.0])
        total = decide + statistics.mean(s)
        totals.append(total)
        print(f"{i:>5} {st.leases:>6} {decide:>8.3f} {st.dispatch_s:>13.3f} {statistics.mean(s):>12.2f} "
              f"{max(s):>11.2f} {total:>10.2f} {total / args.round_s:>8.1%}")
    print(f"mean overhead per round {statistics.mean(totals):.2f} s (decision + mean lease start, its pin and release "
          f"included); goal < 2 s")


if __name__ == "__main__":
    main()
