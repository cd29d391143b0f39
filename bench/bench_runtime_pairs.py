"""Space sharing on the real runtime vs the simulator (prints; no asserts).

Runs a small job set under a packed policy (default ``max_min_fairness_packed``) with ``hadar run``'s
library entry point on an emulated cluster, the second job of each pair on its GPU's second worker, then
simulates the same jobs, cluster, policy and round length with the throughputs the run measured (rates
alone and co-located) and the restart costs it measured, and prints both. It also prints, per measured
pair entry, the job's co-located rate over its rate alone next to Gavel's ratio for the rows it mirrors
(what the emulation aims at).

Workloads: ``--jobs sleep`` (default): the test suite's regression job (``tests/runtime/jobs/regression.py``)
with a 20 ms sleep per step, so a step's time is the emulated GPU's pace, not the machine's load;
``--jobs bundled``: the four bundled models (real training; their step times follow the CPU's load).

Run: ``PYTHONPATH=src:. .venv/bin/python bench/bench_runtime_pairs.py [--jobs sleep|bundled] [--round-s 3]
[--dilation 1] [--policy max_min_fairness_packed]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from hadar.model.cluster import Cluster, Node
from hadar.model.job import Job, TrainSpec
from hadar.model.throughput import ThroughputTable
from hadar.runtime.run import prepare_jobs, run
from hadar.sim.run import simulate

JOB_FILE = Path(__file__).resolve().parent.parent / "tests" / "runtime" / "jobs" / "regression.py"
MIRROR = {"reg-lm": "LM (batch size 20)", "reg-tf": "Transformer (batch size 16)"}


def sleep_jobs() -> list[Job]:
    spec = [("reg-lm", 300), ("reg-tf", 250), ("reg-lm", 450), ("reg-tf", 400), ("reg-lm", 600)]
    return [Job(i, name, 1, steps, train=TrainSpec(entrypoint=f"{JOB_FILE}:train", name=name,
                                                     args_json=json.dumps({"step_s": 0.02}), emulate_as=MIRROR[name]))
            for i, (name, steps) in enumerate(spec)]


def bundled_jobs() -> list[Job]:
    spec = [("lstm", 900), ("transformer", 600), ("recoder", 2500), ("resnet", 500), ("lstm", 700)]
    return [Job(i, jt, 1, steps) for i, (jt, steps) in enumerate(spec)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", choices=("sleep", "bundled"), default="sleep")
    ap.add_argument("--policy", default="max_min_fairness_packed")
    ap.add_argument("--round-s", type=float, default=3.0)
    ap.add_argument("--dilation", type=float, default=1.0)
    args = ap.parse_args()
    cluster = Cluster((Node("node-v100", "v100", 2),))
    jobs = prepare_jobs(sleep_jobs() if args.jobs == "sleep" else bundled_jobs())
    t0 = time.perf_counter()
    real = run(jobs, cluster, args.policy, round_s=args.round_s, dilation=args.dilation, pair_workers="eager")
    wall = time.perf_counter() - t0
    restart = {jid: q.restart_s or 0.0 for jid, q in real.quality.items()}
    timed = [dataclasses.replace(j, restart_s=restart[j.job_id]) for j in jobs]
    sim = simulate(timed, cluster, real.measured_mean, args.policy, round_s=args.round_s)
    r, s = real.summary, sim.summary
    print(f"policy {args.policy}, jobs {args.jobs} ({len(jobs)}), cluster {cluster.capacity()}, "
          f"round {args.round_s:g} s, dilation {r['emulation_dilation']:g}; real run {wall:.0f} s in all; "
          f"paired leases {r['paired_leases']} of {sum(1 for e in real.events if e['event'] == 'lease')}, "
          f"failed {r['failed_leases']}")
    print(f"{'':>16} {'real':>9} {'simulated':>10} {'sim/real':>9}")
    for key in ("avg_jct_s", "makespan_s", "utilization"):
        print(f"{key:>16} {r[key]:9.2f} {s[key]:10.2f} {s[key] / r[key]:9.3f}")
    print("per job JCT (s):  " + "  ".join(f"{a.job_id}: {a.jct_s:.1f}/{b.jct_s:.1f}"
                                           for a, b in zip(real.rows, sim.rows, strict=True)) + "  (real/sim)")
    gavel = ThroughputTable.load()
    mirror = {j.job_type: (j.train.emulate_as if j.train else "") for j in jobs}
    table = real.measured_mean
    print("co-located rate / rate alone, measured vs Gavel's ratio (entries measured both ways):")
    seen = {(e["job_type"], e["gpu_type"], e.get("partner_type", "")) for e in real.events if e["event"] == "measured"}
    for (jt, k, other), per_type in sorted(table.pairs.items()):
        for t, (mine, _) in sorted(per_type.items()):
            if (jt, t, other) in seen and (jt, t, "") in seen:
                want = gavel.pair_rates(mirror[jt], mirror[other], k, t)[0] / gavel.get(mirror[jt], k, t)
                got = mine / table.get(jt, k, t)
                print(f"  {jt} next to {other} on {t}: {got:.3f} vs {want:.3f} ({100 * (got / want - 1):+.1f} %)")


if __name__ == "__main__":
    main()
