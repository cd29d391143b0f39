"""Policy profiles: named parameter sets, usable wherever a policy is named.

A profile file (``--profiles FILE``) is YAML or JSON whose top-level keys
are new policy names, each ``{policy: REGISTERED_NAME, <param>: <value>,
...}``::

    pack: {policy: hadar, plan: pack}
    hadar-fair: {policy: hadar, utility: fair, keep_slack: null}

``hadar compare --profiles p.yaml --policies hadar,pack`` then runs the
default Hadar and the packing-only one, each row labelled by its name.
Every parameter is checked when the file is read (unknown name or
parameter, bad value: one ``InputError`` line naming file, profile and key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hadar.errors import InputError
from hadar.files import read_yaml
from hadar.policies.base import Policy
from hadar.policies.registry import available, create, entry


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """A policy as a run names it: its label, the registered policy and the parameters set."""

    label: str
    policy: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def build(self, **defaults: Any) -> Policy:
        """The policy with ``params``; ``defaults`` fill parameters the spec leaves unset (and exist)."""
        known = entry(self.policy).parameters()
        extra = {k: v for k, v in defaults.items() if k in known and k not in self.params}
        return create(self.policy, **{**extra, **self.params})


def load_profiles(path: str | Path) -> dict[str, PolicySpec]:
    """Read and check a profile file; returns label -> spec."""
    p = Path(path)
    data = read_yaml(p, "profiles file")
    if not isinstance(data, dict) or not data:
        raise InputError(f"{p}: expected a mapping of profile names to {{policy: NAME, param: value, ...}}")
    registered = set(available())
    out: dict[str, PolicySpec] = {}
    for label, body in data.items():
        where = f"{p.name}: profile {label!r}"
        if not isinstance(label, str) or not label.strip() or "," in label:
            raise InputError(f"{where}: a profile name must be a non-empty string without commas")
        if label in registered:
            raise InputError(f"{where}: shadows the registered policy of that name; choose another name")
        if not isinstance(body, dict) or "policy" not in body:
            raise InputError(f"{where}: must be a mapping with a 'policy' key naming a registered policy")
        params = {k: v for k, v in body.items() if k != "policy"}
        spec = PolicySpec(label, str(body["policy"]), params)
        try:
            spec.build()
        except InputError as e:
            raise InputError(f"{where}: {e}") from None
        out[label] = spec
    return out


def resolve(name: str, profiles: Mapping[str, PolicySpec] | None = None) -> PolicySpec:
    """The spec for ``name``: a profile, else a registered policy with no parameters set."""
    if profiles and name in profiles:
        return profiles[name]
    if name not in available():
        extra = f"; profiles: {', '.join(sorted(profiles))}" if profiles else ""
        raise InputError(f"unknown policy {name!r}; known: {', '.join(available())}{extra}")
    return PolicySpec(name, name)
