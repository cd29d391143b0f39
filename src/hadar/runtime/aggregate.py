"""HadarE's job tracker on the runtime: merge a forked job's copies into its canonical checkpoint.

Every round, each copy of a forked job starts from the job's canonical
checkpoint, trains on its own disjoint shard of every global batch and
saves its own checkpoint (``copy_path``). The tracker then averages the
``"model"`` entries of the copies' saved states, weighted by the steps each
did (periodic model averaging: local SGD with one round per period), and
writes the result atomically as the canonical checkpoint that every copy of
the next round starts from. A copy that failed is simply left out: the
others' work counts, and if none succeeded the canonical checkpoint is
untouched.

Optimizer state (the ``"optimizer"`` entry): ``largest`` takes it from the
copy that did the most steps; ``average`` averages its floating-point
tensors with the same weights (integer entries come from the largest copy).
Every other entry comes from the largest copy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hadar.runtime import checkpoint

OPTIMIZER_POLICIES = ("largest", "average")


def copy_path(canonical: str | Path, copy: int) -> Path:
    """Where copy ``copy`` of a forked job writes its checkpoint (next to the canonical one)."""
    p = Path(canonical)
    return p.with_name(f"{p.stem}.copy{copy}{p.suffix}")


def average_tensors(states: Sequence[Mapping[str, Any]], weights: Sequence[float]) -> dict[str, Any]:
    """Key-wise weighted mean of floating-point tensors (weights normalized to sum 1); every other
    entry (integer tensors such as BatchNorm's ``num_batches_tracked``, numbers) comes from the state
    with the largest weight. Nested dicts/lists (optimizer state) are averaged recursively."""
    if not states:
        raise ValueError("nothing to average")
    if len(states) != len(weights) or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"need one non-negative weight per state with a positive sum, got {list(weights)}")
    total = float(sum(weights))
    norm = [float(w) / total for w in weights]
    top = max(range(len(states)), key=lambda i: weights[i])
    return _avg(list(states), norm, top)


def _avg(values: Sequence[Any], w: Sequence[float], top: int) -> Any:
    import torch

    first = values[top]
    if isinstance(first, torch.Tensor):
        if not first.is_floating_point():
            return first.clone()
        acc = torch.zeros_like(first, dtype=torch.float64)
        for v, wi in zip(values, w, strict=True):
            acc += v.to(torch.float64) * wi
        return acc.to(first.dtype)
    if isinstance(first, Mapping):
        return {k: _avg([v[k] for v in values], w, top) for k in first}
    if isinstance(first, list | tuple):
        return type(first)(_avg([v[i] for v in values], w, top) for i in range(len(first)))
    return first


@dataclass(frozen=True, slots=True)
class CopyResult:
    """One copy's contribution this round: its checkpoint and the samples (steps) it processed."""

    copy: int
    path: Path
    steps: float  # the job's steps this round
    iterations: int


@dataclass(frozen=True, slots=True)
class Merged:
    """The canonical checkpoint after a round: progress and which copies it includes."""

    steps: float  # the job's progress in the canonical checkpoint
    iteration: int
    copies: tuple[int, ...]
    state: dict[str, Any]  # the job's merged state (what ``ctx.load_state()`` returns next)


def extrapolate(base: Mapping[str, Any], moved: Mapping[str, Any], outer: float) -> dict[str, Any]:
    """``base + outer x (moved - base)`` key-wise on floating-point tensors; every other entry ``moved``'s."""
    import torch

    out = dict(moved)
    for key, v in moved.items():
        b = base.get(key)
        if isinstance(v, torch.Tensor) and v.is_floating_point() and isinstance(b, torch.Tensor):
            out[key] = (b.to(torch.float64) + outer * (v.to(torch.float64) - b.to(torch.float64))).to(v.dtype)
    return out


def _model_of(path: str | Path) -> Mapping[str, Any]:
    """The ``"model"`` of the checkpoint at ``path`` (empty where there is none)."""
    envelope = checkpoint.load(path)
    model = envelope["state"].get("model") if envelope is not None else None
    return model if isinstance(model, Mapping) else {}


def merge_copies(canonical: str | Path, steps0: float, iteration0: int, copies: Sequence[CopyResult], *,
                 optimizer: str = "largest", outer: float = 1.0) -> Merged | None:
    """Average the copies' checkpoints into ``canonical`` (atomic write); None if no copy contributed.

    ``steps0``, ``iteration0``: the job's progress and step number when the copies started; the merged
    progress is ``steps0`` + the sum of the copies' steps, the step number ``iteration0`` + the largest
    copy's (the copies split each global batch). The states' ``"model"`` entries are averaged, weighted by
    steps; without a ``"model"`` in every copy, the state of the copy that did most steps is kept whole.
    ``outer``: the model moves from the one ``canonical`` held by ``outer`` times the copies' mean move
    (1: their average; k: the sum of their moves; the copies' start is read from ``canonical``).
    """
    base = _model_of(canonical) if outer != 1.0 else None
    if optimizer not in OPTIMIZER_POLICIES:
        raise ValueError(f"optimizer policy must be one of {OPTIMIZER_POLICIES}, got {optimizer!r}")
    done = [c for c in copies if c.steps > 0]
    if not done:
        return None
    files = [checkpoint.load(c.path) for c in done]
    missing = [str(c.path) for c, f in zip(done, files, strict=True) if f is None]
    if missing:
        raise FileNotFoundError(f"copy checkpoint(s) missing: {', '.join(missing)}")
    envelopes: list[dict[str, Any]] = [f for f in files if f is not None]
    states = [e["state"] for e in envelopes]
    weights = [c.steps for c in done]
    top = max(range(len(done)), key=lambda i: weights[i])
    merged = dict(states[top])
    if all(isinstance(s.get("model"), Mapping) for s in states):
        merged["model"] = average_tensors([s["model"] for s in states], weights)
        if base is not None:
            merged["model"] = extrapolate(base, merged["model"], outer)
        if optimizer == "average" and all(isinstance(s.get("optimizer"), Mapping) for s in states):
            merged["optimizer"] = average_tensors([s["optimizer"] for s in states], weights)
    meta = dict(checkpoint.meta_of(envelopes[top]))
    meta.update(copy=0, steps=steps0 + sum(weights), iteration=iteration0 + max(c.iterations for c in done),
                copies=[c.copy for c in done], copy_steps=list(weights))
    checkpoint.save_atomic({"hadar": meta, "state": merged}, canonical)
    return Merged(meta["steps"], meta["iteration"], tuple(c.copy for c in done), merged)
