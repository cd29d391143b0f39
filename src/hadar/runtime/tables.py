"""A CSV file of rows under a header: what the runtime's experiments write beside their JSON."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


def write_table(path: Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """``path`` as CSV: ``header``, then one line per row (written as they come)."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
