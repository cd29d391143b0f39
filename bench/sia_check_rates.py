"""Check `hadar trace import sia`'s seconds per iteration against Sia's own simulator code.

Runs in a Python that runs Sia's simulator (docs/sia.md), from Sia's folder, with hadar's src on
the path: for every job of the given workloads and every GPU type of Sia's cluster, hadar's
`rigid_run(...).iteration_s` against the batch over Sia's `Application.get_throughput_with_accum`
(tightest placement, the job's batch) divided by Sia's slowdown. Prints the worst relative difference.
With `--every-count`, at every GPU count from 1 to the row's (a scale-gpus job's range: its batch fixed,
as Sia runs one; ncf at its own count only), not only the row's.

    cd SIA_DIR && PYTHONPATH=SIA_DIR:HADAR/src SIA_PYTHON HADAR/bench/sia_check_rates.py [--every-count] \
        workloads/*/*.csv
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from applications import APPLICATIONS  # Sia's module (its folder on the path)
from simulator_config import SLOWDOWNS  # Sia's module

from hadar.sim.sia_profiles import CLUSTER, SiaProfile, rigid_run, tightest


def main(paths: list[str]) -> None:
    every = "--every-count" in paths
    paths = [p for p in paths if p != "--every-count"]
    worst, pairs = 0.0, 0
    profiles: dict[str, SiaProfile] = {}
    for path in paths:
        with open(path, newline="") as f:
            jobs = list(csv.DictReader(f))
        for r in jobs:
            batch, gpus, app = int(r["batch_size"]), int(r["num_replicas"]), r["application"]
            profile = profiles.setdefault(app, SiaProfile(Path("traces") / app, app))
            counts = range(1, gpus + 1) if every and app != "ncf" else (gpus,)
            for kind in CLUSTER:
                for n in counts:
                    if n > kind.per_node * kind.nodes:
                        continue
                    sia = APPLICATIONS[kind.suffix][app].get_throughput_with_accum(
                        list(tightest(n, kind.per_node)), batch) / SLOWDOWNS[app]  # examples/s
                    run = rigid_run(profile, kind, n, batch)
                    worst = max(worst, abs(run.iteration_s * sia / batch - 1) if run else 1.0)
                    pairs += 1
    what = "(job, GPU type, count) triples" if every else "(job, GPU type) pairs"
    print(f"{pairs} {what}, worst relative difference {worst:.3g}")


if __name__ == "__main__":
    main(sys.argv[1:])
