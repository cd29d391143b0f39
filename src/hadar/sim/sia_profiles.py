"""Reading Sia's model profiles (the SOSP'23 artifact's ``traces/MODEL/`` folders) into rates and work.

A model's folder holds, per GPU type suffix ``S``:

- ``placements-S.csv``: ``placement,local_bsz,step_time,sync_time`` (columns in any order), one row per
  measured placement (GPUs per node as digits, e.g. ``44`` = two nodes of four) and per-GPU batch;
- ``scalability-S.csv``: ``num_nodes,num_replicas,local_bsz,step_time,sync_time``, used where a
  placement was not measured;

and, for every type alike, ``validation-B.csv`` (``progress,iteration,metric,grad_sqr,grad_var``, one row
per epoch) for each validated global batch ``B``.

The facts read from Sia's simulator (docs/sia.md): a job of ``n`` GPUs at global batch ``B`` on a
placement splits ``B`` into ``ceil(B / n)`` per GPU, accumulating over ``a`` micro-steps where that
exceeds the largest profiled per-GPU batch of the placement; an iteration takes
``step + a * (step - sync)``; real runs are slower than the profiles by a per-model factor; each epoch
``e`` adds ``P(e+1) - P(e)`` of progress (``P`` = the smallest ``progress`` any batch reached by then),
at a gain ``(var + sqr) / (var / s + sqr)`` per iteration (``s`` = batch / the smallest validated batch,
gradient statistics interpolated linearly in the batch); a rigid job ends after the model's epoch count.
This module is our own reading of those rules, not Sia's code.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hadar.errors import InputError


@dataclass(frozen=True, slots=True)
class SiaModel:
    """What Sia's simulator states about one model: epochs to run, restore seconds, slowdown vs profiles."""

    epochs: int
    restart_s: float
    slowdown: float


#: per model: epochs (Sia's ``max_epochs``), restore time (``rescale_time``), real/profile slowdown
MODELS: Mapping[str, SiaModel] = {
    "cifar10": SiaModel(100, 50.0, 1.8),
    "deepspeech2": SiaModel(80, 25.0, 1.2),
    "bert": SiaModel(2, 120.0, 1.2),
    "yolov3": SiaModel(50, 80.0, 1.2),
    "imagenet": SiaModel(90, 250.0, 1.2),
    "ncf": SiaModel(10, 15.0, 1.5),
}


@dataclass(frozen=True, slots=True)
class GpuKind:
    """One GPU type of Sia's cluster: hadar's name, Sia's profile suffix, GPUs per node, nodes."""

    name: str
    suffix: str
    per_node: int
    nodes: int


#: Sia's simulated cluster (its simulator config): 6 nodes of 4 T4, 2 of 8 A100, 3 of 8 RTX 2080Ti
CLUSTER: tuple[GpuKind, ...] = (GpuKind("t4", "aws", 4, 6), GpuKind("a100", "dgx-ext", 8, 2),
                                GpuKind("rtx2080ti", "rtx", 8, 3))

_STEP = ("step_time", "sync_time")


@dataclass(frozen=True, slots=True)
class _Curve:
    """One model's epoch curve: progress at each epoch's end and gradient stats, per validated batch."""

    batches: tuple[int, ...]
    progress: tuple[float, ...]  # P(1), P(2), ...: the smallest progress any batch reached
    grad: Mapping[int, tuple[tuple[float, ...], tuple[float, ...]]]  # batch -> (grad_sqr, grad_var) per epoch


def _read_csv(path: Path, need: Sequence[str]) -> list[dict[str, float]]:
    if not path.is_file():
        raise InputError(f"Sia profile not found: {path}")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        lacking = [c for c in need if c not in (reader.fieldnames or [])]
        if lacking:
            raise InputError(f"{path}: no column {lacking[0]!r}")
        out = []
        for line, rec in enumerate(reader, start=2):
            try:
                out.append({c: float(rec[c]) for c in need})
            except (TypeError, ValueError):
                raise InputError(f"{path}:{line}: {', '.join(need)} must be numbers") from None
    if not out:
        raise InputError(f"{path}: no rows")
    return out


class SiaProfile:
    """One model's profiles on Sia's GPU types (``folder`` = ``SIA_DIR/traces/MODEL``)."""

    def __init__(self, folder: Path, model: str) -> None:
        if model not in MODELS:
            raise InputError(f"unknown Sia model {model!r} (known: {', '.join(sorted(MODELS))})")
        self.model, self.folder, self.facts = model, folder, MODELS[model]
        self.curve = self._read_validation()
        self._placements: dict[str, list[dict[str, float]]] = {}
        self._scalability: dict[str, list[dict[str, float]]] = {}
        self._interpolants: dict[str, Any] = {}

    def _read_validation(self) -> _Curve:
        files = sorted(self.folder.glob("validation-*.csv"))
        if not files:
            raise InputError(f"no validation-*.csv in {self.folder} (is --sia-dir Sia's sia-simulator folder?)")
        per: dict[int, list[dict[str, float]]] = {}
        for p in files:
            tail = p.stem.rsplit("-", 1)[-1]
            if not tail.isdigit():
                raise InputError(f"{p}: want validation-BATCH.csv")
            per[int(tail)] = _read_csv(p, ("progress", "grad_sqr", "grad_var"))
        epochs = self.facts.epochs
        short = [b for b, rows in per.items() if len(rows) < epochs]
        if short:
            raise InputError(f"{self.folder}/validation-{short[0]}.csv: fewer than {epochs} epochs")
        progress = tuple(min(rows[e]["progress"] for rows in per.values()) for e in range(epochs))
        grad = {b: (tuple(r["grad_sqr"] for r in rows), tuple(r["grad_var"] for r in rows))
                for b, rows in per.items()}
        return _Curve(tuple(sorted(per)), progress, grad)

    def rows(self, kind: str, suffix: str) -> list[dict[str, float]]:
        """The rows of ``placements-SUFFIX.csv`` or ``scalability-SUFFIX.csv`` (``kind``), read once."""
        cache = self._placements if kind == "placements" else self._scalability
        if suffix not in cache:
            need = (("placement", "local_bsz") if kind == "placements" else
                    ("num_nodes", "num_replicas", "local_bsz")) + _STEP
            cache[suffix] = _read_csv(self.folder / f"{kind}-{suffix}.csv", need)
        return cache[suffix]

    def _placement_rows(self, suffix: str, placement: int) -> list[dict[str, float]]:
        return [r for r in self.rows("placements", suffix) if int(r["placement"]) == placement]

    def max_local_bsz(self, suffix: str, placement: tuple[int, ...]) -> float:
        """The largest per-GPU batch profiled on ``placement`` (else on any larger scalability point)."""
        rows = self._placement_rows(suffix, placement_id(placement))
        if rows:
            return max(r["local_bsz"] for r in rows)
        nodes, gpus = len(placement), sum(placement)
        bigger = [r["local_bsz"] for r in self.rows("scalability", suffix)
                  if r["num_nodes"] >= nodes and r["num_replicas"] >= gpus]
        if not bigger:
            raise InputError(f"{self.folder}: no profile of {self.model} on {gpus} GPU(s) of {suffix}")
        return max(bigger)

    def min_local_bsz(self, suffix: str) -> float:
        """The smallest per-GPU batch profiled on the type (Sia's ``min_local_bsz``)."""
        return min(r["local_bsz"] for r in self.rows("placements", suffix))

    def step_times(self, suffix: str, placement: tuple[int, ...], local_bsz: float) -> tuple[float, float] | None:
        """``(step_time, sync_time)`` at ``local_bsz`` per GPU; ``None`` outside the profiled range."""
        rows = self._placement_rows(suffix, placement_id(placement))
        if rows:
            rows = sorted(rows, key=lambda r: r["local_bsz"])
            xs = [r["local_bsz"] for r in rows]
            if not xs[0] <= local_bsz <= xs[-1]:
                return None
            step, sync = (float(np.interp(local_bsz, xs, [r[c] for r in rows])) for c in _STEP)
            return step, sync
        return self._scaled_step_times(suffix, placement, local_bsz)

    def _scaled_step_times(self, suffix: str, placement: tuple[int, ...],
                           local_bsz: float) -> tuple[float, float] | None:
        """An unmeasured placement: linear interpolation over (nodes, GPUs, batch) of all measured points
        (the interpolant built once per GPU type)."""
        if suffix not in self._interpolants:
            self._interpolants[suffix] = self._interpolant(suffix)
        got = self._interpolants[suffix]([min(len(placement), 16), sum(placement), local_bsz])[0]
        return None if not np.all(np.isfinite(got)) else (float(got[0]), float(got[1]))

    def _interpolant(self, suffix: str) -> Any:
        """The linear interpolant of (step, sync) over (nodes, GPUs, batch) of every measured point of a type."""
        from scipy.interpolate import LinearNDInterpolator

        points: dict[tuple[float, float, float], list[tuple[float, float]]] = {}
        for r in self.rows("placements", suffix):
            p = str(int(r["placement"]))
            key = (float(len(p)), float(sum(int(c) for c in p)), r["local_bsz"])
            points.setdefault(key, []).append((r["step_time"], r["sync_time"]))
        for r in self.rows("scalability", suffix):
            key = (r["num_nodes"], r["num_replicas"], r["local_bsz"])
            points.setdefault(key, [(r["step_time"], r["sync_time"])])
        keys = sorted(points)
        values = np.array([np.mean(points[k], axis=0) for k in keys])
        return LinearNDInterpolator(np.array(keys), values)

    def gain(self, batch: float, epoch: int) -> float:
        """Progress per iteration at global ``batch`` in ``epoch`` (gradient stats interpolated in the batch)."""
        bs = self.curve.batches
        if not bs[0] <= batch <= bs[-1]:
            raise InputError(f"{self.model}: batch {batch:g} outside the validated {bs[0]}..{bs[-1]}")
        lo = max(b for b in bs if b <= batch)
        hi = min(b for b in bs if b >= batch)
        w = 0.0 if hi == lo else (batch - lo) / (hi - lo)
        sqr, var = ((1 - w) * self.curve.grad[lo][i][epoch] + w * self.curve.grad[hi][i][epoch] for i in (0, 1))
        scale = batch / bs[0]
        return (var + sqr) / (var / scale + sqr)

    def noise_scale(self, batch: float, epoch: int) -> float:
        """``Bn = M0 * var / sqr`` (``M0`` the smallest validated batch) in ``epoch`` at global ``batch``: the
        noise scale that gives ``gain`` (``inf`` where ``sqr`` is 0; 0 where ``var`` is)."""
        bs = self.curve.batches
        lo = max(b for b in bs if b <= batch)
        hi = min(b for b in bs if b >= batch)
        w = 0.0 if hi == lo else (batch - lo) / (hi - lo)
        sqr, var = ((1 - w) * self.curve.grad[lo][i][epoch] + w * self.curve.grad[hi][i][epoch] for i in (0, 1))
        if var <= 0:
            return 0.0
        return math.inf if sqr <= 0 else bs[0] * var / sqr

    def noise_points(self, batch: float) -> tuple[tuple[float, float], ...]:
        """``(fraction of the final progress, Bn)`` per epoch at global ``batch``, from where each epoch
        starts (an epoch that adds no progress is left out)."""
        total = self.curve.progress[-1]
        out: list[tuple[float, float]] = []
        start = 0.0
        for e, reached in enumerate(self.curve.progress):
            if reached > start:
                out.append((start / total, self.noise_scale(batch, e)))
                start = reached
        return tuple(out) or ((0.0, self.noise_scale(batch, 0)),)

    def iterations(self, batch: float) -> float:
        """Iterations a rigid job at global ``batch`` needs to finish the model's epochs."""
        done, total = 0.0, 0.0
        for e, reached in enumerate(self.curve.progress):
            total += (reached - done) / self.gain(batch, e)
            done = reached
        return total


def placement_id(placement: tuple[int, ...]) -> int:
    """A placement as Sia's profiles key it: GPUs per node as digits, the smallest rotation."""
    parts = tuple(p for p in placement if p)
    return int("".join(map(str, min(parts[i:] + parts[:i] for i in range(len(parts))))))


def tightest(gpus: int, per_node: int) -> tuple[int, ...]:
    """``gpus`` on as few nodes of ``per_node`` GPUs as possible: full nodes, then the rest."""
    return (per_node,) * (gpus // per_node) + ((gpus % per_node,) if gpus % per_node else ())


@dataclass(frozen=True, slots=True)
class RigidRun:
    """A rigid job on one GPU type: seconds per iteration (slowdown included), its real global batch,
    and iterations to finish at that batch."""

    iteration_s: float
    batch: int
    iterations: float

    @property
    def seconds(self) -> float:
        return self.iteration_s * self.iterations


def rigid_run(profile: SiaProfile, kind: GpuKind, gpus: int, batch: int) -> RigidRun | None:
    """A job of ``gpus`` GPUs at global ``batch`` on the tightest placement of ``kind``; ``None`` if the
    profiles do not cover it (that type cannot run it)."""
    placement = tightest(gpus, kind.per_node)
    local = math.ceil(batch / gpus - 1e-8)
    accum = math.ceil(local / profile.max_local_bsz(kind.suffix, placement) - 1e-8) - 1
    if gpus == 1 and batch > profile.curve.batches[0]:
        accum = max(1, accum)
    atomic = math.ceil(local / (accum + 1) - 1e-8)
    same_count = [r["local_bsz"] for r in profile.rows("placements", kind.suffix)
                  if sum(int(c) for c in str(int(r["placement"]))) == gpus]
    if same_count:
        atomic = min(atomic, int(max(same_count)))  # the memory cap of Sia's batch split
    atomic = min(atomic, int(profile.curve.batches[-1] / (gpus * (accum + 1))))
    times = profile.step_times(kind.suffix, placement, atomic) if atomic > 0 else None
    if times is None:
        return None
    step, sync = times
    real_batch = gpus * atomic * (accum + 1)
    iteration_s = (step + accum * (step - sync)) * profile.facts.slowdown
    return RigidRun(iteration_s, real_batch, profile.iterations(real_batch))
