"""The best schedule we know for the 96-job trace: an offline, clairvoyant search that brackets the optimum from above.

``bench_jct_floor.py`` bounds the best possible avg JCT from below (no schedule does better than
the floor). This one bounds it from above: it searches, offline and knowing every arrival in
advance, for a schedule with a low avg JCT, then runs that schedule in hadar's own simulator. The
optimum lies between the two, and no online scheduler (which does not know the future) can be
expected to beat what this search finds with hindsight.

The schedules searched are preemptive list schedules: a priority order over the jobs and, per
job, the GPU types it never uses. In a fast event model that re-decides at every arrival and
completion, each active job in priority order takes W GPUs of the fastest type it may use that
still has room (one type per gang). Simulated annealing moves one job in the order, swaps two or
toggles one ban; seeded, with a fixed number of steps, so the result does not depend on the
machine's speed. The best list found is then replayed by ``ListSchedule``, a policy that follows
it in the simulator (which decides only at round boundaries and early round ends, as Hadar), and
that run is compared with LAS, Hadar and the JCT that halving LAS's excess stretch needs.

About 4 minutes here with the default 200,000 steps.

    .venv/bin/python bench/bench_jct_reference.py [--steps N] [--seed S] [--trace T] [--cluster C] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import ClassVar

import numpy as np
from tqdm import tqdm

from hadar.config import parse_cluster
from hadar.errors import HadarError
from hadar.mechanism.admission import validate_jobs
from hadar.metrics.bound import isolated_durations_s, jct_bound_s
from hadar.model.cluster import Cluster
from hadar.model.job import Job
from hadar.model.state import Allocation, SchedulerState
from hadar.model.throughput import ThroughputTable
from hadar.policies.base import PolicyTraits
from hadar.sim.run import simulate
from hadar.sim.trace import read_jobs


class EventModel:
    """Preemptive list schedules of ``jobs`` on ``cluster``, re-decided at every arrival and completion."""

    def __init__(self, jobs: list[Job], cluster: Cluster, table: ThroughputTable) -> None:
        self.types = cluster.gpu_types
        self.dur = isolated_durations_s(jobs, cluster, table)
        self.scale = np.array([j.scale_factor for j in jobs])
        self.arrival = np.array([j.arrival_s for j in jobs], dtype=float)
        self.caps = np.array([cluster.count(t) for t in self.types])
        # per job, the types it can run on (a finite time and at least W GPUs), fastest first
        self.fastest = [[int(r) for r in np.argsort(d) if np.isfinite(d[r]) and self.caps[r] >= w]
                        for d, w in zip(self.dur, self.scale, strict=True)]

    def completions(self, rank: np.ndarray, ban: np.ndarray) -> np.ndarray:
        """Completion times (s) when jobs go in increasing ``rank`` and job i never runs on r where ``ban[i, r]``."""
        m = rank.size
        banned = ban.tolist()
        arrival, scale, dur = self.arrival.tolist(), self.scale.tolist(), self.dur.tolist()
        left = [1.0] * m  # share of each job's work still to do
        done: list[float | None] = [None] * m
        order = sorted(range(m), key=rank.tolist().__getitem__)
        arrivals = sorted(arrival)
        t, k, finished = 0.0, 0, 0
        while finished < m:
            free = self.caps.tolist()
            run: list[tuple[int, float]] = []
            for i in order:
                if arrival[i] > t or done[i] is not None:
                    continue
                for r in self.fastest[i]:
                    if not banned[i][r] and free[r] >= scale[i]:
                        free[r] -= scale[i]
                        run.append((i, dur[i][r]))
                        break
            while k < m and arrivals[k] <= t:
                k += 1
            nxt = arrivals[k] if k < m else math.inf
            nxt = min([nxt] + [t + left[i] * d for i, d in run])
            if math.isinf(nxt):
                raise ValueError("a job can run on none of the types it may use")
            for i, d in run:
                left[i] -= (nxt - t) / d
                if left[i] <= 1e-9:
                    done[i] = nxt
                    finished += 1
            t = nxt
        return np.array(done, dtype=float)

    def avg_jct_s(self, rank: np.ndarray, ban: np.ndarray) -> float:
        return float((self.completions(rank, ban) - self.arrival).mean())


def anneal(model: EventModel, steps: int, seed: int, t0_s: float = 4.0, t1_s: float = 0.4
           ) -> tuple[np.ndarray, np.ndarray, float]:
    """Simulated annealing over (rank, ban) from shortest-GPU-time-first with no bans; the
    temperature (seconds of avg JCT) falls geometrically from ``t0_s`` to ``t1_s``."""
    rng = np.random.default_rng(seed)
    m, n = model.dur.shape
    rank = (model.dur.min(axis=1) * model.scale).astype(float)  # GPU-seconds on the best type
    ban = np.zeros((m, n), dtype=bool)
    cur = model.avg_jct_s(rank, ban)
    best = (rank.copy(), ban.copy(), cur)
    for step in tqdm(range(steps), desc="search", unit="step", file=sys.stderr, delay=2.0, leave=False,
                     disable=not sys.stderr.isatty()):
        temp = t0_s * (t1_s / t0_s) ** (step / max(steps - 1, 1))
        r2, b2 = rank.copy(), ban.copy()
        i, u = int(rng.integers(m)), rng.random()
        if u < 0.6:  # move job i next to a random other job
            r2[i] = rank[rng.integers(m)] + rng.normal() * 60.0
        elif u < 0.9:  # toggle a ban, keeping one type it can run on
            b2[i, rng.integers(n)] ^= True
            if all(b2[i, r] for r in model.fastest[i]):
                continue
        else:
            k = int(rng.integers(m))
            r2[i], r2[k] = rank[k], rank[i]
        v = model.avg_jct_s(r2, b2)
        if v < cur or rng.random() < np.exp((cur - v) / temp):
            rank, ban, cur = r2, b2, v
            if v < best[2]:
                best = (r2.copy(), b2.copy(), v)
    return best


class ListSchedule:
    """Follows a fixed list in the simulator: jobs by ``rank[job_id]``, each on the fastest GPU type
    not in ``banned[job_id]`` with W GPUs free (a job that keeps its type keeps its GPUs)."""

    name: ClassVar[str] = "list_schedule"
    traits: ClassVar[PolicyTraits] = PolicyTraits(resolve="every_round", cut_rounds=True, planner="placement")

    def __init__(self, rank: dict[int, float], banned: dict[int, set[str]]) -> None:
        self.rank, self.banned = rank, banned

    def allocate(self, state: SchedulerState) -> Allocation:
        types = state.gpu_types
        free = {t: state.cluster.count(t) for t in types}
        fractions = np.zeros((len(state.jobs), len(types)))
        counts: dict[int, dict[str, int]] = {}
        for i in sorted(range(len(state.jobs)), key=lambda i: self.rank[state.jobs[i].job_id]):
            job = state.jobs[i]
            for r in np.argsort(-np.asarray(job.throughputs), kind="stable"):
                t = types[r]
                if job.throughputs[r] > 0 and t not in self.banned[job.job_id] and free[t] >= job.scale_factor:
                    free[t] -= job.scale_factor
                    counts[job.job_id] = {t: job.scale_factor}
                    fractions[i, r] = 1.0
                    break
        return Allocation.for_state(state, fractions, counts=counts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="max_min_fairness", help="trace name or file (default: the 96-job trace)")
    ap.add_argument("--cluster", default="8:16:24")
    ap.add_argument("--steps", type=int, default=200_000, help="annealing steps (default 200000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the best list and the results here (JSON)")
    args = ap.parse_args()
    table = ThroughputTable.load(None)
    cluster = parse_cluster(args.cluster)
    jobs = read_jobs(args.trace)
    validate_jobs(jobs, cluster, table, spans_types=False)  # one clear error for a job no GPU type can run
    model = EventModel(jobs, cluster, table)
    rank, ban, event_s = anneal(model, args.steps, args.seed)
    ranks = {j.job_id: float(rank[i]) for i, j in enumerate(jobs)}
    banned = {j.job_id: {t for r, t in enumerate(model.types) if ban[i, r]} for i, j in enumerate(jobs)}
    runs = {name: simulate(read_jobs(args.trace), cluster, table, pol).summary
            for name, pol in (("best list, replayed", ListSchedule(ranks, banned)),
                              ("LAS", "max_min_fairness_perf"), ("hadar", "hadar"))}
    bound = jct_bound_s(jobs, cluster, table) / 3600
    las = runs["LAS"]["avg_jct_s"] / 3600
    print(f"best list in the event model: avg JCT {event_s / 3600:.3f} h ({args.steps} steps, seed {args.seed})")
    print(f"{'schedule':22} {'avg JCT h':>10} {'TTD h':>7} {'queue h':>8}")
    for name, s in runs.items():
        print(f"{name:22} {s['avg_jct_s'] / 3600:10.3f} {s['makespan_s'] / 3600:7.2f} "
              f"{s['avg_queuing_delay_s'] / 3600:8.3f}")
    print(f"halving LAS's excess stretch needs avg JCT <= {bound + (las - bound) / 2:.3f} h (JCT bound {bound:.3f} h)")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"event_model_avg_jct_s": event_s, "rank": ranks,
                       "banned": {k: sorted(v) for k, v in banned.items()},
                       "results": {k: {"avg_jct_s": v["avg_jct_s"], "makespan_s": v["makespan_s"],
                                       "avg_queuing_delay_s": v["avg_queuing_delay_s"]} for k, v in runs.items()}},
                      fh, indent=1)


if __name__ == "__main__":
    try:
        main()
    except HadarError as exc:
        print(f"bench_jct_reference: {exc}", file=sys.stderr)
        sys.exit(2)
