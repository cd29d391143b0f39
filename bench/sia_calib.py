"""Where Gavel's max-sum differs between Sia's simulator and hadar's (docs/sia.md, "Calibration").

Reads the folders `bench/bench_sia.py --out DIR --sia-python PY --sia-policies gavel` leaves (per
workload: the imported trace, throughputs and cluster, and Sia's log `sia-gavel.log`), re-runs
hadar's `max_sum_throughput_perf` on each (seconds) and prints, per workload, a markdown row:
hadar's avg JCT over Sia's, makespan over Sia's, restarts in each (a job resumed after a pause or on
other GPUs; first starts not counted), the mean wait from arrival to first start in each, and the
share of Sia's job-rounds on a placement other than the tightest. With `--models`, also per model:
jobs, mean JCT, restarts and mean wait in each, and Sia's non-tightest job-rounds.

    python bench/sia_calib.py DIR/philly-workload-1 DIR/saturn-workload-8 ... [--models]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from hadar.config import parse_cluster
from hadar.errors import HadarError
from hadar.model.throughput import ThroughputTable
from hadar.sim.run import simulate
from hadar.sim.trace import read_jobs

#: GPUs per node of Sia's cluster types (its simulator_config.cluster_ngpus_per_node)
GPUS_PER_NODE = {"aws": 4, "dgx-ext": 8, "rtx": 8}


def tightest(n: int, per_node: int) -> list[int]:
    return [per_node] * (n // per_node) + ([n % per_node] if n % per_node else [])


def sia_jobs(log: Path) -> dict[str, dict[str, Any]]:
    """Per job of Sia's log: model, JCT, restarts, first start, job-rounds and non-tightest ones."""
    out: dict[str, dict[str, Any]] = {}
    last: dict[str, Any] = {}
    with log.open() as f:
        for line in f:
            last = json.loads(line)
            t = last["timestamp"]
            for j in last["submitted_jobs"]:
                rec = out.setdefault(j["name"], {"model": j["name"].rsplit("-", 1)[0], "start": None,
                                                 "rounds": 0, "loose": 0})
                pl = [x for x in j["placement"] if x]
                if not pl or (j["completion_time"] is not None and j["completion_time"] <= t):
                    continue
                rec["start"] = t if rec["start"] is None else rec["start"]
                rec["rounds"] += 1
                rec["loose"] += sorted(pl, reverse=True) != tightest(sum(pl), GPUS_PER_NODE[j["cluster"]])
    for j in last["submitted_jobs"]:
        rec = out[j["name"]]
        rec.update(jct=j["completion_time"] - j["submission_time"], restarts=j["num_restarts"] or 0,
                   wait=rec["start"] - j["submission_time"], makespan=j["completion_time"])
    return out


def hadar_jobs(folder: Path) -> dict[str, dict[str, Any]]:
    """Per job of hadar's max-sum run, keyed by Sia's job name: model, JCT, restarts, wait, finish."""
    jobs = read_jobs(folder / "trace.csv")
    run = simulate(jobs, parse_cluster(str(folder / "cluster.yaml")), ThroughputTable.load(folder / "throughputs.json"),
                   "max_sum_throughput_perf")
    extra = {j.job_id: dict(j.extra) for j in jobs}
    return {extra[r.job_id]["sia_name"]: {"model": extra[r.job_id]["application"], "jct": r.jct_s,
                                          "restarts": r.restarts, "wait": r.queuing_delay_s,
                                          "makespan": r.finish_s} for r in run.rows}


def calib_row(name: str, h: dict[str, dict[str, Any]], s: dict[str, dict[str, Any]]) -> str:
    def mean(d: dict[str, dict[str, Any]], key: str) -> float:
        return float(np.mean([v[key] for v in d.values()]))

    def total(d: dict[str, dict[str, Any]], key: str) -> int:
        return int(sum(v[key] for v in d.values()))

    loose = 100 * total(s, "loose") / total(s, "rounds")
    return (f"| {name} | {mean(h, 'jct') / mean(s, 'jct'):.3f} | "
            f"{max(v['makespan'] for v in h.values()) / max(v['makespan'] for v in s.values()):.3f} | "
            f"{total(h, 'restarts')} | {total(s, 'restarts')} | {mean(h, 'wait') / 3600:.2f} | "
            f"{mean(s, 'wait') / 3600:.2f} | {loose:.0f} % |")


def model_rows(h: dict[str, dict[str, Any]], s: dict[str, dict[str, Any]]) -> list[str]:
    rows = []
    for model in sorted({v["model"] for v in h.values()}):
        names = [n for n, v in h.items() if v["model"] == model]
        hm, sm = [h[n] for n in names], [s[n] for n in names]
        rows.append(f"    {model}: {len(names)} jobs, JCT h {np.mean([v['jct'] for v in hm]) / 3600:.2f} / "
                    f"{np.mean([v['jct'] for v in sm]) / 3600:.2f}, restarts {sum(v['restarts'] for v in hm)} / "
                    f"{sum(v['restarts'] for v in sm)}, wait h {np.mean([v['wait'] for v in hm]) / 3600:.2f} / "
                    f"{np.mean([v['wait'] for v in sm]) / 3600:.2f}, Sia's non-tightest job-rounds "
                    f"{sum(v['loose'] for v in sm)} of {sum(v['rounds'] for v in sm)} (hadar / Sia)")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="bench_sia.py --out folders, one per workload")
    ap.add_argument("--models", action="store_true", help="also per model")
    args = ap.parse_args()
    print("| workload | calib avg JCT | makespan hadar / Sia | restarts hadar | restarts Sia | wait to start h: "
          "hadar | Sia | Sia's non-tightest job-rounds |")
    for folder in args.folders:
        if not (folder / "sia-gavel.log").is_file():
            raise HadarError(f"{folder}: no sia-gavel.log (run bench_sia.py --out with --sia-policies gavel)")
        h, s = hadar_jobs(folder), sia_jobs(folder / "sia-gavel.log")
        print(calib_row(folder.name.replace("-workload", "/workload"), h, s), flush=True)
        if args.models:
            print("\n".join(model_rows(h, s)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except HadarError as e:
        print(f"sia_calib: {e}", file=sys.stderr)
        sys.exit(2)
