"""Reading user files with one clear error line (``InputError``) for a missing or malformed file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hadar.errors import InputError


def read_yaml(path: str | Path, what: str = "file") -> Any:
    """The parsed YAML (or JSON) of ``path``; a missing file or bad syntax raises ``InputError``."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{what} not found: {p}")
    try:
        return yaml.safe_load(p.read_text())
    except UnicodeDecodeError:
        raise InputError(f"{p}: not a text file") from None
    except yaml.YAMLError as e:
        raise InputError(f"{p}: not valid YAML/JSON ({str(e).splitlines()[0]})") from None
