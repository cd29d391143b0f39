"""Job by job, per model: a run of Sia's simulator against a run of hadar's on the same workload (docs/sia.md,
"Where the scale-gpus gap comes from").

Reads Sia's log (`bench/bench_sia.py --out DIR --sia-python PY` leaves `DIR/WORKLOAD/sia-POLICY.log`) and a
hadar `simulate --out HADAR_OUT` folder (its `jobs.csv` and `events.jsonl`), both on the import `IMPORT`
(`hadar trace import sia ... --out-dir IMPORT`; its `trace.csv` names each job's type, its
`throughputs.json` gives the rates). Prints, per model and in each run: jobs, mean JCT, mean wait from arrival
to first start (h), restarts, GPU-hours held, the time-weighted mean GPU count while running, and the
GPU-time-weighted share of its rate on the type it ran on of the best type's rate at the same count
(`placed rate`: 1.0 = every lease on the best type for its count, Sia's rates taken on the tightest
placement), then both runs' avg JCT and GPU utilisation (GPU-time held over 64 GPUs x the last completion).

    python bench/sia_gap.py SIA_LOG HADAR_OUT IMPORT
"""

from __future__ import annotations

import csv
import itertools
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

#: Sia's cluster suffixes -> hadar's type names (sia_profiles.CLUSTER), and each type's GPUs
NAMES = {"aws": "t4", "dgx-ext": "a100", "rtx": "rtx2080ti"}
SIZES = {"t4": 24, "a100": 16, "rtx2080ti": 24}


class Tally:
    """Per job: model, JCT, wait, restarts; GPU-seconds held, GPU-count-seconds, placed-rate-weighted seconds."""

    def __init__(self, rates: dict[str, dict[str, dict[str, float]]]) -> None:
        self.rates = rates
        self.jobs: dict[str, dict[str, Any]] = {}
        self.held: dict[str, float] = defaultdict(float)
        self.running: dict[str, float] = defaultdict(float)
        self.placed: dict[str, float] = defaultdict(float)

    def lease(self, name: str, job_type: str, n: int, gpu_type: str, seconds: float) -> None:
        key = f"('{job_type}', {n})"
        best = max((self.rates[t][key]["null"] for t in SIZES if SIZES[t] >= n and key in self.rates[t]), default=0)
        self.held[name] += n * seconds
        self.running[name] += seconds
        self.placed[name] += n * seconds * (self.rates[gpu_type][key]["null"] / best if best > 0 else 0.0)

    def rows(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for model in sorted({j["model"] for j in self.jobs.values()}):
            js = [n for n, j in self.jobs.items() if j["model"] == model]
            held = sum(self.held[n] for n in js)
            out[model] = {"jobs": len(js), "jct_h": sum(self.jobs[n]["jct"] for n in js) / len(js) / 3600,
                          "wait_h": sum(self.jobs[n]["wait"] for n in js) / len(js) / 3600,
                          "restarts": sum(self.jobs[n]["restarts"] for n in js), "gpu_h": held / 3600,
                          "count": held / max(sum(self.running[n] for n in js), 1e-9),
                          "placed": sum(self.placed[n] for n in js) / max(held, 1e-9)}
        return out

    def summary(self) -> tuple[float, float]:
        jct = sum(j["jct"] for j in self.jobs.values()) / len(self.jobs) / 3600
        last = max(j["finish"] for j in self.jobs.values())
        return jct, sum(self.held.values()) / (64 * last)


def sia_tally(log: Path, types: dict[str, str], rates: dict[str, Any]) -> Tally:
    tally = Tally(rates)
    lines = [json.loads(line) for line in log.open()]
    for rec, after in itertools.pairwise(lines):
        t, seconds = rec["timestamp"], after["timestamp"] - rec["timestamp"]
        for j in rec["submitted_jobs"]:
            info = tally.jobs.setdefault(j["name"], {"model": j["name"].rsplit("-", 1)[0], "start": None})
            gpus = [x for x in j["placement"] if x]
            if not gpus or (j["completion_time"] is not None and j["completion_time"] <= t):
                continue
            info["start"] = t if info["start"] is None else info["start"]
            tally.lease(j["name"], types[j["name"]], sum(gpus), NAMES[j["cluster"]], seconds)
    for j in lines[-1]["submitted_jobs"]:
        info = tally.jobs[j["name"]]
        info.update(jct=j["completion_time"] - j["submission_time"], restarts=j["num_restarts"] or 0,
                    wait=info["start"] - j["submission_time"], finish=j["completion_time"])
    return tally


def hadar_tally(folder: Path, gpu_types: list[str], rates: dict[str, Any]) -> Tally:
    tally = Tally(rates)
    rows = {r["job_id"]: r for r in csv.DictReader((folder / "jobs.csv").open())}
    for r in rows.values():
        tally.jobs[r["sia_name"]] = {"model": r["application"], "jct": float(r["jct_s"]),
                                     "wait": float(r["first_start_s"]) - float(r["arrival_s"]),
                                     "restarts": int(r["restarts"]), "finish": float(r["finish_s"])}
    for line in (folder / "events.jsonl").open():
        e = json.loads(line)
        if e["event"] != "round":
            continue
        for job, _, gpus, _ in e["leases"]:
            r = rows[str(job)]
            key = f"('{r['job_type']}', {len(gpus)})"
            slowest = min({gpu_types[g] for g in gpus}, key=lambda t: rates[t][key]["null"])
            tally.lease(r["sia_name"], r["job_type"], len(gpus), slowest, e["end"] - e["t"])
    return tally


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: sia_gap.py SIA_LOG HADAR_OUT IMPORT", file=sys.stderr)
        return 2
    log, out, imp = (Path(a) for a in argv)
    for p in (log, out / "jobs.csv", out / "events.jsonl", imp / "trace.csv", imp / "throughputs.json"):
        if not p.is_file():
            print(f"sia_gap: not found: {p}", file=sys.stderr)
            return 2
    trace = list(csv.DictReader((imp / "trace.csv").open()))
    rates = json.loads((imp / "throughputs.json").read_text())
    order = ("t4", "a100", "rtx2080ti")  # the import's cluster.yaml lists its nodes in this order
    gpu_types = [t for t in order for _ in range(SIZES[t])]
    runs = {"Sia": sia_tally(log, {r["sia_name"]: r["job_type"] for r in trace}, rates),
            "hadar": hadar_tally(out, gpu_types, rates)}
    got = {k: v.rows() for k, v in runs.items()}
    print("| model | jobs | mean JCT h: Sia | hadar | wait h: Sia | hadar | restarts: Sia | hadar | GPU-h: Sia | "
          "hadar | mean GPUs: Sia | hadar | placed rate: Sia | hadar |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model, s in got["Sia"].items():
        h = got["hadar"][model]
        print(f"| {model} | {s['jobs']:.0f} | {s['jct_h']:.3f} | {h['jct_h']:.3f} | {s['wait_h']:.3f} | "
              f"{h['wait_h']:.3f} | "
              f"{s['restarts']:.0f} | {h['restarts']:.0f} | {s['gpu_h']:.1f} | {h['gpu_h']:.1f} | {s['count']:.2f} | "
              f"{h['count']:.2f} | {s['placed']:.2f} | {h['placed']:.2f} |")
    for name, tally in runs.items():
        jct, util = tally.summary()
        held = sum(tally.placed.values()) / max(sum(tally.held.values()), 1e-9)
        print(f"{name}: avg JCT {jct:.3f} h, utilisation {util:.3f}, placed rate {held:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
