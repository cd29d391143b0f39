"""How a forked job's copies run so that they are worth the most under the run's fork efficiency.

HadarE hands a job GPUs as copies, one per node. The run credits a job's m copies with eff(m) x
the sum of their steps (``ForkEfficiency``: eff(1) = 1, and below 1 for m > 1 where forking loses
worth). Two things follow that the forking rule, which prices copies as if every one were worth
its steps, does not see; the forking planner fixes both for each job, per round:

1. **A gang wider than a node is not a fork.** A job with W = 8 on 4-GPU nodes holds its own W
   GPUs as two or more copies, each at its rate on k < W GPUs, all times eff(m). Trained as one
   synchronous gang across the nodes, as Hadar runs any job, the same GPUs make ``X[type, W]``
   steps/s and count as one copy. ``credited_copies`` merges, a gang at a time, the first set of
   the job's copies on nodes of one type (each smaller than W; in node order; by subset sum)
   whose sizes add up to exactly W, where

       eff(m - s + 1) x (X[type, W] + rates of the other copies)  >  eff(m) x (sum of all rates)

   (s copies merged). Under ideal forking a gang wins only where the table's W-GPU rate beats its
   parts' (Gavel's table has such entries: Transformer at batch size 64 makes 49.7 steps/s on 8
   V100s, 39.3 as two copies of 4).
2. **A copy that slows its job down does not run.** One more copy lowers eff for every copy, so
   a slow one (a K80 next to V100s) can cost the job more than it adds. The slowest copy (the
   last in node order on a tie) is dropped while ``eff(m - 1) x (sum - its rate) > eff(m) x sum``;
   its GPUs idle for the round. Under ideal forking no copy is ever dropped. Under the noise-scale
   ``ForkModel`` (eff at the job's progress, less the merge time's share of the round) the m fastest
   copies are kept for the m that credits most (``_keep_best``).

Every comparison must win by a relative 1e-9: a tie keeps the copies as they are, so no choice
hangs on round-off. Types are tried in the order their nodes come in the cluster (which a run
orders by speed, never by name).
"""

from __future__ import annotations

from collections.abc import Sequence

from hadar.model.cluster import Cluster
from hadar.model.fork_model import ForkModel, ForkSetting
from hadar.model.throughput import ThroughputTable

_GAIN = 1e-9  # a change must beat the copies as they are by this relative margin


def copy_factor(efficiency: ForkSetting, job_type: str, m: int, fraction: float, round_s: float) -> float:
    """eff(m), the share of a job's m copies' summed table rate credited in a round: ``ForkEfficiency.factor``,
    or the ``ForkModel``'s ``rate_factor`` at the job's progress ``fraction`` with the round's merge time
    (``round_s``). The planner's and HadarE's one reading of an estimate."""
    if isinstance(efficiency, ForkModel):
        return efficiency.rate_factor(job_type, m, fraction, round_s)
    return efficiency.factor(job_type, m)


class _Factor:
    """eff(m) of one job's m copies (``copy_factor``) at the job's progress ``fraction`` in a round of ``round_s``."""

    def __init__(self, efficiency: ForkSetting, job_type: str, fraction: float, round_s: float) -> None:
        self.efficiency, self.job_type, self.fraction, self.round_s = efficiency, job_type, fraction, round_s
        self.ideal = efficiency.ideal

    def factor(self, job_type: str, m: int) -> float:
        return copy_factor(self.efficiency, job_type, m, self.fraction, self.round_s)


def credited_copies(cluster: Cluster, table: ThroughputTable, efficiency: ForkSetting, job_type: str, w: int,
                    groups: list[tuple[int, ...]], fraction: float = 0.0, round_s: float = 0.0
                    ) -> list[tuple[int, ...]]:
    """``groups`` (one job's copies, each a tuple of GPU ids on one node, in node order) with the copies
    that gain by it merged into synchronous gangs of W GPUs (a gang takes the place of its first copy),
    then the copies that cost the job progress dropped. ``fraction`` (the job's progress) and ``round_s``
    matter only to a ``ForkModel``."""
    if len(groups) < 2:
        return groups
    eff = _Factor(efficiency, job_type, fraction, round_s)
    while any(len(g) < w for g in groups):
        merged = _best_merge(cluster, table, eff, job_type, w, groups)
        if merged is None:
            break
        groups = merged
    if eff.ideal:
        return groups
    if isinstance(efficiency, ForkModel):
        return _keep_best(cluster, table, eff, job_type, groups)
    return _drop_losing(cluster, table, eff, job_type, groups)


def _rates(cluster: Cluster, table: ThroughputTable, job_type: str, groups: list[tuple[int, ...]]) -> list[float]:
    """Steps/s of each copy (a copy or merged gang lies on one GPU type)."""
    return [table.rate_on(job_type, len(g), cluster.gpu_type_of[g[0]]) for g in groups]


def _best_merge(cluster: Cluster, table: ThroughputTable, efficiency: _Factor, job_type: str, w: int,
                groups: list[tuple[int, ...]]) -> list[tuple[int, ...]] | None:
    """The copies with one more gang merged where that gains most (the first type in node order
    on a tie), or None where no merge gains."""
    types = [cluster.gpu_type_of[g[0]] for g in groups]
    rates = _rates(cluster, table, job_type, groups)
    total = sum(rates)
    best_rate = efficiency.factor(job_type, len(groups)) * total
    best: list[int] | None = None
    for t in dict.fromkeys(types):
        parts = [i for i, g in enumerate(groups) if types[i] == t and len(g) < w]
        chosen = _subset(parts, [len(groups[i]) for i in parts], w)
        if chosen is None:
            continue
        rest = total - sum(rates[i] for i in chosen)
        rate = efficiency.factor(job_type, len(groups) - len(chosen) + 1) * (table.rate_on(job_type, w, t) + rest)
        if rate > best_rate * (1.0 + _GAIN):
            best_rate, best = rate, chosen
    if best is None:
        return None
    gang = tuple(sorted(g for i in best for g in groups[i]))
    drop = set(best[1:])
    return [gang if i == best[0] else g for i, g in enumerate(groups) if i not in drop]


def _drop_losing(cluster: Cluster, table: ThroughputTable, efficiency: _Factor, job_type: str,
                 groups: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """``groups`` less the slowest copies, one at a time, while dropping one raises the credited rate."""
    rates = _rates(cluster, table, job_type, groups)
    keep = list(range(len(groups)))
    while len(keep) > 1:
        total = sum(rates[i] for i in keep)
        slowest = min(reversed(keep), key=lambda i: rates[i])  # the last in node order on a tie
        now = efficiency.factor(job_type, len(keep)) * total
        if efficiency.factor(job_type, len(keep) - 1) * (total - rates[slowest]) <= now * (1.0 + _GAIN):
            break
        keep.remove(slowest)
    return [groups[i] for i in keep]


def _keep_best(cluster: Cluster, table: ThroughputTable, efficiency: _Factor, job_type: str,
               groups: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """``groups`` less its slowest copies where that credits most (a ``ForkModel``): of the m fastest copies (the
    earlier in node order on a tie), every m from all down to one, the m with the highest credited rate, fewer
    copies only where they beat more by the relative margin (eff x m may stay flat while eff falls: dropping
    one at a time would stop at the first tie)."""
    rates = _rates(cluster, table, job_type, groups)
    order = sorted(range(len(groups)), key=lambda i: (-rates[i], i))
    prefix = [0.0]
    for i in order:
        prefix.append(prefix[-1] + rates[i])
    best_m, best = len(order), efficiency.factor(job_type, len(order)) * sum(rates)
    for m in range(len(order) - 1, 0, -1):
        credited = efficiency.factor(job_type, m) * prefix[m]
        if credited > best * (1.0 + _GAIN):
            best_m, best = m, credited
    keep = set(order[:best_m])
    return [g for i, g in enumerate(groups) if i in keep]


def _subset(items: Sequence[int], sizes: Sequence[int], target: int) -> list[int] | None:
    """The first subset of ``items`` (by inclusion of the earliest items) whose ``sizes`` sum to ``target``."""
    n = len(items)
    if sum(sizes) < target:
        return None
    reach: list[set[int]] = [set() for _ in range(n + 1)]  # reach[i]: the sums items i.. can make
    reach[n] = {0}
    for i in range(n - 1, -1, -1):
        reach[i] = reach[i + 1] | {v + sizes[i] for v in reach[i + 1] if v + sizes[i] <= target}
    if target not in reach[0]:
        return None
    out: list[int] = []
    need = target
    for i in range(n):
        if need >= sizes[i] and need - sizes[i] in reach[i + 1]:
            out.append(items[i])
            need -= sizes[i]
            if need == 0:
                break
    return out
