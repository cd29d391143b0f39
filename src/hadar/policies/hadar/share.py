"""Space sharing for Hadar (``share=True``): a waiting job may buy a shared slot.

Once the round's placement is fixed (priced pass, fill pass, plan and keeper),
every job still waiting, in packing order, runs the dual subroutine once
more over *shared slots*: the GPUs of a placed job (the host) that holds W
GPUs of one type, asks for the same W as the guest, shares with nobody yet,
and whose pair with the guest the throughput table measures on that type
(Gavel's co-location entries; pairs of equal GPU count only, as Gavel).

A slot on type r is worth ``value[g, r] * k_g`` to the guest, where
``k = co-located rate / rate alone`` on r, discounted by the guest's restart
cost unless it shared exactly these GPUs with this host last round. Its
price is what the host loses: ``value[h, r] * (1 - k_h)``. The guest buys
the slot with the largest payoff (worth - price) when that payoff is
positive and the pair packs: ``k_g + k_h > min_gain`` (the two together do
more than either alone when ``min_gain`` = 1). Exact ties go to the host
that comes first in the state's job order. No GPU type is ever named: the
rules read rates and utilities only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hadar.arrays import FloatArray, IntArray
from hadar.model.state import SchedulerState
from hadar.policies.hadar.gangs import Counts, previous_counts


@dataclass(frozen=True, slots=True)
class Slot:
    """Job index ``guest`` shares the W GPUs of type index ``gpu_type`` held by job index ``host``."""

    host: int
    guest: int
    gpu_type: int
    payoff: float


def _stays(state: SchedulerState, host: int, guest: int, kept: bool) -> bool:
    """True when the guest shared exactly the host's GPUs last round and the host keeps them."""
    g, h = state.jobs[guest], state.jobs[host]
    return kept and len(g.previous_gpus) == g.scale_factor and g.previous_gpus == h.previous_gpus


def shared_slots(state: SchedulerState, x: FloatArray, value: FloatArray, scale: IntArray, counts: Counts,
                 order: Sequence[int] | IntArray, discount: FloatArray, min_gain: float = 1.0) -> list[Slot]:
    """The shared slots the waiting jobs buy, in ``order`` (see the module docstring).

    ``x[i, r]``: job i's whole-job rate on W GPUs of type r; ``value``: its utility there;
    ``counts``: the round's placement (job index -> {type index: GPUs}); ``discount[i]``: the
    share of a round a restore leaves job i. A host whose counts equal last round's
    (``gangs.previous_counts``) keeps its GPUs: the placement planner's rule.
    """
    jobs, names = state.jobs, state.gpu_types
    prev = previous_counts(state)
    hosts = {i: next(iter(c)) for i, c in sorted(counts.items()) if len(c) == 1}
    used: set[int] = set()
    out: list[Slot] = []
    for g in (int(i) for i in order):
        if g in counts or value[g].max() <= 0:
            continue
        best: Slot | None = None
        for h, r in hosts.items():
            if h in used or scale[h] != scale[g] or x[h, r] <= 0 or x[g, r] <= 0:
                continue
            rh, rg = state.table.pair_rates(jobs[h].job_type, jobs[g].job_type, int(scale[g]), names[r])
            if rh <= 0 or rg <= 0:
                continue
            kh, kg = rh / float(x[h, r]), rg / float(x[g, r])
            if kh + kg <= min_gain:
                continue
            d = 1.0 if _stays(state, h, g, dict(counts[h]) == dict(prev.get(h, {}))) else float(discount[g])
            payoff = float(value[g, r]) * kg * d - float(value[h, r]) * (1.0 - kh)
            if payoff > 0 and (best is None or payoff > best.payoff):
                best = Slot(h, g, r, payoff)
        if best is not None:
            used.add(best.host)
            out.append(best)
    return out
