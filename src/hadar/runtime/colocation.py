"""Space sharing on the runtime: which worker of a GPU runs each lease of a round.

The round mechanism (``mechanism/pairs.py``) gives a pair of jobs two leases on the same GPUs,
each naming its partner. Each GPU has one worker actor per job it runs (``pool.WorkerPool``):
slot 0, its own worker, and slot 1, started when the first pair of the run is dispatched. The
two jobs of a pair take the two slots (a job keeps the slot it had on these GPUs last round,
where its state still is), so both run at once, in their own processes, on the same device: a
real GPU time-slices the two processes' kernels (or runs them side by side under MPS); an
emulated GPU stretches each job's steps by its co-location ratio from Gavel's table
(``emulation.SpeedRatios.pair``).

Why two processes and not one time-sliced process: that is how a cluster runs co-located jobs
(Gavel's workers launch each job of a pair as its own process on the shared GPU): each job keeps
its own CUDA context, memory, failures and checkpoints, and a crash of one leaves the other
running. Each job's steps/s is measured on its own lease and fed back as its co-located rate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hadar.model.plan import Lease


def slots(leases: Sequence[Lease], previous: Mapping[int, tuple[tuple[int, ...], int]] | None = None) -> list[int]:
    """Per lease, the worker slot (0 or 1) of its GPUs that runs it; no two leases share a slot of a GPU.

    ``previous[job] = (GPUs, slot)``: where the job's lease ran last round. A lease on the same GPUs keeps
    its slot when it is free (its worker still holds the job's state in memory: no restore); the other
    leases then take the lowest slot free on all their GPUs, in plan order (the second job of a pair: 1)."""
    previous = previous or {}
    used: set[tuple[int, int]] = set()
    out: list[int | None] = [None] * len(leases)
    for i, lease in enumerate(leases):
        gpus, slot = previous.get(lease.job_id, ((), 0))
        if gpus == lease.gpus and all((g, slot) not in used for g in gpus):
            out[i] = slot
            used.update((g, slot) for g in gpus)
    for i, lease in enumerate(leases):
        if out[i] is None:
            slot = next((s for s in (0, 1) if all((g, s) not in used for g in lease.gpus)), 0)
            out[i] = slot
            used.update((g, slot) for g in lease.gpus)
    return [0 if s is None else s for s in out]


