"""The lease runner alone (no Ray, no scheduler) on this machine's best device (prints; no asserts).

For each job (the two examples and a bundled workload): three leases through
``hadar.job.runner.run_lease`` with a process group of one rank (``--process-group``: NCCL
on CUDA, gloo on CPU), and the data-parallel example wrapped in DDP. Prints per lease the
steps/s and how the state came back (fresh, from the worker's memory, from disk), then a
lease on a fresh cache (a disk restore) for comparison, and where the rendezvous store
listened (it must be loopback only, and closed after the lease).

Run: ``PYTHONPATH=src python bench/bench_job_runner.py [--device cuda] [--lease-s 5]``
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JOBS = (("examples/mlp/train.py:train", "{}"), ("examples/ddp/train.py:train", '{"batch_per_gpu": 64}'),
        ("hadar.runtime.workloads.image:train", "{}"))


def _listening(port: int) -> list[str]:
    out = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, p = local.split(":")
        if state == "0A" and int(p, 16) == port:
            out.append(".".join(str(int(addr[i:i + 2], 16)) for i in (6, 4, 2, 0)))
    return out


def main() -> None:
    import torch

    from hadar.job.dist import open_store
    from hadar.job.lease import LeaseSpec
    from hadar.job.runner import run_lease
    from hadar.job.state import StateCache

    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--lease-s", type=float, default=5.0)
    args = ap.parse_args()
    device = "cuda:0" if args.device == "cuda" else args.device
    print(f"torch {torch.__version__}, device {device}"
          + (f" ({torch.cuda.get_device_name(0)})" if device.startswith("cuda") else ""))
    folder = Path(tempfile.mkdtemp(prefix="hadar-bench-"))
    for n, (entry, params) in enumerate(JOBS):
        store, port = open_store("127.0.0.1")
        where = _listening(port)
        spec = LeaseSpec(job_id=n, entrypoint=entry, rank=0, world=1, max_iterations=10**9, budget_s=args.lease_s,
                         checkpoint=str(folder / f"job-{n}.pt"), name=entry, args_json=params,
                         search_path=(str(REPO),), run_id="bench", total_steps=1e9, process_group=True,
                         rendezvous=("127.0.0.1", port), timeout_s=60.0)
        cache = StateCache()
        for lease in range(3):
            t0 = time.monotonic()
            out = run_lease(spec, device=device, cache=cache, store=store if lease == 0 else None)
            if lease == 0:
                del store
                gc.collect()  # as the worker actor does: the store closes with its last reference
            how = "memory" if out.continued else "disk" if out.restored else "fresh"
            print(json.dumps({"job": entry, "lease": lease, "ok": out.ok, "steps_per_s": round(out.iterations /
                              max(out.train_s, 1e-9), 1), "state_from": how, "restore_s": round(out.restore_s, 4),
                              "lease_s": round(time.monotonic() - t0, 2), "metrics": out.metrics,
                              "error": out.error}))
            if not out.ok:
                print(out.traceback)
                break
            spec = dataclasses.replace(spec, start_iteration=spec.start_iteration + out.iterations,
                                       steps_done=spec.steps_done + out.iterations, resume_steps=out.saved_steps,
                                       rendezvous=None, group=f"l{lease}/")
        disk = run_lease(spec, device=device, cache=StateCache())
        print(json.dumps({"job": entry, "fresh_worker_restore_s": round(disk.restore_s, 4), "ok": disk.ok,
                          "store_listened_on": where, "store_open_after": _listening(port)}))


if __name__ == "__main__":
    main()
