"""Plots rendered from run results (per-job rows and the round event log), never from live objects.

- ``jct_cdf``: CDF of job completion times, one line per policy;
- ``utilization``: busy GPUs / all GPUs per round, one line per policy;
- ``placement_timeline``: which job ran on which GPU, round by round (small runs).

matplotlib is imported lazily with the non-interactive Agg backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hadar.arrays import FloatArray

#: placement timelines are drawn only up to this many GPUs and rounds (beyond, they are unreadable)
TIMELINE_MAX_GPUS = 64
TIMELINE_MAX_ROUNDS = 400


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, ax: Any, path: Path, xlabel: str, ylabel: str) -> Path:
    """Label, grid and legend a line plot, write it as PNG and free the figure."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def utilization_series(events: Sequence[Mapping[str, Any]], num_gpus: int) -> tuple[FloatArray, FloatArray]:
    """(round start times in s, fraction of GPUs leased) from ``round`` events."""
    rounds = [e for e in events if e.get("event") == "round"]
    t = np.array([e["t"] for e in rounds], dtype=float)
    busy = np.array([sum(len(lease[2]) for lease in e["leases"]) for e in rounds], dtype=float)
    return t, busy / max(num_gpus, 1)


def jct_cdf(jcts: Mapping[str, Sequence[float | None]], path: Path) -> Path:
    """One CDF line per policy; JCTs in seconds, plotted in hours."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, values in jcts.items():
        v = np.sort(np.asarray([x for x in values if x is not None], dtype=float)) / 3600.0
        if v.size:
            ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=name)
    ax.set_xscale("log")
    return _save(plt, fig, ax, path, "job completion time (h)", "fraction of jobs")


def utilization(series: Mapping[str, tuple[FloatArray, FloatArray]], path: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, (t, u) in series.items():
        ax.step(t / 3600.0, u, where="post", label=name, lw=1)
    ax.set_ylim(0, 1.05)
    return _save(plt, fig, ax, path, "time (h)", "GPUs leased / all GPUs")


def placement_timeline(events: Sequence[Mapping[str, Any]], gpu_labels: Sequence[str], path: Path,
                       title: str = "") -> Path | None:
    """GPU x time chart, one colour per job; None when the run is too large to draw legibly."""
    rounds = [e for e in events if e.get("event") == "round"]
    if len(gpu_labels) > TIMELINE_MAX_GPUS or len(rounds) > TIMELINE_MAX_ROUNDS or not rounds:
        return None
    plt = _plt()
    cmap = plt.get_cmap("tab20")
    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.18 * len(gpu_labels) + 1)))
    for e in rounds:
        start, width = e["t"] / 3600.0, max(e["end"] - e["t"], 0.0) / 3600.0
        for job_id, _copy, gpus, _ext in e["leases"]:
            for g in gpus:
                ax.broken_barh([(start, width)], (g - 0.4, 0.8), color=cmap(job_id % 20), lw=0)
    ax.set_yticks(range(len(gpu_labels)))
    ax.set_yticklabels(gpu_labels, fontsize=6)
    ax.set_xlabel("time (h)")
    ax.set_title(title or "placement (colour = job id mod 20)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_run_plots(out: Path, runs: Mapping[str, Any], cluster: Any) -> list[Path]:
    """JCT CDF, utilization over time and (small runs) placement timelines for runs keyed by
    policy name (each with ``rows`` and ``events``), as PNG files in ``out``."""
    names = list(runs)
    written = [jct_cdf({n: [row.jct_s for row in runs[n].rows] for n in names}, out / "jct_cdf.png"),
               utilization({n: utilization_series(runs[n].events, cluster.num_gpus) for n in names},
                           out / "utilization.png")]
    labels = [f"{g}:{t}" for g, t in enumerate(cluster.gpu_type_of)]
    for n in names:
        p = placement_timeline(runs[n].events, labels, out / f"placement_{n}.png", title=f"placement: {n}")
        if p is not None:
            written.append(p)
    return written
