"""Name -> policy factory. Names follow Gavel's (``max_min_fairness_perf``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from hadar.errors import InputError
from hadar.policies.base import Policy

_FACTORIES: dict[str, Callable[..., Policy]] = {}
_DESCRIPTIONS: dict[str, str] = {}
_BUILTIN_MODULES = (
    "hadar.policies.gavel",
    "hadar.policies.hadar",
    "hadar.policies.hadare",
    "hadar.policies.yarn",
)


def register(name: str, description: str) -> Callable[[Callable[..., Policy]], Callable[..., Policy]]:
    """Class/function decorator: ``@register("fifo", "one line")``."""

    def deco(factory: Callable[..., Policy]) -> Callable[..., Policy]:
        if name in _FACTORIES:
            raise ValueError(f"policy {name!r} registered twice")
        _FACTORIES[name] = factory
        _DESCRIPTIONS[name] = description
        return factory

    return deco


def _load_builtins() -> None:
    """Import every built-in policy module; any import error propagates (a missing policy is a bug)."""
    for mod in _BUILTIN_MODULES:
        importlib.import_module(mod)


def available() -> tuple[str, ...]:
    _load_builtins()
    return tuple(sorted(_FACTORIES))


def describe() -> dict[str, str]:
    _load_builtins()
    return {n: _DESCRIPTIONS[n] for n in sorted(_FACTORIES)}


def factory(name: str) -> Callable[..., Policy]:
    """The registered factory (usually the class) for ``name``; unknown names raise ``InputError``."""
    _load_builtins()
    try:
        return _FACTORIES[name]
    except KeyError:
        raise InputError(f"unknown policy {name!r}; known: {', '.join(sorted(_FACTORIES))}") from None


def create(name: str, **kwargs: Any) -> Policy:
    """Instantiate a registered policy; unknown names raise ``InputError``."""
    _load_builtins()
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise InputError(f"unknown policy {name!r}; known: {', '.join(sorted(_FACTORIES))}") from None
    return factory(**kwargs)
