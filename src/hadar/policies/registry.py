"""Name -> policy class and fixed parameters. Names follow Gavel's (``max_min_fairness_perf``).

One class may be registered under several names with different fixed
parameters (Gavel's heterogeneity-aware and type-agnostic variants are one
class with ``type_aware``). Registration checks what the engine relies on:
the class declares its traits (``TRAITS``, a ``PolicyTraits``) and every
fixed parameter is a keyword its constructor takes. A class describes its
parameters in ``PARAMS`` (name -> one line: the core ones) and ``ADVANCED``
(the tuning a user rarely touches); docs/policies.md is generated from them
(``python -m hadar.policies.catalog docs/policies.md``), a core and an
advanced table per family of policies. A class may take parameters through
``**kwargs`` too: the fields of its ``KNOBS`` (a dataclass) are then settable
by name like its own keywords (Hadar's ``HadarAdvanced``).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Protocol, TypeVar

from hadar.errors import InputError
from hadar.policies.base import Policy, PolicyTraits

_BUILTIN_MODULES = (
    "hadar.policies.gavel",
    "hadar.policies.hadar",
    "hadar.policies.hadare",
    "hadar.policies.yarn",
)


class Declared(Protocol):
    """What registration asks of a policy class: its declared traits."""

    TRAITS: ClassVar[PolicyTraits]


C = TypeVar("C", bound=type[Declared])


@dataclass(frozen=True, slots=True)
class Entry:
    """A registered policy: ``cls(**fixed, **params)`` builds it."""

    name: str
    description: str
    cls: type[Declared]
    fixed: Mapping[str, Any] = field(default_factory=dict)
    forwards: type | None = None  # the class its other keywords go to (HadarE -> Hadar)

    def meanings(self) -> dict[str, str]:
        """What each settable parameter does: the class's ``PARAMS`` (name -> one line), then those of the
        class it forwards to; parameters nobody describes are left out."""
        out = dict(_described(self.forwards))
        out.update(_described(self.cls))
        known = self.parameters()
        return {k: out[k] for k in known if k in out}

    def advanced(self) -> frozenset[str]:
        """The settable parameters the classes describe as advanced (their ``ADVANCED``)."""
        names = set(_tier(self.forwards, "ADVANCED")) | set(_tier(self.cls, "ADVANCED"))
        return frozenset(names & set(self.parameters()))

    @property
    def compat_params(self) -> Mapping[str, Any]:
        """Parameters a ``--gavel-compat`` run sets (the class's optional ``GAVEL_COMPAT``), unless the
        profile sets them: where a policy's own default departs from Gavel's behaviour."""
        compat: Mapping[str, Any] = getattr(self.cls, "GAVEL_COMPAT", {})
        return {k: v for k, v in compat.items() if k not in self.fixed}

    @property
    def traits(self) -> PolicyTraits:
        """The traits the class declares (an instance may refine ``type_aware`` from its parameters:
        ``Policy.traits``)."""
        return self.cls.TRAITS

    def parameters(self) -> dict[str, Any]:
        """The parameters a user may set (name -> default), in the constructor's order; a class that
        forwards its other keywords to another (``FORWARDS``, e.g. HadarE to Hadar) lists those too."""
        out = _keywords(self.cls)
        if self.forwards is not None:
            out.update({k: v for k, v in _keywords(self.forwards).items() if k not in out})
        return {k: v for k, v in out.items() if k not in self.fixed}


def _tier(cls: type | None, attr: str) -> Mapping[str, str]:
    docs: Mapping[str, str] = getattr(cls, attr, {}) if cls is not None else {}
    return docs


def _described(cls: type | None) -> Mapping[str, str]:
    """A class's optional ``PARAMS`` and ``ADVANCED`` (parameter -> what it does), for documentation only."""
    return {**_tier(cls, "PARAMS"), **_tier(cls, "ADVANCED")}


def _knobs(cls: type | None) -> tuple[dataclasses.Field[Any], ...]:
    """The fields of a class's optional ``KNOBS`` dataclass: parameters it takes through ``**kwargs``."""
    knobs = getattr(cls, "KNOBS", None) if cls is not None else None
    return dataclasses.fields(knobs) if knobs is not None else ()


def _keywords(cls: type) -> dict[str, Any]:
    """Parameter name -> default: the constructor's keywords, then its ``KNOBS``' fields."""
    sig = inspect.signature(cls)
    out = {p.name: p.default for p in sig.parameters.values()
           if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD}
    out.update({f.name: f.default for f in _knobs(cls) if f.name not in out})
    return out


_ENTRIES: dict[str, Entry] = {}


def register(name: str, description: str, *, forwards: type | None = None, **fixed: Any) -> Callable[[C], C]:
    """Class decorator: ``@register("fifo", "one line")``; stack it to register variants,
    e.g. ``@register("max_min_fairness", "...", type_aware=False)``. ``forwards``: the class that
    receives the keywords this one does not declare (its parameters are then settable too)."""

    def deco(cls: C) -> C:
        if name in _ENTRIES:
            raise ValueError(f"policy {name!r} registered twice")
        traits = getattr(cls, "TRAITS", None)
        if not isinstance(traits, PolicyTraits):
            raise TypeError(f"policy {name!r}: {cls.__name__} must declare TRAITS = PolicyTraits(...)")
        if not callable(getattr(cls, "allocate", None)):
            raise TypeError(f"policy {name!r}: {cls.__name__} has no allocate(state)")
        params = _keywords(cls)
        unknown = [k for k in fixed if k not in params]
        if unknown:
            raise TypeError(f"policy {name!r}: {cls.__name__} takes no parameter {unknown[0]!r}")
        settable = set(params) | (set(_keywords(forwards)) if forwards is not None else set())
        stale = [k for k in _described(cls) if k not in settable]
        if stale:
            raise TypeError(f"policy {name!r}: {cls.__name__}.PARAMS describes {stale[0]!r}, which it does not take")
        _ENTRIES[name] = Entry(name, description, cls, MappingProxyType(dict(fixed)), forwards)
        return cls

    return deco


def _load_builtins() -> None:
    """Import every built-in policy module; any import error propagates (a missing policy is a bug)."""
    for mod in _BUILTIN_MODULES:
        importlib.import_module(mod)


def available() -> tuple[str, ...]:
    _load_builtins()
    return tuple(sorted(_ENTRIES))


def describe() -> dict[str, str]:
    _load_builtins()
    return {n: _ENTRIES[n].description for n in sorted(_ENTRIES)}


def entry(name: str) -> Entry:
    """The registration of ``name``; unknown names raise ``InputError``."""
    _load_builtins()
    try:
        return _ENTRIES[name]
    except KeyError:
        raise InputError(f"unknown policy {name!r}; known: {', '.join(sorted(_ENTRIES))}") from None


def create(name: str, **params: Any) -> Policy:
    """Instantiate a registered policy with ``params``; an unknown name, an unknown parameter or a
    bad value raises ``InputError``."""
    e = entry(name)
    known = e.parameters()
    unknown = [k for k in params if k not in known]
    if unknown:
        raise InputError(f"policy {name!r} has no parameter {unknown[0]!r}; "
                         f"its parameters: {', '.join(known) or 'none'}")
    hints = {**_annotations(e.forwards), **_annotations(e.cls)}
    for key, value in params.items():
        if value is None and "None" in hints.get(key, ""):
            continue
        _check_type(name, key, value, known[key])
    try:
        policy = e.cls(**e.fixed, **params)
    except (TypeError, ValueError) as exc:
        raise InputError(f"policy {name!r}: {exc}") from None
    if not isinstance(policy, Policy):
        raise TypeError(f"policy {name!r}: {e.cls.__name__} instances lack name, traits or allocate(state)")
    return policy


def _annotations(cls: type | None) -> dict[str, str]:
    """Parameter name -> its annotation as written (``from __future__ import annotations``: strings)."""
    if cls is None:
        return {}
    out = {f.name: str(f.type) for f in _knobs(cls)}
    out.update({p.name: str(p.annotation) for p in inspect.signature(cls).parameters.values()})
    return out


def _check_type(policy: str, key: str, value: Any, default: Any) -> None:
    """A value of the kind the parameter's default is (numbers for numbers, ...); None default: anything."""
    if default is None or default is inspect.Parameter.empty:
        return
    if isinstance(default, bool):
        ok = isinstance(value, bool)
        kind = "true or false"
    elif isinstance(default, (int, float)):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        kind = "a number"
    elif isinstance(default, str):
        ok = isinstance(value, str)
        kind = "a string"
    else:
        return
    if not ok:
        raise InputError(f"policy {policy!r}: parameter {key} must be {kind}, got {value!r}")
