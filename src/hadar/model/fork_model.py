"""What forked copies are worth from the noise-scale model: k copies averaged every round as data parallelism.

For a quadratic loss, IID shards and a matched learning rate, k copies that each take n steps at batch B
and are averaged after the round follow data-parallel training at batch kB exactly: the round makes n steps
at kB. With the job's gradient noise scale ``Bn`` (``model/efficiency.py``) a step at kB is worth
``r(kB) / r(B)`` steps at B, so the k copies' n·k summed steps are worth

    eff(k) = (Bn + B) / (Bn + k·B)                                  (scale-out: each copy at the job's batch B)

of themselves. Split forking keeps the job's batch: the copies share B, each copy's local batch in proportion
to its GPUs' speed (samples/s, the table's rate at B times B), so every copy takes a step in the same time and
the round is data parallelism at B itself, credited in full: eff(k) = 1 of the table's steps at B (the model
assumes a GPU's samples/s at the smaller local batch is its samples/s at B). A loss that is not quadratic
drifts: the copies' average is worth a share ``rho`` of that, weaker early in training than late (post-local
SGD, SWAP, DiLoCo agree), set per phase as ``(progress fraction, rho)`` points from which each holds. Every
round a job runs as two or more copies, each copy spends ``merge_s`` seconds of it averaging (the weights'
exchange: no steps). So k >= 2 copies at progress ``f`` of a job are credited

    rho(f) x eff(k) x (sum of the copies' steps),   after merge_s of each copy's round,

one copy (k = 1) in full. ``Bn`` at progress f: the job's own efficiency profile (``Job.efficiency``) in the
world, its family default (``FAMILY_DEFAULTS``) for a job without one and for every estimate a policy makes
(``for_estimate``: a policy never reads a job's profile), and 0 for a job of no family with a default (A3C,
CycleGAN: no data-parallel batch to grow; eff(k) = 1/k, copies worth one). B: the profile's batch, else the
job type's named batch size.

Defaults (``RHO``, ``MERGE_S``; docs/hadar.md, "Forking that knows what a copy is worth"): rho 0.8 before a
quarter of training, 1 after; 5 s to merge per round.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from hadar.errors import InputError
from hadar.model.efficiency import FAMILY_DEFAULTS, Efficiency, family_of, step_at
from hadar.model.fork_efficiency import ForkEfficiency

MODES = ("scale-out", "split")
NOISE_SCALE = "noise-scale"  # the --fork-efficiency names of the two modes
NOISE_SCALE_SPLIT = "noise-scale-split"
RHO: tuple[tuple[float, float], ...] = ((0.0, 0.8), (0.25, 1.0))
MERGE_S = 5.0


@dataclass(frozen=True, slots=True)
class ForkModel:
    """``mode``: ``scale-out`` or ``split``; ``rho``: ``(fraction, rho)`` points, the first at 0, each rho in
    (0, 1.5] (averaging may beat data parallelism late); ``merge_s``: seconds of each copy's round
    spent averaging; ``profiles``: whether a job's own profile gives its noise scale (the world) or only its
    family's default does (a policy's estimate)."""

    mode: str = "scale-out"
    rho: tuple[tuple[float, float], ...] = RHO
    merge_s: float = MERGE_S
    profiles: bool = True
    source: str = NOISE_SCALE

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InputError(f"fork model: mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if not self.rho or self.rho[0][0] != 0.0:
            raise InputError("fork model: the first rho point must be at progress 0")
        fracs = [f for f, _ in self.rho]
        if any(b <= a for a, b in pairwise(fracs)) or not all(0 <= f < 1 for f in fracs):
            raise InputError(f"fork model: rho's progress fractions must rise within [0, 1), got {fracs}")
        if not all(0.0 < v <= 1.5 for _, v in self.rho):
            raise InputError(f"fork model: every rho must be in (0, 1.5], got {[v for _, v in self.rho]}")
        if not (math.isfinite(self.merge_s) and self.merge_s >= 0):
            raise InputError(f"fork model: merge_s must be a number >= 0, got {self.merge_s!r}")

    @property
    def ideal(self) -> bool:
        """Never: the model always prices copies (``ForkEfficiency.ideal``'s counterpart)."""
        return False

    def for_estimate(self) -> ForkModel:
        """The same model as a policy may hold it: noise scales from family defaults only."""
        return ForkModel(self.mode, self.rho, self.merge_s, profiles=False, source=self.source)

    def rho_at(self, fraction: float) -> float:
        """``rho`` at ``fraction`` of the job's training (the last point at or below it)."""
        return step_at(self.rho, fraction)

    def noise_scale(self, job_type: str, fraction: float, profile: Efficiency | None = None) -> tuple[float, float]:
        """(Bn, B) of a job at ``fraction``: its profile's (when ``profiles``), else its family default's, else
        (0, 1) (no noise scale known: copies add nothing)."""
        if profile is not None and self.profiles:
            return profile.noise_scale(fraction), profile.batch
        family, batch = family_of(job_type)
        if family in FAMILY_DEFAULTS and batch is not None:
            ref, points = FAMILY_DEFAULTS[family]
            return Efficiency(ref, batch, points).noise_scale(fraction), batch
        return 0.0, 1.0

    def factor(self, job_type: str, copies: int, fraction: float = 0.0, profile: Efficiency | None = None) -> float:
        """rho(f) x eff(k): the share of ``copies`` copies' summed steps credited (1.0 for k <= 1)."""
        if copies <= 1:
            return 1.0
        rho = self.rho_at(fraction)
        if self.mode == "split":
            return rho
        bn, b = self.noise_scale(job_type, fraction, profile)
        if math.isinf(bn):
            return rho
        return rho * (bn + b) / (bn + copies * b)

    def rate_factor(self, job_type: str, copies: int, fraction: float, round_s: float) -> float:
        """A policy's estimate of the share of ``copies`` copies' summed table rate a round credits: ``factor``
        less the merge time's share of the round."""
        if copies <= 1:
            return 1.0
        keep = max(0.0, 1.0 - self.merge_s / round_s) if round_s > 0 else 1.0
        return self.factor(job_type, copies, fraction) * keep

    def describe(self) -> dict[str, object]:
        return {"model": NOISE_SCALE, "mode": self.mode, "rho": [list(p) for p in self.rho], "merge_s": self.merge_s}


#: what a world or a planner may hold about forked copies' worth
ForkSetting = ForkEfficiency | ForkModel


def named(name: str) -> ForkModel | None:
    """The model a ``--fork-efficiency`` name gives (``noise-scale``, ``noise-scale-split``), else None."""
    if name == NOISE_SCALE:
        return ForkModel()
    if name == NOISE_SCALE_SPLIT:
        return ForkModel(mode="split", source=NOISE_SCALE_SPLIT)
    return None


def from_dict(data: Mapping[str, Any], where: str) -> ForkModel:
    """A ``{"model": "noise_scale", "mode": ..., "rho": [[f, rho], ...], "merge_s": S}`` object (each key but
    ``model`` optional, defaults as above)."""
    unknown = set(data) - {"model", "mode", "rho", "merge_s", "note"}
    if unknown:
        raise InputError(f"{where}: unknown key(s): {', '.join(sorted(unknown))}")
    rho = data.get("rho", [list(p) for p in RHO])
    try:
        points = tuple((float(f), float(v)) for f, v in rho)
        merge_s = float(data.get("merge_s", MERGE_S))
    except (TypeError, ValueError):
        raise InputError(f"{where}: rho must be [[fraction, rho], ...] and merge_s a number") from None
    mode = str(data.get("mode", "scale-out"))
    try:
        return ForkModel(mode, points, merge_s, source=where)
    except InputError as e:
        raise InputError(f"{where}: {e}") from None


def load(path: str | Path) -> ForkModel | ForkEfficiency:
    """What ``--fork-efficiency`` names: ``noise-scale`` / ``noise-scale-split`` (this model at its defaults), a
    JSON file whose ``model`` is ``noise_scale`` (``from_dict``), else ``ForkEfficiency.load``'s (``calibrated``,
    a calibration file); anything malformed raises ``InputError``."""
    model = named(str(path))
    if model is not None:
        return model
    p = Path(path)
    if p.is_file():
        try:
            data = json.loads(p.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError):
            data = None  # ForkEfficiency.load says what is wrong with it
        if isinstance(data, dict) and data.get("model") == "noise_scale":
            return from_dict(data, str(p))
    return ForkEfficiency.load(path)
