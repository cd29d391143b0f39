"""Atomic checkpoints: write to a temporary file in the same folder, fsync, then rename.

A reader sees either the previous complete checkpoint or the new complete
one, never a torn file, even if the writer dies mid-write. Loading uses
``torch.load(..., weights_only=True)``: only tensors and plain containers
are unpickled, so a checkpoint file cannot run code.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any


def checkpoint_path(folder: str | Path, job_id: int) -> Path:
    return Path(folder) / f"job-{job_id}.pt"


def save_atomic(obj: dict[str, Any], path: str | Path) -> None:
    """``torch.save`` to ``path`` atomically (temp file + fsync + ``os.replace``)."""
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def load(path: str | Path) -> dict[str, Any] | None:
    """The checkpoint at ``path`` (tensors, numbers, strings, dicts), or None if there is none."""
    import torch

    path = Path(path)
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)
