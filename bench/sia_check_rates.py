"""Check `hadar trace import sia`'s seconds per iteration against Sia's own simulator code.

Runs in a Python that runs Sia's simulator (docs/sia.md), from Sia's folder, with hadar's src on
the path: for every job of the given workloads and every GPU type of Sia's cluster, hadar's
`rigid_run(...).iteration_s` against the batch over Sia's `Application.get_throughput_with_accum`
(tightest placement, the job's batch) divided by Sia's slowdown. Prints the worst relative difference.

    cd SIA_DIR && PYTHONPATH=SIA_DIR:HADAR/src SIA_PYTHON HADAR/bench/sia_check_rates.py workloads/*/*.csv
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from applications import APPLICATIONS  # Sia's module (its folder on the path)
from simulator_config import SLOWDOWNS  # Sia's module

from hadar.sim.sia_profiles import CLUSTER, SiaProfile, rigid_run, tightest


def main(paths: list[str]) -> None:
    worst, pairs = 0.0, 0
    profiles: dict[str, SiaProfile] = {}
    for path in paths:
        with open(path, newline="") as f:
            jobs = list(csv.DictReader(f))
        for r in jobs:
            batch, gpus, app = int(r["batch_size"]), int(r["num_replicas"]), r["application"]
            profile = profiles.setdefault(app, SiaProfile(Path("traces") / app, app))
            for kind in CLUSTER:
                sia = APPLICATIONS[kind.suffix][app].get_throughput_with_accum(
                    list(tightest(gpus, kind.per_node)), batch) / SLOWDOWNS[app]  # examples/s
                run = rigid_run(profile, kind, gpus, batch)
                worst = max(worst, abs(run.iteration_s * sia / batch - 1) if run else 1.0)
                pairs += 1
    print(f"{pairs} (job, GPU type) pairs, worst relative difference {worst:.3g}")


if __name__ == "__main__":
    main(sys.argv[1:])
