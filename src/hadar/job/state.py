"""A job's saved state on disk and in a worker's memory (torch imported lazily).

On disk a checkpoint is ``{"hadar": META, "state": STATE}``: ``STATE`` is the dict the
job's function gave ``ctx.save_state``; ``META`` says which run and job wrote it and at
what progress. Files are written atomically (temporary file in the same folder, fsync,
``os.replace``): a reader sees the previous complete checkpoint or the new one, never a
torn file. They are read with ``torch.load(..., weights_only=True)``: only tensors,
numbers, strings and containers are unpickled, so a checkpoint file cannot run code, and
``check_saveable`` rejects anything else when it is saved, not when it is read back.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_PLAIN = (str, int, float, bool, bytes, type(None))


def save_atomic(obj: Mapping[str, Any], path: str | Path) -> None:
    """``torch.save`` to ``path`` atomically (temp file + fsync + ``os.replace``)."""
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(dict(obj), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def load(path: str | Path) -> dict[str, Any] | None:
    """The file at ``path`` (tensors, numbers, strings, containers), or None if there is none."""
    import torch

    path = Path(path)
    if not path.is_file():
        return None
    out: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return out


def check_saveable(value: Any, where: str = "state") -> None:
    """Raise ``TypeError`` naming the first entry ``torch.load(weights_only=True)`` could not read back."""
    import torch

    if isinstance(value, (torch.Tensor, torch.dtype, torch.device, torch.Size, *_PLAIN)):
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str | int):
                raise TypeError(f"save_state: {where} has a key of type {type(k).__name__}; use strings or integers")
            check_saveable(v, f"{where}[{k!r}]")
        return
    if isinstance(value, list | tuple | set):
        for i, v in enumerate(value):
            check_saveable(v, f"{where}[{i}]")
        return
    raise TypeError(f"save_state: {where} is a {type(value).__module__}.{type(value).__name__}; a checkpoint holds "
                    "tensors, numbers, strings, lists and dicts only (save model.state_dict(), not the model)")


def clone(value: Any) -> Any:
    """A deep copy whose tensors own their memory (safe to keep while the job trains on)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, Mapping):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(clone(v) for v in value)
    return value


def meta_of(ckpt: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``hadar`` entry of a checkpoint ({} for None or a file in another format)."""
    if not isinstance(ckpt, Mapping) or not isinstance(ckpt.get("hadar"), Mapping):
        return {}
    return dict(ckpt["hadar"])


def digest(state: Mapping[str, Any] | None) -> str:
    """A short fingerprint of ``state["model"]`` (equal weights, equal digest; "" without a model)."""
    import hashlib

    model = state.get("model") if isinstance(state, Mapping) else None
    if not isinstance(model, Mapping):
        return ""
    h = hashlib.blake2b(digest_size=8)
    for name, t in model.items():
        h.update(str(name).encode())
        if hasattr(t, "detach"):
            h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


@dataclass(slots=True)
class Cached:
    """A state a worker keeps in memory after saving it: the next lease of the same job may resume from it."""

    run_id: str
    job_id: int
    steps: float  # the job's progress (steps) when it was saved
    rank: int
    world: int
    state: dict[str, Any]


class StateCache:
    """At most one job's last saved state, per worker process (a new job's lease drops it)."""

    def __init__(self) -> None:
        self.entry: Cached | None = None

    def take(self, run_id: str, job_id: int, steps: float | None, rank: int, world: int) -> dict[str, Any] | None:
        """The cached state if it is exactly what the job saved last (``steps``) and this rank may use it.

        Rank 0's copy is what the checkpoint file holds; another rank's copy is only used by the
        same rank of a gang of the same size."""
        e = self.entry
        self.entry = None
        if (e is None or steps is None or e.run_id != run_id or e.job_id != job_id or abs(e.steps - steps) > 1e-6
                or not (e.rank == 0 or (e.rank == rank and e.world == world))):
            return None
        return e.state

    def put(self, entry: Cached) -> None:
        self.entry = entry

    def drop(self, job_id: int | None = None) -> None:
        """Forget the cached state (of ``job_id`` only, if given)."""
        if job_id is None or (self.entry is not None and self.entry.job_id == job_id):
            self.entry = None
