"""The tenants file (teams, quotas, users) as the service and the simulator read it, and who a request is.

``read_tenants`` parses the YAML (hostile-input checks first: nesting, alias expansion, size), then
``mechanism.tenants.parse_tenants`` checks it against the cluster's GPU types: one ``InputError`` line
for anything wrong, so a bad file never replaces the one in force. ``Principal`` is who an API request
comes from: the state directory's token is the operator (an admin); with a tenants file, a user's own
token (``hadar token create``) names the user, whose team bounds what they see and cancel.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import yaml

from hadar.errors import InputError
from hadar.mechanism.tenants import Tenants, parse_tenants
from hadar.service.specs import MAX_FILE_BYTES, check_structure

ADMIN = "admin"  # the user the state directory's token acts as


@dataclass(frozen=True, slots=True)
class Principal:
    """Who sends a request: ``user``, their ``team`` ("" for none), whether they are an ``admin``."""

    user: str
    team: str = ""
    admin: bool = False

    def may_see(self, team: str) -> bool:
        """Whether this principal may see and cancel a job of ``team``."""
        return self.admin or (bool(self.team) and team == self.team)


OPERATOR = Principal(ADMIN, "", True)


def read_tenants(text: str, where: str, gpu_types: Collection[str] | None) -> Tenants:
    """The tenants a YAML text describes, checked against ``gpu_types`` (None: not checked)."""
    if len(text) > MAX_FILE_BYTES:
        raise InputError(f"{where}: larger than {MAX_FILE_BYTES} bytes")
    check_structure(text, where)
    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise InputError(f"{where}: not valid YAML{at}: {getattr(e, 'problem', None) or e}") from None
    except RecursionError:
        raise InputError(f"{where}: nested too deeply") from None
    return parse_tenants(data, gpu_types, where)


def load_tenants(path: Path, gpu_types: Collection[str] | None) -> Tenants:
    """``read_tenants`` of a file."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise InputError(f"tenants file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the tenants file {path}: {e}") from None
    return read_tenants(text, str(path), gpu_types)
