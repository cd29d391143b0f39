"""Teams and users sharing one cluster: weights, quotas per GPU type, borrowing (a frozen value).

``parse_tenants`` checks a tenants mapping (the YAML file's contents) against the cluster's GPU types
and returns ``Tenants``; anything wrong is one ``InputError`` line naming the entry. The file::

    teams:
      vision: {weight: 2, quota: {v100: 4, p100: 2}, borrow: true}
      nlp:    {weight: 1, quota: {k80: 8}}
    users:
      vis1: {team: vision}
      ops:  {admin: true}

A team's quota names how many GPUs of each type it may hold (a type it leaves out: none, unless it
borrows; a team with no ``quota`` at all is not limited); ``weight`` (> 0, default 1) is its share
against the other teams; ``borrow`` (default false): it may run on GPUs beyond its quota while no
team owning them waits for them. A user belongs
to one team, or is an admin (sees and may do everything; may also name a team).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from hadar.errors import InputError

_TEAM_KEYS = frozenset({"weight", "quota", "borrow"})
_USER_KEYS = frozenset({"team", "admin"})
MAX_QUOTA = 1_000_000  # GPUs of one type a quota may name
MAX_NAME = 64


@dataclass(frozen=True, slots=True)
class Team:
    """One team: its ``weight``, its ``quota`` as (GPU type, count) pairs, whether it may ``borrow``."""

    name: str
    weight: float = 1.0
    quota: tuple[tuple[str, int], ...] | None = None
    borrow: bool = False

    def quota_of(self, gpu_type: str) -> int | None:
        """GPUs of ``gpu_type`` the team may hold without borrowing (0: a type its quota leaves out;
        None: the team has no quota, it is not limited)."""
        if self.quota is None:
            return None
        return next((k for t, k in self.quota if t == gpu_type), 0)


@dataclass(frozen=True, slots=True)
class User:
    name: str
    team: str = ""
    admin: bool = False


@dataclass(frozen=True, slots=True)
class Tenants:
    teams: tuple[Team, ...] = ()
    users: tuple[User, ...] = ()

    def team(self, name: str) -> Team | None:
        return next((t for t in self.teams if t.name == name), None)

    def user(self, name: str) -> User | None:
        return next((u for u in self.users if u.name == name), None)

    @property
    def weights(self) -> dict[str, float]:
        return {t.name: t.weight for t in self.teams}


def parse_tenants(data: Any, gpu_types: Collection[str] | None, where: str = "tenants file") -> Tenants:
    """The ``Tenants`` a tenants mapping describes; ``gpu_types``: the cluster's (None: not checked).
    ``InputError`` (one line naming the entry) for anything else."""
    if not isinstance(data, Mapping):
        raise InputError(f"{where}: want a mapping with 'teams' (and 'users'), got {type(data).__name__}")
    unknown = set(data) - {"teams", "users"}
    if unknown:
        raise InputError(f"{where}: unknown key {sorted(map(str, unknown))[0]!r} (want 'teams' and 'users')")
    teams_in, users_in = data.get("teams") or {}, data.get("users") or {}
    if not isinstance(teams_in, Mapping) or not isinstance(users_in, Mapping):
        raise InputError(f"{where}: 'teams' and 'users' must be mappings of name to settings")
    teams = tuple(_team(_name(n, where), v, gpu_types, where) for n, v in teams_in.items())
    users = tuple(_user(_name(n, where), v, {t.name for t in teams}, where) for n, v in users_in.items())
    return Tenants(teams, users)


def _name(name: Any, where: str) -> str:
    text = str(name)
    if not isinstance(name, str) or not text or len(text) > MAX_NAME or not all(
            c.isalnum() or c in "-_." for c in text):
        raise InputError(f"{where}: name {text[:MAX_NAME]!r} must be 1-{MAX_NAME} letters, digits, '-', '_' or '.'")
    return text


def _team(name: str, value: Any, gpu_types: Collection[str] | None, where: str) -> Team:
    at = f"{where}: team {name!r}"
    value = {} if value is None else value
    if not isinstance(value, Mapping):
        raise InputError(f"{at}: want a mapping (weight, quota, borrow)")
    if set(value) - _TEAM_KEYS:
        raise InputError(f"{at}: unknown key {sorted(map(str, set(value) - _TEAM_KEYS))[0]!r} "
                         "(want weight, quota, borrow)")
    weight = value.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) or not (
            0 < weight <= 1e6):
        raise InputError(f"{at}: weight must be a positive number (at most 1e6), got {weight!r}")
    borrow = value.get("borrow", False)
    if not isinstance(borrow, bool):
        raise InputError(f"{at}: borrow must be true or false, got {borrow!r}")
    if "quota" not in value:
        return Team(name, float(weight), None, borrow)
    quota = value.get("quota") or {}
    if not isinstance(quota, Mapping):
        raise InputError(f"{at}: quota must map GPU types to counts, got {quota!r}")
    pairs = []
    for t, k in quota.items():
        if gpu_types is not None and t not in gpu_types:
            raise InputError(f"{at}: quota names GPU type {t!r}, which the cluster has not "
                             f"(it has {', '.join(sorted(gpu_types))})")
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= MAX_QUOTA:
            raise InputError(f"{at}: quota of {t!r} must be a whole number of GPUs, 0 to {MAX_QUOTA:,}, got {k!r}")
        pairs.append((str(t), int(k)))
    return Team(name, float(weight), tuple(sorted(pairs)), borrow)


def _user(name: str, value: Any, teams: set[str], where: str) -> User:
    at = f"{where}: user {name!r}"
    if not isinstance(value, Mapping) or set(value) - _USER_KEYS:
        raise InputError(f"{at}: want a mapping with 'team' and/or 'admin: true'")
    team, admin = value.get("team", ""), value.get("admin", False)
    if not isinstance(admin, bool):
        raise InputError(f"{at}: admin must be true or false, got {admin!r}")
    if not isinstance(team, str) or (team and team not in teams):
        raise InputError(f"{at}: team {team!r} is not a team of the file")
    if not team and not admin:
        raise InputError(f"{at}: names no team and is not an admin")
    return User(name, team, admin)
