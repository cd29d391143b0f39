"""``hadar experiment time-to-target``: what adapting the batch and forking buy in time to a target metric.

Real training (``hadar.runtime.workloads.adaptive``: an MLP on digits, test accuracy as its metric) on
the emulated cluster, one job at a time, for several seeds:

1. **Adaptive vs rigid** (one emulated V100, every step stretched 5x, policy ``hadar``): the same job with
   its own batch 16 and a batch range ``[16, 512]`` (AdaScale: ``ctx.lr_scale``), against the job rigid at
   16. Each job's profile starts from a guessed noise scale (``NOISE_GUESS``) that its measured one replaces after its
   first lease; its step times at each batch are measured first (``profile_batches``: 200 real steps
   per batch, the batch profile a scheduler needs to price a batch, as Sia's profiles are),
   and the run's leases keep measuring them.
2. **HadarE vs Hadar** (three emulated V100s, every step stretched 5x so that three workers fit the
   machine's cores, one job rigid at batch 64): Hadar runs it on one GPU;
   HadarE forks it over the idle ones and merges the copies every round, each merge measured by the job
   tracker (``hadar.runtime.merges``: its gain and ``rho``).

Time to target: a job that is not forked ends as soon as its reported accuracy reaches the target, its
JCT; a forked job's model is the merged one, judged at each merge (the merged model's accuracy as its
next lease reports it, credited at the merge's time); None where the target was not reached.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hadar.errors import InputError
from hadar.model.cluster import Cluster, Node
from hadar.model.efficiency import Efficiency
from hadar.model.job import Job, TrainSpec
from hadar.model.throughput import ThroughputTable
from hadar.runtime.tables import write_table

ENTRY = "hadar.runtime.workloads.adaptive:train"
NAME = "digits-mlp"
NOISE_GUESS = 200.0  # the profile's noise scale before the job measured its own (samples)
BATCHES = (16, 32, 64, 128, 256, 512)


def cluster(n: int) -> Cluster:
    return Cluster(tuple(Node(f"v100-{i}", "v100", 1) for i in range(n)))


def job(adaptive: bool, batch: int, lr: float, target: float, steps: int) -> Job:
    """The experiment's job: rigid at ``batch``, or adaptive over ``BATCHES`` from it (AdaScale)."""
    spec = TrainSpec(ENTRY, name=NAME, args_json=json.dumps({"batch": batch, "lr": lr}, sort_keys=True),
                     quality="accuracy", target=target)
    return Job(job_id=0, job_type=NAME, scale_factor=1, total_steps=float(steps), train=spec,
               efficiency=Efficiency(float(batch), float(batch), ((0.0, NOISE_GUESS),), "adascale"),
               batch_range=(float(batch), float(BATCHES[-1])) if adaptive else None, origin="time-to-target job")


def profile_batches(lr: float, steps: int) -> dict[int, float]:
    """Steps/s of the job at each batch of ``BATCHES`` (``steps`` real steps in this process each; the
    lease's start, its imports and data, is not counted)."""
    import torch

    from hadar.job.lease import LeaseSpec
    from hadar.job.runner import run_lease

    torch.set_num_threads(1)  # as a Ray worker runs it (one thread: several threads thrash a busy machine)
    out = {}
    with tempfile.TemporaryDirectory(prefix="hadar-ttt-") as d:
        for b in BATCHES:
            spec = LeaseSpec(job_id=0, entrypoint=ENTRY, rank=0, world=1, max_iterations=steps, budget_s=600.0,
                             checkpoint=f"{d}/p.pt", args_json=json.dumps({"lr": lr}), batch=float(b),
                             own_batch=float(BATCHES[0]), mode="profile")
            o = run_lease(spec)
            if not o.ok or o.train_s <= 0:
                raise InputError(f"profiling batch {b} failed: {o.error}")
            out[b] = o.iterations / o.train_s
    return out


def given_table(rates: dict[int, float]) -> ThroughputTable:
    return ThroughputTable({(f"{NAME} (batch size {b})", 1): {"v100": r} for b, r in rates.items()})


def time_to_target(res: Any, target: float) -> float | None:
    """The run's time to target (module docstring) of its one job."""
    row = res.rows[0]
    times = []
    q = res.quality.get(row.job_id)
    if row.jct_s is not None and q is not None and q.final is not None and q.final >= target:
        times.append(row.jct_s)
    times += [e["t"] for e in res.events if e.get("event") == "merge_gain"
              and e.get("merged_metrics", {}).get("accuracy", -math.inf) >= target]
    return min(times) if times else None


def one_run(j: Job, n_gpus: int, policy: str, seed: int, o: argparse.Namespace, table: ThroughputTable | None,
            where: Path, dilation: float) -> dict[str, Any]:
    from hadar.runtime.run import run, write_outputs

    res = run([j], cluster(n_gpus), policy, round_s=o.round_s, seed=seed, checkpoint_dir=where / "checkpoints",
              dilation=dilation, throughputs=table)
    write_outputs(res, where)
    leases = [e for e in res.events if e.get("event") == "lease"]
    gains = [{k: e[k] for k in ("t", "round", "copies", "start_loss", "copy_loss", "merged_loss", "gain", "rho",
                                "noise_scale")} for e in res.events if e.get("event") == "merge_gain"]
    q = res.quality.get(0)
    ttt = time_to_target(res, o.target)
    first = min(leases, key=lambda e: e["t"]) if leases else None  # a fresh worker's start: imports, data
    cold = first["t"] - first["train_s"] if first is not None else 0.0
    return {"ttt_s": ttt, "ttt_from_first_step_s": ttt - cold if ttt is not None else None,
            "cold_start_s": cold, "jct_s": res.rows[0].jct_s,
            "final": q.final if q is not None else None, "steps": sum(e["steps"] for e in leases),
            "batches": sorted({e["metrics"].get("batch", 0.0) for e in leases}),
            "noise_scale": q.last.get("noise_scale") if q is not None else None,
            "merges": gains, "dir": str(where)}


CASES = (("rigid", False, 1, "hadar"), ("adaptive", True, 1, "hadar"),
         ("hadar", False, 3, "hadar"), ("hadare", False, 3, "hadare"))


def run_all(o: argparse.Namespace, seeds: list[int]) -> dict[str, Any]:
    import ray

    from hadar.runtime import session

    out = Path(o.out) if o.out else Path(tempfile.mkdtemp(prefix="hadar-ttt-"))
    t0 = time.monotonic()
    rates = profile_batches(o.lr, o.profile_steps)
    table = given_table(rates)
    started = not ray.is_initialized()
    session.start_local(cluster(3))
    runs: list[dict[str, Any]] = []
    try:
        for seed in seeds:
            for case, adaptive, n, pol in [c for c in CASES if c[0] in o.cases.split(",")]:
                batch = 16 if n == 1 else 64
                j = job(adaptive, batch, o.lr, o.target, o.steps if n == 1 else o.fork_steps)
                r = one_run(j, n, pol, seed, o, table if n == 1 else None, out / f"{case}-seed{seed}",
                            o.dilation if n == 1 else o.fork_dilation)
                runs.append({"case": case, "seed": seed, **r})
                if not o.no_progress:
                    sys.stderr.write(f"{case:>8} seed {seed}: time to target {_s(r['ttt_s'])}, final "
                                     f"{_s(r['final'], '.3f')}, batches {r['batches']}\n")
    finally:
        if started and ray.is_initialized():
            ray.shutdown()
    return {"seeds": seeds, "target": o.target, "round_s": o.round_s, "profiled_steps_per_s": rates,
            "dilation": o.dilation, "fork_dilation": o.fork_dilation,
            "runs": runs, "wall_s": time.monotonic() - t0, "out": str(out)}


def _s(v: float | None, fmt: str = ".1f") -> str:
    return "-" if v is None else f"{v:{fmt}}"


def _spread(values: list[float | None]) -> dict[str, Any]:
    v = [x for x in values if x is not None]
    return {"mean": statistics.fmean(v) if v else None, "std": statistics.stdev(v) if len(v) > 1 else 0.0,
            "reached": len(v), "n": len(values), "values": values}


def aggregate(result: dict[str, Any]) -> dict[str, Any]:
    """Per case: time to target over the seeds; the ratios adaptive / rigid and HadarE / Hadar per seed;
    the merges' measured gains and rho."""
    runs = result["runs"]
    by = {(r["case"], r["seed"]): r for r in runs}
    ran = [c for c, *_ in CASES if any(r["case"] == c for r in runs)]
    cases = {c: _spread([by[(c, s)]["ttt_s"] for s in result["seeds"] if (c, s) in by]) for c in ran}
    steps = {c: _spread([by[(c, s)]["ttt_from_first_step_s"] for s in result["seeds"] if (c, s) in by]) for c in ran}

    def ratio(a: str, b: str) -> list[float | None]:
        out: list[float | None] = []
        for s in result["seeds"]:
            x, y = by.get((a, s), {}).get("ttt_s"), by.get((b, s), {}).get("ttt_s")
            out.append(x / y if x is not None and y else None)
        return out

    merges = [m for r in runs if r["case"] == "hadare" for m in r["merges"]]
    return {**result, "cases": cases, "from_first_step": steps,
            "adaptive_over_rigid": _spread(ratio("adaptive", "rigid")),
            "hadare_over_hadar": _spread(ratio("hadare", "hadar")),
            "merge_gain": _spread([m["gain"] for m in merges]), "merge_rho": _spread([m["rho"] for m in merges])}


def format_table(a: dict[str, Any]) -> str:
    lines = [f"time to accuracy {a['target']:g} (s), seeds {','.join(map(str, a['seeds']))}; round "
             f"{a['round_s']:g} s",
             f"{'case':<10}{'mean':>8}{'std':>8}  per seed"]
    for c, s in a["cases"].items():
        f = a["from_first_step"][c]
        lines.append(f"{c:<10}{_s(s['mean']):>8}{_s(s['std']):>8}  " + " ".join(_s(v) for v in s["values"])
                     + f"   from its first step: {_s(f['mean'])} ± {_s(f['std'])}")
    for key, label in (("adaptive_over_rigid", "adaptive / rigid"), ("hadare_over_hadar", "HadarE / Hadar")):
        s = a[key]
        lines.append(f"{label}: {_s(s['mean'], '.2f')} (per seed " + ", ".join(_s(v, ".2f") for v in s["values"]) + ")")
    for key, label in (("merge_gain", "merge gain (copies' worth)"), ("merge_rho", "merge rho")):
        s = a[key]
        lines.append(f"{label}: mean {_s(s['mean'], '.2f')} ± {_s(s['std'], '.2f')} over {s['reached']} merges "
                     f"measured of {s['n']}")
    return "\n".join(lines)


def write(a: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "time_to_target.json").write_text(json.dumps(a, indent=2) + "\n")
    write_table(out / "runs.csv", ["case", "seed", "ttt_s", "ttt_from_first_step_s", "cold_start_s", "jct_s", "final",
                                   "steps", "batches", "noise_scale", "merges"],
                ([r["case"], r["seed"], r["ttt_s"], r["ttt_from_first_step_s"], r["cold_start_s"], r["jct_s"],
                  r["final"], r["steps"], " ".join(f"{b:g}" for b in r["batches"]), r["noise_scale"], len(r["merges"])]
                 for r in a["runs"]))
    merge_keys = ("round", "t", "copies", "start_loss", "copy_loss", "merged_loss", "gain", "rho", "noise_scale")
    write_table(out / "merges.csv", ["case", "seed", *merge_keys],
                ([r["case"], r["seed"], *(m[k] for k in merge_keys)] for r in a["runs"] for m in r["merges"]))


def add_parser(esub: Any) -> None:
    p = esub.add_parser("time-to-target", help="adaptive vs rigid, HadarE vs Hadar: time to a target accuracy",
                        description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    p.add_argument("--target", type=float, default=0.95, help="test accuracy to reach (default 0.95)")
    p.add_argument("--lr", type=float, default=0.02, help="SGD's learning rate at the job's own batch (16; 64 "
                   "for the HadarE/Hadar job) (default 0.02)")
    p.add_argument("--steps", type=int, default=8000, help="the adaptive/rigid job's step cap (default 8000)")
    p.add_argument("--fork-steps", type=int, default=18000, help="the HadarE/Hadar job's step cap (default 18000: "
                   "HadarE's copies split each batch of 64, so this is 6,000 steps' samples at 64)")
    p.add_argument("--cases", default=",".join(c for c, *_ in CASES),
                   help=f"comma-separated, of {','.join(c for c, *_ in CASES)} (default all)")
    p.add_argument("--round-s", type=float, default=3.0, help="round length in seconds (default 3)")
    p.add_argument("--dilation", type=float, default=5.0, help="emulation stretch of the one-GPU runs (default 5: "
                   "training, not a fresh worker's start, takes most of the time to target)")
    p.add_argument("--fork-dilation", type=float, default=5.0, help="emulation stretch of the three-GPU runs "
                   "(default 5: three workers within a fifth of a core each, as `hadar experiment hadare`)")
    p.add_argument("--profile-steps", type=int, default=200, help="steps per batch profiled (default 200)")
    p.add_argument("--out", type=Path, help="write time_to_target.json, runs.csv, merges.csv and run folders here")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from hadar.runtime.cli import require_runtime_extra

    require_runtime_extra("experiment")
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise InputError(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
    if not set(args.cases.split(",")) <= {c for c, *_ in CASES}:
        raise InputError(f"--cases takes {','.join(c for c, *_ in CASES)}, got {args.cases!r}")
    if not seeds or not 0 < args.target <= 1 or args.lr <= 0 or args.round_s <= 0 \
            or min(args.dilation, args.fork_dilation) < 1 or min(args.steps, args.fork_steps) < 1 \
            or args.profile_steps < 1:
        raise InputError("need seeds, --target in (0, 1], positive --lr, --round-s, --steps, --fork-steps, "
                         "--profile-steps and --dilation >= 1")
    a = aggregate(run_all(args, seeds))
    if args.out is not None:
        write(a, args.out)
    print(format_table(a))
    return 0
