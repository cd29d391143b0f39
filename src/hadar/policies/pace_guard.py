"""HadarE's pace guard (``policies/hadare.py``, step 1): a job within ``fork_guard`` rounds of setting the makespan
gets copies first, enough to keep the pace the forking LP's horizon asks of it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from hadar.arrays import BoolArray, FloatArray
from hadar.mechanism.forking import Layout, copies_rate, copy_rates, free_gpus
from hadar.model.state import JobView, SchedulerState


@dataclass(frozen=True, slots=True)
class Guard:
    """``rounds``: the guard's reach (``fork_guard``); ``factor(state, job)``: eff(m) of the job's m copies as
    the policy's estimate says (None: every copy worth its steps)."""

    rounds: float
    factor: Callable[[SchedulerState, JobView], Callable[[int], float] | None]


def spread_critical(state: SchedulerState, lp: tuple[float, FloatArray, BoolArray], held: Mapping[int, Layout],
                    guard: Guard, unforked: bool = False) -> dict[int, Layout]:
    """Makespan guard for forking (a pace controller), on the GPUs no job's own placement holds
    (``held``: job id -> GPUs per node). ``lp``: the forking LP's (horizon H, rel, single). ``t_min``: a
    job's remaining time at its fastest credited pace (``spread_rate``). A job with ``t_min >= H -
    fork_guard x round_s`` (within ``fork_guard`` rounds of being the bottleneck; decisions are per
    round, so it must be paced now) must keep at least the share ``t_min / H`` of that pace. With
    ``unforked``, only jobs copies cannot speed up (``single``), each given one copy of W GPUs on the
    node it fits best (a node with W GPUs free, else none: Hadar places it); else the others: it gets
    copies first (most critical job first; on each
    node where it has none yet, as many GPUs as free, up to W; nodes where it fits the LP plan best,
    then fastest, first; only copies that add to its credited rate) until its copies, its own GPUs
    included, reach that pace as the estimate credits it. Returns job id -> its new copies' GPUs per node."""
    fork_guard = guard.rounds
    horizon, rel, single = lp
    fastest = spread_rate(state, guard)
    t_min = state.remaining_steps() / fastest
    hot = np.flatnonzero((t_min >= horizon - fork_guard * state.round_s) & (single if unforked else ~single))
    cluster = state.cluster
    index = {t: r for r, t in enumerate(state.gpu_types)}
    free = free_gpus(cluster, held)
    out: dict[int, Layout] = {}
    for i in hot[np.argsort(-t_min[hot], kind="stable")]:
        j = state.jobs[i]
        rates = copy_rates(state.table, j.job_type, j.scale_factor, state.gpu_types)
        target = min(1.0, t_min[i] / max(horizon, 1e-9)) * fastest[i]
        own = held[j.job_id]
        order = sorted(cluster.up_nodes, key=lambda n: (
            -rel[i, index[cluster.nodes[n].gpu_type]], -rates[index[cluster.nodes[n].gpu_type], 1], n))
        mine: Layout = {}
        raw = copies_rate(cluster, rates, index, own)
        factor = guard.factor(state, j) or (lambda m: 1.0)
        for n in order:
            r = index[cluster.nodes[n].gpu_type]
            m = len(own) + len(mine)
            if factor(m) * raw >= target * (1 - 1e-9):
                break
            if j.throughputs[r] > 0 and free[n] >= (j.scale_factor if unforked else 1) and n not in own:
                k = min(j.scale_factor, free[n])
                if factor(m + 1) * (raw + rates[r, k]) <= factor(m) * raw * (1 + 1e-9):
                    continue  # under the estimate this copy adds nothing to the job
                mine[n] = k
                free[n] -= k
                raw += rates[r, k]
        if mine:
            out[j.job_id] = mine
    return out

def spread_rate(state: SchedulerState, guard: Guard) -> FloatArray:
    """Per job: its fastest credited pace, steps/s: its largest copy on every node at once (no estimate),
    else the m fastest such copies for the m the estimate credits most."""
    index = {t: r for r, t in enumerate(state.gpu_types)}
    out = np.zeros(len(state.jobs))
    for i, j in enumerate(state.jobs):
        rates = copy_rates(state.table, j.job_type, j.scale_factor, state.gpu_types)
        each = [rates[index[state.cluster.nodes[n].gpu_type], min(state.cluster.nodes[n].gpus, j.scale_factor)]
                for n in state.cluster.up_nodes]
        factor = guard.factor(state, j)
        if factor is None:
            out[i] = sum(each)
            continue
        total = 0.0
        for m, rate in enumerate(sorted(each, reverse=True), start=1):
            total += rate
            out[i] = max(out[i], factor(m) * total)
    return np.maximum(out, 1e-300)
