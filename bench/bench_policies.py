"""Policy solve time vs. the number of active jobs, hadar next to Gavel measured live (prints a
table; no asserts).

Cluster: n/4 GPUs of each of v100, p100, k80 for n jobs. Jobs are drawn like
Gavel's generator (``utils.generate_job``): model uniform over the bundled
table's job types (re-drawn until distributed when sf > 1), scale factor
1/2/4/8 with probability 70/10/15/5 %, duration 60*10^U(1.5,3) s (80 %) or
60*10^U(3,4) s (20 %), total steps = duration x isolated V100 throughput.
For finish-time fairness each job also gets a random age and progress.

Gavel: when its environment is there (bench/gavel_peer.py), the same states are exported as
JSON and Gavel's own policies time ``get_allocation`` on them in a subprocess of its venv
(bench/gavel_solve_driver.py: cvxpy 1.5.4 + ECOS, a fresh policy each time, as its simulator
builds and solves the problem on every re-solve). Both sides run with OPENBLAS_NUM_THREADS=1,
interleaved (hadar once, Gavel once, ``--repeat`` times); medians are printed with
``Gavel / hadar``. Without Gavel's environment only hadar's times are printed.

``--solver ecos`` times the path ``--gavel-compat`` runs use for the policies
that have one (makespan, max-sum, finish-time fairness: our re-implementation
of ECOS's iterations on cvxpy's problem form, ``policies/gavel/ecos_ipm.py``).

Run: ``.venv/bin/python bench/bench_policies.py [--sizes 32,128,512,2048] [--repeat 3] [--solver ecos]``
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from hadar.model import Cluster, JobView, SchedulerState, ThroughputTable
from hadar.policies import available, create
from hadar.policies.registry import entry

sys.path.insert(0, str(Path(__file__).parent))
import gavel_peer

FIRST = ("max_min_fairness_perf", "min_total_duration_perf", "finish_time_fairness_perf")
NOW_S = 1e6
SLOW_AT = {"max_min_fairness_water_filling_perf": 512}  # skip above this size unless asked
DRIVER = Path(__file__).parent / "gavel_solve_driver.py"


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


def export_state(state: SchedulerState) -> dict:
    """The state as plain JSON for Gavel's side (gavel_solve_driver.py)."""
    types = state.cluster.gpu_types
    return {"cluster": state.cluster.capacity(),
            "jobs": [{"id": j.job_id, "scale_factor": j.scale_factor, "priority_weight": j.priority_weight,
                      "age_s": state.now_s - j.arrival_s, "remaining_steps": j.remaining_steps,
                      "throughputs": dict(zip(types, j.throughputs, strict=True))} for j in state.jobs]}


def time_policy(name: str, state: SchedulerState, **kw: str) -> float:
    policy = create(name, **kw)
    t0 = time.perf_counter()
    policy.allocate(state)
    return time.perf_counter() - t0


class GavelSolver:
    """Gavel's policies in a long-lived subprocess of its venv, one timed solve per request."""

    def __init__(self, env: gavel_peer.GavelEnv, states: dict[int, SchedulerState], timeout_s: float) -> None:
        self.env, self.timeout_s = env, timeout_s
        self._file = tempfile.NamedTemporaryFile("w", suffix=".json", prefix="gavel-states-")  # noqa: SIM115
        json.dump({str(n): export_state(s) for n, s in states.items()}, self._file)
        self._file.flush()
        self.policies: set[str] = set()
        self._proc: subprocess.Popen[str] | None = None
        self._start()

    def _start(self) -> None:
        self._proc = subprocess.Popen(
            [str(self.env.python), "-u", str(DRIVER), self._file.name], cwd=self.env.scheduler, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env={**os.environ, **gavel_peer.BLAS_ENV})
        ready = self._reply(120.0)
        if "ready" not in ready:
            raise gavel_peer.RunFailed(f"Gavel's solve driver did not start: {ready}")
        self.policies = set(ready["ready"])

    def _reply(self, timeout_s: float) -> dict:
        assert self._proc is not None and self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout_s)
        line = self._proc.stdout.readline() if ready else ""
        if not line:
            self._proc.kill()
            self._proc.wait()
            self._proc = None
            return {"error": f"no answer within {timeout_s:.0f} s (stopped)" if not ready else "driver exited"}
        return json.loads(line)

    def time(self, policy: str, size: int) -> float | str:
        """Seconds for one get_allocation, or why there is none."""
        if self._proc is None:
            self._start()
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(json.dumps({"policy": policy, "size": size}) + "\n")
        self._proc.stdin.flush()
        reply = self._reply(self.timeout_s)
        return reply["time_s"] if "time_s" in reply else reply["error"]

    def close(self) -> None:
        if self._proc is not None and self._proc.stdin is not None:
            self._proc.stdin.close()
            self._proc.wait()
        self._file.close()


def run(names: list[str], sizes: list[int], repeat: int, solver: str = "highs", all_sizes: bool = False,
        gavel: gavel_peer.GavelEnv | None = None, gavel_timeout_s: float = 300.0) -> None:
    """Print the side-by-side table for ``names`` x ``sizes`` (hadar only when ``gavel`` is None)."""
    states = {n: make_state(n) for n in sizes}
    create(names[0]).allocate(states[sizes[0]])  # warm up imports and HiGHS
    kw = {"solver": solver} if solver == "ecos" else {}
    if kw:
        names = [n for n in names if entry(n).cls.TRAITS.reference_solver]
    peer = GavelSolver(gavel, states, gavel_timeout_s) if gavel else None
    print(f"{'policy':38s} {'jobs':>5s} {'hadar (s)':>10s} {'Gavel (s)':>10s} {'Gavel / hadar':>14s}")
    try:
        for name in names:
            for n in sizes:
                if not all_sizes and n > SLOW_AT.get(name, n):
                    continue
                ours, theirs, why = [], [], ""
                for _ in range(repeat):  # interleaved: hadar once, then Gavel once
                    ours.append(time_policy(name, states[n], **kw))
                    if peer and name in peer.policies and not why:
                        t = peer.time(name, n)
                        if isinstance(t, str):
                            why = t
                        else:
                            theirs.append(t)
                t_ours = statistics.median(ours)
                if theirs and not why:
                    t_theirs = statistics.median(theirs)
                    cells = f"{t_theirs:10.4f} {t_theirs / t_ours:13.1f}x"
                else:
                    cells = f"{'-':>10s}   " + (f"Gavel: {why}" if why else
                                                "(no such Gavel policy)" if peer else "")
                print(f"{name:38s} {n:5d} {t_ours:10.4f} {cells}", flush=True)
    finally:
        if peer:
            peer.close()


def gavel_or_note(args: argparse.Namespace) -> gavel_peer.GavelEnv | None:
    """Gavel's environment for a bench with --no-gavel / --setup-gavel, or None after saying why."""
    env = None if args.no_gavel else gavel_peer.find(setup=args.setup_gavel)
    if env is None:
        print("Gavel not measured (--no-gavel)" if args.no_gavel else gavel_peer.missing_note())
    return env


def main() -> None:
    gavel_peer.pin_blas()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="32,128,512,2048")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--policies", default="", help="comma-separated (default: every registered policy)")
    ap.add_argument("--all-sizes", action="store_true", help="also run slow policies at every size")
    ap.add_argument("--solver", choices=("highs", "ecos"), default="highs",
                    help="ecos: the gavel-compat path, for the policies that have one")
    ap.add_argument("--no-gavel", action="store_true", help="hadar only, even when Gavel's environment is there")
    ap.add_argument("--gavel-timeout", type=float, default=300.0, help="seconds allowed to one Gavel solve")
    gavel_peer.add_args(ap)
    args = ap.parse_args()
    names = args.policies.split(",") if args.policies else list(FIRST) + [p for p in available() if p not in FIRST]
    env = gavel_or_note(args)
    run(names, [int(s) for s in args.sizes.split(",")], args.repeat, args.solver, args.all_sizes, env,
        args.gavel_timeout)


if __name__ == "__main__":
    main()
