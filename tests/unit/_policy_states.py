"""Builders of small ``SchedulerState``s for the policy tests (hand-made throughput tables)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hadar.model import Cluster, JobView, SchedulerState, ThroughputTable
from hadar.model.state import Allocation


def state(jobs: list[dict[str, Any]], counts: Mapping[str, int], *, now: float = 0.0,
          memo: Mapping[str, Any] | None = None) -> SchedulerState:
    """``jobs``: dicts with ``rates`` ({gpu_type: steps/s}) and optional ``sf``, ``w``,
    ``remaining``, ``total``, ``arrival``, ``id``, ``type``. Unlisted types run at 0."""
    cluster = Cluster.from_counts(dict(counts))
    rates: dict[tuple[str, int], dict[str, float]] = {}
    views = []
    for i, spec in enumerate(jobs):
        jt, sf = spec.get("type", f"job{i}"), int(spec.get("sf", 1))
        rates[(jt, sf)] = {t: float(spec["rates"].get(t, 0.0)) for t in cluster.gpu_types}
        total = float(spec.get("total", spec.get("remaining", 1000.0)))
        views.append(JobView(
            job_id=int(spec.get("id", i)), job_type=jt, scale_factor=sf, priority_weight=float(spec.get("w", 1.0)),
            arrival_s=float(spec.get("arrival", 0.0)), total_steps=total,
            remaining_steps=float(spec.get("remaining", total)),
            throughputs=tuple(rates[(jt, sf)][t] for t in cluster.gpu_types)))
    return SchedulerState(now_s=now, round_s=360.0, cluster=cluster, jobs=tuple(views),
                          table=ThroughputTable(rates, "test"), memo=dict(memo or {}))


def normalized(alloc: Allocation, st: SchedulerState, *, throughputs: np.ndarray | None = None) -> np.ndarray:
    """Gavel's max-min objective per job: ``s_i / (w_i prop_i) * sum_j T_ij x_ij``."""
    t = st.throughput_matrix() if throughputs is None else throughputs
    caps = st.capacities()
    prop = t @ (caps / caps.sum())
    return st.scale_factors() / (st.priority_weights() * prop) * (t * alloc.fractions).sum(axis=1)


def assert_feasible(alloc: Allocation, st: SchedulerState, tol: float = 1e-6) -> None:
    x = alloc.fractions
    assert (x >= -tol).all()
    assert (x.sum(axis=1) <= 1 + tol).all()
    assert ((x * st.scale_factors()[:, None]).sum(axis=0) <= st.capacities() + tol).all()
    assert (x[st.throughput_matrix() == 0] == 0).all()
