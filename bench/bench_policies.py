"""Policy solve time vs. the number of active jobs (prints a table; no asserts).

Cluster: n/4 GPUs of each of v100, p100, k80 for n jobs. Jobs are drawn like
Gavel's generator (``utils.generate_job``): model uniform over the bundled
table's job types (re-drawn until distributed when sf > 1), scale factor
1/2/4/8 with probability 70/10/15/5 %, duration 60*10^U(1.5,3) s (80 %) or
60*10^U(3,4) s (20 %), total steps = duration x isolated V100 throughput.
For finish-time fairness each job also gets a random age and progress.

Gavel's own solve times (cvxpy 1.5.4 + ECOS, measured on this machine) are
printed next to ours where known: LAS 0.07-0.12 s and makespan 0.30-0.40 s at
2048 jobs, finish-time fairness 1.97 s at 512 jobs. ``speedup`` divides the
low end of Gavel's range by our median time.

``--solver ecos`` times the path ``--gavel-compat`` runs use for the policies
that have one (makespan, max-sum, finish-time fairness: our re-implementation
of ECOS's iterations on cvxpy's problem form, ``policies/gavel/ecos_ipm.py``).

Run: ``.venv/bin/python bench/bench_policies.py [--sizes 32,128,512,2048] [--repeat 3] [--solver ecos]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from hadar.model import Cluster, JobView, SchedulerState, ThroughputTable
from hadar.policies import available, create
from hadar.policies.registry import entry

GAVEL_S = {  # policy -> {jobs: (low, high) seconds}
    "max_min_fairness_perf": {2048: (0.07, 0.12)},
    "min_total_duration_perf": {2048: (0.30, 0.40)},
    "finish_time_fairness_perf": {512: (1.97, 1.97)},
}
FIRST = ("max_min_fairness_perf", "min_total_duration_perf", "finish_time_fairness_perf")
NOW_S = 1e6
SLOW_AT = {"max_min_fairness_water_filling_perf": 512}  # skip above this size unless asked


def _draw_job(rng: np.random.Generator, table: ThroughputTable, i: int, types: tuple[str, ...]) -> JobView:
    models = [jt for jt in table.job_types if table.has(jt, 1)]
    u = rng.random()
    sf = 1 if u < 0.7 else 2 if u <= 0.8 else 4 if u <= 0.95 else 8
    model = models[rng.integers(len(models))]
    while not table.has(model, sf):
        model = models[rng.integers(len(models))]
    duration = 60 * 10 ** (rng.uniform(3, 4) if rng.random() < 0.2 else rng.uniform(1.5, 3))
    total = max(1.0, round(duration * table.get(model, sf, "v100")))
    remaining = max(1.0, round(total * rng.uniform(0.1, 1.0)))
    age = float(rng.uniform(0, duration))
    rates = table.row(model, sf, types)
    return JobView(i, model, sf, 1.0, NOW_S - age, total, remaining, rates)


def make_state(n_jobs: int, seed: int = 0) -> SchedulerState:
    rng = np.random.default_rng(seed)
    table = ThroughputTable.load()
    per_type = max(1, n_jobs // 4)
    cluster = Cluster.from_counts({"v100": per_type, "p100": per_type, "k80": per_type})
    jobs = tuple(_draw_job(rng, table, i, cluster.gpu_types) for i in range(n_jobs))
    return SchedulerState(now_s=NOW_S, round_s=360.0, cluster=cluster, jobs=jobs, table=table)


def time_policy(name: str, state: SchedulerState, repeat: int, **kw: str) -> float:
    times = []
    for _ in range(repeat):
        policy = create(name, **kw)
        t0 = time.perf_counter()
        policy.allocate(state)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="32,128,512,2048")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--policies", default="", help="comma-separated (default: every registered policy)")
    ap.add_argument("--all-sizes", action="store_true", help="also run slow policies at every size")
    ap.add_argument("--solver", choices=("highs", "ecos"), default="highs",
                    help="ecos: the gavel-compat path, for the policies that have one")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    names = args.policies.split(",") if args.policies else list(FIRST) + [p for p in available() if p not in FIRST]
    states = {n: make_state(n) for n in sizes}
    create(names[0]).allocate(states[sizes[0]])  # warm up imports and HiGHS
    print(f"{'policy':38s} {'jobs':>5s} {'ours (s)':>10s} {'Gavel (s)':>11s} {'speedup':>8s}")
    kw = {"solver": args.solver} if args.solver == "ecos" else {}
    if kw:
        names = [n for n in names if entry(n).traits.reference_solver]
    for name in names:
        for n in sizes:
            if not args.all_sizes and n > SLOW_AT.get(name, n):
                continue
            t = time_policy(name, states[n], args.repeat, **kw)
            ref = GAVEL_S.get(name, {}).get(n)
            ref_s = f"{ref[0]:.2f}-{ref[1]:.2f}" if ref and ref[0] != ref[1] else (f"{ref[0]:.2f}" if ref else "")
            speed = f"{ref[0] / t:7.1f}x" if ref else ""
            print(f"{name:38s} {n:5d} {t:10.4f} {ref_s:>11s} {speed:>8s}", flush=True)


if __name__ == "__main__":
    main()
