"""Statistical efficiency of forked training: what k copies' samples are worth in unforked samples.

HadarE forks a job into k copies that train on disjoint data at once and are averaged every
round. The simulator's ideal model credits k copies with k times one copy's progress; real
forked training is worth less (each copy takes its own steps from the same start, then the
average). ``ForkEfficiency`` says how much less, per job family:

    progress of a job's k copies in a round = eff(k) x (sum of the copies' steps),
    eff(1) = 1,  eff(k) = e ** log2(k)   (e = ``per_doubling[family]``, 0 < e <= 1)

so each doubling of the copies keeps the share e of the samples' worth (e = 1: today's ideal
model). A job type maps to a family by its model name (the part before `` (batch size``):
``DEFAULT_FAMILIES`` maps Gavel's types and the runtime's bundled workloads; a file may add
or replace entries (``job_types``); a type mapped to no calibrated family gets ``default``.

The calibration (``hadar experiment fork-efficiency``, ``hadar.runtime.calibrate``) measures e
on the real runtime with ``samples_to_reach`` and ``fit_per_doubling`` below, and writes the
file ``ForkEfficiency.load`` reads::

    {"model": "per_doubling",
     "families": {"image": {"per_doubling": 0.95}, "lstm-lm": {"per_doubling": 0.9}, ...},
     "job_types": {"ResNet-50": "image"},      # optional: model name -> family
     "default": 1.0,                           # optional: families not listed
     "calibration": {...}}                     # optional: the measurement (kept, not read)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from hadar.errors import InputError

#: model name (a job type up to `` (batch size``) -> calibrated workload family (docs/hadar.md)
DEFAULT_FAMILIES: Mapping[str, str] = MappingProxyType({
    "ResNet-18": "image", "ResNet-50": "image", "CycleGAN": "image", "A3C": "image", "ResNet": "image",
    "LM": "lstm-lm", "LSTM-LM": "lstm-lm",
    "Transformer": "transformer",
    "Recommendation": "recommendation", "Recoder": "recommendation",
})
BUNDLED = "calibrated"  # the name of the shipped calibration file
_KEYS = frozenset({"model", "families", "job_types", "default", "calibration", "note"})


def model_name(job_type: str) -> str:
    """``"ResNet-18 (batch size 32)"`` -> ``"ResNet-18"``."""
    return job_type.split(" (", 1)[0].strip()


@dataclass(frozen=True, slots=True)
class ForkEfficiency:
    """Per-family factor per doubling of a job's copies (see the module docstring); empty = ideal."""

    per_doubling: Mapping[str, float] = field(default_factory=dict)
    job_types: Mapping[str, str] = field(default_factory=lambda: DEFAULT_FAMILIES)
    default: float = 1.0
    source: str = ""

    def __post_init__(self) -> None:
        for name, e in [*self.per_doubling.items(), ("default", self.default)]:
            if not (isinstance(e, int | float) and not isinstance(e, bool) and 0.0 < e <= 1.0):
                raise InputError(f"fork efficiency of {name!r} must be a number in (0, 1], got {e!r}")
        object.__setattr__(self, "per_doubling", MappingProxyType(dict(self.per_doubling)))
        object.__setattr__(self, "job_types", MappingProxyType(dict(self.job_types)))

    @property
    def ideal(self) -> bool:
        """Every factor is 1: forked progress is credited in full (the simulator's default)."""
        return self.default == 1.0 and all(e == 1.0 for e in self.per_doubling.values())

    def family_of(self, job_type: str) -> str | None:
        return self.job_types.get(model_name(job_type))

    def per_doubling_of(self, job_type: str) -> float:
        family = self.family_of(job_type)
        return self.per_doubling.get(family, self.default) if family is not None else self.default

    def factor(self, job_type: str, copies: int) -> float:
        """eff(k) for ``copies`` = k copies of a job of ``job_type`` in one round (1.0 for k <= 1)."""
        if copies <= 1:
            return 1.0
        e = self.per_doubling_of(job_type)
        return 1.0 if e == 1.0 else e ** math.log2(copies)

    @classmethod
    def load(cls, path: str | Path) -> ForkEfficiency:
        """Read a calibration file (JSON), or ``calibrated``: the bundled one (``hadar/data/fork_efficiency.json``,
        measured as docs/hadar.md says); anything malformed raises ``InputError`` naming the problem."""
        if str(path) == BUNDLED:
            from importlib import resources

            text = resources.files("hadar.data").joinpath("fork_efficiency.json").read_text()
            return cls.from_dict(json.loads(text), where=BUNDLED)
        p = Path(path)
        if not p.is_file():
            raise InputError(f"fork-efficiency file not found: {p}")
        try:
            data = json.loads(p.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InputError(f"{p}: not valid JSON ({e})") from None
        return cls.from_dict(data, where=str(p))

    @classmethod
    def from_dict(cls, data: Any, where: str = "fork efficiency") -> ForkEfficiency:
        if not isinstance(data, dict):
            raise InputError(f"{where}: expected a JSON object with 'families'")
        unknown = set(data) - _KEYS
        if unknown:
            raise InputError(f"{where}: unknown key(s): {', '.join(sorted(unknown))}")
        if data.get("model", "per_doubling") != "per_doubling":
            raise InputError(f"{where}: model must be 'per_doubling', got {data['model']!r}")
        fams = data.get("families")
        if not isinstance(fams, dict) or not fams:
            raise InputError(f"{where}: 'families' must be a non-empty object of family -> {{per_doubling: e}}")
        per: dict[str, float] = {}
        for name, rec in fams.items():
            e = rec.get("per_doubling") if isinstance(rec, dict) else None
            if not isinstance(e, int | float) or isinstance(e, bool) or not 0.0 < e <= 1.0:
                raise InputError(f"{where}: family {name!r}: per_doubling must be a number in (0, 1], got {e!r}")
            per[name] = float(e)
        types = dict(DEFAULT_FAMILIES)
        extra = data.get("job_types", {})
        if not isinstance(extra, dict) or not all(isinstance(v, str) for v in extra.values()):
            raise InputError(f"{where}: 'job_types' must map model names to family names")
        types.update(extra)
        missing = sorted({f for m, f in extra.items() if f not in per})
        if missing:
            raise InputError(f"{where}: job_types name families not in 'families': {', '.join(missing)}")
        default = data.get("default", 1.0)
        if not isinstance(default, int | float) or isinstance(default, bool) or not 0.0 < default <= 1.0:
            raise InputError(f"{where}: default must be a number in (0, 1], got {default!r}")
        return cls(per, types, float(default), source=where)


IDEAL = ForkEfficiency()


def samples_to_reach(samples: Sequence[float], quality: Sequence[float], target: float, *,
                     higher_is_better: bool) -> float | None:
    """Samples an unforked learning curve needs to first reach quality ``target``.

    The curve is ``quality[i]`` after ``samples[i]`` samples (increasing samples), read through its
    running best (a run that has reached a quality keeps it: a checkpoint); between two points the
    running best is interpolated linearly. ``samples[0]`` if the target is no better than the first
    point; None if the curve never reaches it."""
    if len(samples) != len(quality) or not samples:
        raise ValueError("need one quality per sample count, at least one")
    sign = 1.0 if higher_is_better else -1.0
    goal = sign * target
    best = sign * quality[0]
    if best >= goal:
        return float(samples[0])
    for i in range(1, len(samples)):
        q = max(best, sign * quality[i])
        if q >= goal:
            return samples[i - 1] + (samples[i] - samples[i - 1]) * (goal - best) / (q - best)
        best = q
    return None


def efficiency(samples: Sequence[float], quality: Sequence[float], forked_quality: float, forked_samples: float, *,
               higher_is_better: bool) -> float:
    """The share of ``forked_samples`` that unforked training needs to reach ``forked_quality``, in [0, 1]
    (1 where the unforked curve never reaches it: the forked run is at least as good)."""
    n = samples_to_reach(samples, quality, forked_quality, higher_is_better=higher_is_better)
    return 1.0 if n is None else min(1.0, max(0.0, n / forked_samples))


def fit_per_doubling(measured: Mapping[int, float], floor: float = 1e-3) -> float:
    """Least-squares fit of ``eff(k) = e ** log2(k)`` in log space (through eff(1) = 1) to measured
    {k: eff}; each eff is clipped to [``floor``, 1]. Returns e in (0, 1]."""
    pts = [(math.log2(k), math.log(min(1.0, max(floor, v)))) for k, v in measured.items() if k > 1]
    if not pts:
        raise ValueError("need an efficiency measured at some k > 1")
    return math.exp(sum(x * y for x, y in pts) / sum(x * x for x, _ in pts))
