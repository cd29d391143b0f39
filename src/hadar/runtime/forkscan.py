"""The noise-scale fork model checked against real training (``hadar experiment fork-scan``).

The simulator's noise-scale world (``model/fork_model.py``) credits k copies averaged every round with
``rho x (Bn + B) / (Bn + k B)`` of their summed steps: exact for a quadratic loss (k copies at batch B averaged
after any number of local steps are data parallelism at kB), with ``rho`` the drift a real loss adds. This
measures both on the bundled workloads instead of assuming them:

- **Phases.** Each workload is first trained unforked for ``warm`` samples (0: early, from scratch; later
  warms: late in training) into a checkpoint; every run of the phase goes on from it (its weights, its
  optimizer state, its place in the data).
- **Bn at the fork point**, measured on that checkpoint's model: ``pairs`` pairs of disjoint batches at the
  job's batch B (a shuffle of their own, not the training order); per pair the two gradients' mean squared
  norm at B and their average's at 2B give ``|G|^2`` and the noise trace ``S`` (``hadar.job.noise``'s
  estimators), averaged over the pairs; ``Bn = S / |G|^2`` in samples. Measured again after the phase's
  unforked run (``bn_end``): Bn grows as training goes on.
- **eff(k) at each local-step count L**: from the checkpoint, unforked training and k copies averaged every
  L iterations per copy train the same ``samples`` (per-worker batches); eff is the share of them unforked
  training needs to reach the loss the copies reached (``calibrate``'s conversion; at most 1). The loss is,
  by default, the training loss on fixed batches (``basis`` ``train``): the model predicts optimization
  progress, and the bundled workloads' small data sets overfit within a scan (their held-out loss rises
  again, so the held-out basis, ``heldout``, measures when each run began to overfit as much as forking).
- **Predicted**: ``(Bn + B) / (Bn + k B)`` at the measured Bn (rho = 1), and the world's default, the
  family's default noise scale and ``rho`` (``ForkModel``) at the phase's progress. ``rho`` measured:
  eff over the prediction at the measured Bn.

Plain processes, one torch thread, runs one after another: every number is a function of the seeds.
"""

from __future__ import annotations

import csv
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from hadar.job.noise import pair
from hadar.model.efficiency import gain
from hadar.model.fork_efficiency import efficiency
from hadar.runtime.calibrate import Training, train

LOCAL_STEPS = (6, 24, 96, 384, 1536)
PAIRS = 256  # gradient pairs per noise-scale measurement (a least-squares model: 64 read 11 % low, 600 4 %)
EVALS = 32  # held-out evaluations along the unforked curve (the forked runs': their end)


@dataclass(frozen=True, slots=True)
class ScanPoint:
    """One (workload, seed, phase, k, L) measurement."""

    workload: str
    seed: int
    warm: int  # samples trained unforked before the fork
    copies: int
    local_steps: int
    samples: int
    batch: int
    bn: float  # measured at the fork point, samples
    bn_end: float  # measured after the unforked run
    loss_unforked: float
    loss_forked: float
    eff: float  # measured
    predicted: float  # (Bn + B) / (Bn + kB), Bn measured
    model: float  # the world's default: the family's noise scale and rho at this progress

    @property
    def rho(self) -> float:
        return self.eff / self.predicted if self.predicted > 0 else float("nan")


def noise_scale(wl: Any, state: dict[str, Any] | None, seed: int, pairs: int = PAIRS) -> float:
    """``Bn`` of workload ``wl``'s model in ``state`` (None: untrained) on its training data (module docstring);
    inf where the estimated ``|G|^2`` is not positive (all noise)."""
    import torch

    from hadar.runtime.workloads.base import _data

    model = wl.build_model(seed)
    if state is not None:
        model.load_state_dict(state["model"])
    model.train()
    train_set, _ = _data(cast(Any, type(wl)), seed, "cpu")
    b = float(wl.batch_size)
    sqr = var = 0.0
    for p in range(pairs):
        grads = []
        for j in (0, 1):
            model.zero_grad(set_to_none=True)
            wl.loss(model, wl.batch(train_set, 2 * p + j, 0, 1, seed + 7919)).backward()
            grads.append(torch.cat([q.grad.reshape(-1) for q in model.parameters() if q.grad is not None]))
        small = 0.5 * float(grads[0].square().sum() + grads[1].square().sum())
        big = float((0.5 * (grads[0] + grads[1])).square().sum())
        got = pair(small, b, big, 2.0 * b)
        sqr += got[0]
        var += got[1]
    return var / sqr if sqr > 0 else float("inf")


def predicted(bn: float, batch: float, copies: int) -> float:
    """The quadratic model's eff(k): ``r(kB) / (k r(B))`` = ``(Bn + B) / (Bn + kB)``."""
    return gain(bn, batch, copies * batch) / copies


@dataclass(frozen=True, slots=True)
class Scan:
    """What ``scan`` measures: workloads (aliases), k values, L values, seeds, warms and samples (per alias)."""

    names: list[str]
    copies: list[int]
    local_steps: list[int]
    seeds: list[int]
    warms: dict[str, list[int]]
    samples: dict[str, int]
    optimizer: str = "largest"
    outer: float = 1.0  # the merge's step: 1 averages the copies, k sums their moves
    basis: str = "train"  # the loss eff is read on: ``train`` (fixed training batches) or ``heldout``


def scan(plan: Scan, progress: Any = None) -> list[ScanPoint]:
    """Every point of ``plan``; ``progress(text)`` after each run."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out: list[ScanPoint] = []
    try:
        with tempfile.TemporaryDirectory(prefix="hadar-forkscan-") as tmp:
            for name in plan.names:
                for seed in plan.seeds:
                    for warm in plan.warms[name]:
                        out += _phase(plan, name, seed, warm, Path(tmp) / f"{name}-{seed}-{warm}", progress)
    finally:
        torch.set_num_threads(threads)
    return out


def _phase(plan: Scan, name: str, seed: int, warm: int, folder: Path, progress: Any) -> list[ScanPoint]:
    from hadar.model.fork_model import ForkModel
    from hadar.runtime import checkpoint, workloads

    wl = workloads.get(name)
    start = None
    if warm > 0:
        train(name, 1, Training(warm, warm, seed, eval_every=1 << 30, basis=plan.basis), folder / "warm")
        start = folder / "warm" / "job.pt"
    n = plan.samples[name]
    state = checkpoint.load(start) if start is not None else None
    bn = noise_scale(wl, state["state"] if state else None, seed)
    unforked = train(name, 1, Training(n, max(1, n // EVALS), seed, plan.optimizer, start, basis=plan.basis),
                     folder / "k1")
    end = checkpoint.load(folder / "k1" / "job.pt")
    bn_end = noise_scale(wl, end["state"] if end else None, seed)
    _say(progress, f"{name} seed {seed} warm {warm}: Bn {bn:.1f} -> {bn_end:.1f} samples, unforked loss "
                   f"{unforked.loss[-1]:.4f}")
    model = ForkModel()
    points = []
    for k in plan.copies:
        for steps in plan.local_steps:
            how = Training(n, steps, seed, plan.optimizer, start, 1 << 30, plan.outer, plan.basis)
            forked = train(name, k, how, folder / f"k{k}-L{steps}")
            eff = efficiency(unforked.samples, unforked.loss, forked.loss[-1], forked.samples[-1],
                             higher_is_better=False)
            points.append(ScanPoint(name, seed, warm, k, steps, n, wl.batch_size, bn, bn_end, unforked.loss[-1],
                                    forked.loss[-1], eff, predicted(bn, wl.batch_size, k),
                                    model.factor(wl.mirrors, k, warm / (warm + n))))
            _say(progress, f"  k={k} L={steps}: loss {forked.loss[-1]:.4f}, eff {eff:.3f} "
                           f"(predicted {points[-1].predicted:.3f})")
    return points


def _say(progress: Any, text: str) -> None:
    if progress is not None:
        progress(text)


def format_table(points: list[ScanPoint]) -> str:
    head = (f"{'workload':<12}{'seed':>5}{'warm':>7}{'Bn':>9}{'Bn end':>9}{'k':>3}{'L':>6}{'eff':>8}"
            f"{'pred':>8}{'rho':>7}{'model':>8}")
    rows = [head]
    for p in points:
        rows.append(f"{p.workload:<12}{p.seed:>5}{p.warm:>7}{p.bn:>9.1f}{p.bn_end:>9.1f}{p.copies:>3}"
                    f"{p.local_steps:>6}{p.eff:>8.3f}{p.predicted:>8.3f}{p.rho:>7.3f}{p.model:>8.3f}")
    return "\n".join(rows)


def write(points: list[ScanPoint], settings: dict[str, Any], out: Path) -> list[Path]:
    """``out``/scan.json, scan.csv and scan.png (eff against L per workload, phase and k, the prediction
    dashed); the paths written."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    rows = [{**asdict(p), "rho": p.rho} for p in points]
    (out / "scan.json").write_text(json.dumps({"settings": settings, "points": rows}, indent=2) + "\n")
    with open(out / "scan.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["workload"])
        w.writeheader()
        w.writerows(rows)
    return [out / "scan.json", out / "scan.csv", _plot(points, out / "scan.png")]


def _plot(points: list[ScanPoint], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(p.workload for p in points))
    fig, axes = plt.subplots(1, max(1, len(names)), figsize=(5 * max(1, len(names)), 4), squeeze=False)
    for ax, name in zip(axes[0], names, strict=False):
        for key in dict.fromkeys((p.warm, p.copies) for p in points if p.workload == name):
            sel = sorted((p for p in points if p.workload == name and (p.warm, p.copies) == key),
                         key=lambda p: (p.local_steps, p.seed))
            line = ax.plot([p.local_steps for p in sel], [p.eff for p in sel], marker="o",
                           label=f"warm {key[0]}, k={key[1]}")[0]
            ax.axhline(sum(p.predicted for p in sel) / len(sel), color=line.get_color(), linestyle="--")
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("local steps per copy between averages")
        ax.set_ylabel("eff(k) measured (dashed: predicted at measured Bn)")
        ax.set_title(name)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
