"""Calibrating HadarE's fork efficiency on the real runtime (``hadar experiment fork-efficiency``).

For each bundled workload and seed, the same job is trained for the same number of samples
(``steps``: one step is one per-worker batch) unforked, and forked k ways for each k, exactly
as the runtime trains forked jobs: every round each copy starts from the job's canonical
checkpoint, runs ``local_steps`` iterations of the job's ``train(ctx)`` through the lease runner
(``hadar.job.runner.run_lease``: copy c of k reads shard c of every global batch, so the copies
read disjoint data and together as many samples as k unforked steps), and the job tracker's
``merge_copies`` averages the copies' weights into the canonical checkpoint. The unforked job
runs leases of ``local_steps`` iterations. After every round the canonical model is evaluated
on the held-out set (the workload's metric and its loss).

The efficiency of k copies is the share of the samples that unforked training needs to reach
the quality the forked run reached with all of them (``samples_to_reach`` on the unforked
learning curve); per family, ``fit_per_doubling`` fits eff(k) = e ** log2(k) to the mean over
seeds. Plain processes, no Ray: leases run one after another in this process (one torch
thread), so every number is a deterministic function of the seeds.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from hadar.model.fork_efficiency import efficiency, fit_per_doubling

#: workload alias -> samples budget (steps): the budgets of `hadar experiment hadare`'s jobs (its long LSTM job)
BUDGETS: dict[str, int] = {"resnet": 260, "lstm": 1500, "transformer": 220, "recoder": 1100}
#: iterations each copy trains between averages (about a copy's share of a 3 s round in that experiment)
LOCAL_STEPS = 24
RUN_ID = "fork-efficiency"
TRAIN_BATCHES = 32  # batches of the training set the ``train`` basis averages the loss over


@dataclass(frozen=True, slots=True)
class Curve:
    """Held-out quality of one job's canonical model after each round (``samples[0]`` = 0: untrained)."""

    workload: str
    copies: int
    seed: int
    samples: tuple[float, ...]  # job steps done (per-worker batches)
    metric: tuple[float, ...]
    loss: tuple[float, ...]


def _spec(name: str, seed: int, folder: Path, **kw: Any) -> Any:
    from hadar.job.lease import LeaseSpec
    from hadar.runtime import workloads

    canonical = folder / "job.pt"
    return LeaseSpec(job_id=0, entrypoint=workloads.entrypoint(name), rank=0, world=1, budget_s=1e9,
                     checkpoint=str(canonical), restore_from=str(canonical), seed=seed, run_id=RUN_ID, **kw)


def _evaluate(wl: Any, seed: int, state: dict[str, Any] | None, basis: str = "heldout") -> tuple[float, float]:
    """(metric, loss) of the model in ``state`` (None: untrained) on the workload's held-out set; ``basis``
    ``train``: its loss (both values) on ``TRAIN_BATCHES`` fixed batches of its training set instead."""
    import torch

    from hadar.runtime.workloads.base import _data
    from hadar.runtime.workloads.recommendation import Recoder

    model = wl.build_model(seed)
    if state is not None:
        model.load_state_dict(state["model"])
    train_set, test = _data(cast(Any, type(wl)), seed, "cpu")  # a class is hashable; mypy thinks not
    if basis == "train":
        model.eval()
        with torch.no_grad():
            lo = sum(float(wl.loss(model, wl.batch(train_set, i, 0, 1, seed + 104_729)))
                     for i in range(TRAIN_BATCHES)) / TRAIN_BATCHES
        return lo, lo
    metric = wl.evaluate(model, test)
    model.eval()
    with torch.no_grad():  # Recoder: reconstruct the test users' whole rows from the visible part
        loss = float(wl.loss(model, test[0] + test[1]) if isinstance(wl, Recoder) else wl.loss(model, test))
    return metric, loss


@dataclass(frozen=True, slots=True)
class Training:
    """How ``train`` trains: ``steps`` samples (per-worker batches) in rounds of ``local_steps`` iterations per
    copy; ``start``: a checkpoint of the same job and seed to go on from (its own steps and iterations
    carried on; the curve counts samples from it), else from scratch; the held-out set evaluated every
    ``eval_every`` rounds and after the last; ``outer``: the merge's step (``aggregate.merge_copies``);
    ``basis``: ``heldout`` (the held-out metric and loss) or ``train`` (the loss on fixed training batches)."""

    steps: int
    local_steps: int
    seed: int
    optimizer: str = "largest"
    start: Path | None = None
    eval_every: int = 1
    outer: float = 1.0
    basis: str = "heldout"


def train_curve(name: str, copies: int, *, steps: int, local_steps: int, seed: int, folder: Path,
                optimizer: str = "largest") -> Curve:
    """Train workload ``name`` for ``steps`` samples as ``copies`` copies (1: unforked), averaged every
    round of ``local_steps`` iterations per copy; the held-out quality after every round."""
    return train(name, copies, Training(steps, local_steps, seed, optimizer), folder)


def train(name: str, copies: int, how: Training, folder: Path) -> Curve:
    """``train_curve`` as ``how`` says (``Training``)."""
    import shutil

    from hadar.runtime import checkpoint, workloads

    wl = workloads.get(name)
    folder.mkdir(parents=True, exist_ok=True)
    canonical = folder / "job.pt"
    canonical.unlink(missing_ok=True)
    offset, iteration, saved = 0, 0, False
    if how.start is not None:
        shutil.copyfile(how.start, canonical)
        meta = checkpoint.meta_of(checkpoint.load(canonical))
        offset, iteration, saved = int(meta["steps"]), int(meta["iteration"]), True
    state = checkpoint.load(canonical) if saved else None
    m, lo = _evaluate(wl, how.seed, state["state"] if state else None, how.basis)
    samples, metric, loss = [0.0], [m], [lo]
    done, rounds = 0, 0
    while done < how.steps:
        share = min(how.local_steps * copies, how.steps - done)
        iteration += _round(name, copies, how, folder, (offset + done, iteration, share, saved, offset + how.steps))
        done += share
        rounds += 1
        saved = True
        if rounds % how.eval_every == 0 or done >= how.steps:
            state = checkpoint.load(canonical)
            m, lo = _evaluate(wl, how.seed, state["state"] if state else None, how.basis)
            samples.append(float(done))
            metric.append(m)
            loss.append(lo)
    return Curve(name, copies, how.seed, tuple(samples), tuple(metric), tuple(loss))


def _round(name: str, copies: int, how: Training, folder: Path, at: tuple[int, int, int, bool, int]) -> int:
    """One round of ``share`` samples split over the copies, from ``at`` = (job steps done, iteration, share,
    a checkpoint to resume, the job's total steps), the copies merged into the canonical checkpoint; the
    iterations the longest copy made."""
    from dataclasses import replace

    from hadar.job.runner import run_lease
    from hadar.runtime import aggregate

    done, iteration, share, saved, total = at
    canonical = folder / "job.pt"
    per = [share // copies + (1 if c < share % copies else 0) for c in range(copies)]
    base = _spec(name, how.seed, folder, total_steps=float(total), start_iteration=iteration,
                 steps_done=float(done), resume_steps=float(done) if saved else None, max_iterations=0)
    results = []
    for c, n in enumerate(per):
        if n == 0:
            continue
        spec = replace(base, max_iterations=n)
        if copies > 1:
            spec = replace(spec, copy=c, copies=copies, shard_offset=c, shards=copies,
                           checkpoint=str(aggregate.copy_path(canonical, c)))
        out = run_lease(spec)
        if not out.ok:
            raise RuntimeError(f"{name} copy {c}: {out.error}\n{out.traceback}")
        results.append(aggregate.CopyResult(c, aggregate.copy_path(canonical, c), float(n), out.iterations))
    if copies > 1:
        aggregate.merge_copies(canonical, float(done), iteration, results, optimizer=how.optimizer,
                               outer=how.outer)
    return max(r.iterations for r in results)


def measure(names: list[str], copies: list[int], seeds: list[int], *, steps: dict[str, int],
            local_steps: int = LOCAL_STEPS, optimizer: str = "largest", progress: Any = None) -> list[Curve]:
    """Every (workload, seed, k) curve, k = 1 (unforked) first."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    curves = []
    try:
        with tempfile.TemporaryDirectory(prefix="hadar-forkeff-") as tmp:
            for name in names:
                for seed in seeds:
                    for k in [1, *copies]:
                        c = train_curve(name, k, steps=steps[name], local_steps=local_steps, seed=seed,
                                        folder=Path(tmp) / f"{name}-{seed}-{k}", optimizer=optimizer)
                        curves.append(c)
                        if progress is not None:
                            progress(c)
    finally:
        torch.set_num_threads(threads)
    return curves


def summarize(curves: list[Curve], basis: str = "loss") -> dict[str, Any]:
    """Per workload: each k's efficiency per seed, mean and std, on both quality bases (``metric``: the
    workload's own held-out metric; ``loss``: its held-out loss), and the e per doubling fitted to the
    means on ``basis``."""
    from hadar.runtime import workloads

    out: dict[str, Any] = {}
    for name in dict.fromkeys(c.workload for c in curves):
        wl = workloads.get(name)
        unforked = {c.seed: c for c in curves if c.workload == name and c.copies == 1}
        per_k: dict[str, Any] = {}
        for k in sorted({c.copies for c in curves if c.workload == name and c.copies > 1}):
            rows = []
            for c in (c for c in curves if c.workload == name and c.copies == k):
                u = unforked[c.seed]
                row: dict[str, Any] = {"seed": c.seed}
                for b, uq, fq, higher in (("metric", u.metric, c.metric, wl.higher_is_better),
                                          ("loss", u.loss, c.loss, False)):
                    row[b] = {"efficiency": efficiency(u.samples, uq, fq[-1], c.samples[-1], higher_is_better=higher),
                              "forked": fq[-1], "unforked": uq[-1]}
                rows.append(row)
            per_k[str(k)] = {b: _spread([r[b]["efficiency"] for r in rows]) for b in ("metric", "loss")}
            per_k[str(k)]["seeds"] = rows
        e = fit_per_doubling({int(k): v[basis]["mean"] for k, v in per_k.items()})
        out[name] = {"family": wl.family, "job_type": wl.name, "metric": wl.metric, "basis": basis,
                     "samples": max(c.samples[-1] for c in curves if c.workload == name),
                     "copies": per_k, "per_doubling": e}
    return out


def _spread(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values)}


def calibration_file(summary: dict[str, Any], settings: dict[str, Any], curves: list[Curve]) -> dict[str, Any]:
    """The JSON ``ForkEfficiency.load`` reads, with the measurement kept under ``calibration``."""
    from dataclasses import asdict

    families = {s["family"]: {"per_doubling": round(s["per_doubling"], 4), "workload": name,
                              "measured": {k: round(v[s["basis"]]["mean"], 4) for k, v in s["copies"].items()}}
                for name, s in summary.items()}
    return {"model": "per_doubling", "families": families, "default": 1.0,
            "note": "eff(k) = per_doubling ** log2(k): the share of k forked copies' samples that counts as "
                    "unforked progress; measured by `hadar experiment fork-efficiency`",
            "calibration": {"settings": settings, "workloads": summary,
                            "curves": [{k: [round(x, 5) for x in v] if isinstance(v, tuple) else v
                                        for k, v in asdict(c).items()} for c in curves]}}


def format_table(summary: dict[str, Any]) -> str:
    """One row per workload: eff(k) mean ± std over seeds on the metric and on the loss, the fitted e."""
    ks = sorted({int(k) for s in summary.values() for k in s["copies"]})
    cols = [(b, k) for b in ("metric", "loss") for k in ks]
    head = (f"{'workload':<30}{'family':<16}{'samples':>8}" + "".join(f"{f'eff({k}) {b}':>16}" for b, k in cols)
            + f"{'e/doubling':>12}")
    lines = [head]
    for s in summary.values():
        cells = "".join(f"{s['copies'][str(k)][b]['mean']:>9.3f} ± {s['copies'][str(k)][b]['std']:.3f}"
                        if str(k) in s["copies"] else f"{'-':>16}" for b, k in cols)
        lines.append(f"{s['job_type'][:29]:<30}{s['family']:<16}{s['samples']:>8.0f}{cells}{s['per_doubling']:>12.3f}")
    return "\n".join(lines)
