"""Throughput table: steps/s of (job type, GPU count) on each GPU type.

Units follow Gavel's files: a step is one iteration of one worker at the
per-GPU batch size, summed over the job's workers, so the value for k GPUs
is the whole job's rate on k GPUs of that type.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType

from hadar.errors import InputError

_KEY_RE = re.compile(r"^\('(?P<model>.+)',\s*(?P<sf>\d+)\)$")
BUNDLED = {
    "simulation": "simulation_throughputs.json",
    "physical": "physical_cluster_throughputs.json",
}


@dataclass(frozen=True, slots=True)
class ThroughputTable:
    """``rates[(job_type, k)][gpu_type]`` in steps/s (0.0 = cannot run)."""

    rates: Mapping[tuple[str, int], Mapping[str, float]]
    source: str = ""
    #: ``pairs[(job_type, k, other_type)][gpu_type]`` = ``(rate of job_type, rate of other_type)``
    #: when the two share ``k`` GPUs of ``gpu_type`` (Gavel's co-location entries; equal ``k`` only).
    pairs: Mapping[tuple[str, int, str], Mapping[str, tuple[float, float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        frozen = {key: MappingProxyType(dict(v)) for key, v in self.rates.items()}
        object.__setattr__(self, "rates", MappingProxyType(frozen))
        paired = {key: MappingProxyType(dict(v)) for key, v in self.pairs.items()}
        object.__setattr__(self, "pairs", MappingProxyType(paired))

    @property
    def gpu_types(self) -> tuple[str, ...]:
        types: list[str] = []
        for per_type in self.rates.values():
            for t in per_type:
                if t not in types:
                    types.append(t)
        return tuple(types)

    @property
    def job_types(self) -> tuple[str, ...]:
        return tuple(sorted({jt for jt, _ in self.rates}))

    def has(self, job_type: str, k: int) -> bool:
        return (job_type, k) in self.rates

    def scale_factors(self, job_type: str) -> tuple[int, ...]:
        return tuple(sorted(k for jt, k in self.rates if jt == job_type))

    def get(self, job_type: str, k: int, gpu_type: str) -> float:
        """Steps/s of ``job_type`` on ``k`` GPUs of ``gpu_type``; 0.0 if unknown type."""
        try:
            per_type = self.rates[(job_type, k)]
        except KeyError:
            raise InputError(f"no throughput for job type {job_type!r} on {k} GPU(s) "
                             f"in {self.source or 'table'}") from None
        return float(per_type.get(gpu_type, 0.0))

    def rate_on(self, job_type: str, k: int, gpu_type: str) -> float:
        """Steps/s of ``job_type`` on ``k`` GPUs of ``gpu_type`` even where the table has no ``k`` entry.

        A tabulated ``k`` is returned as is; otherwise the largest tabulated
        ``k' < k`` scaled by ``k / k'`` (no speed-up beyond what was measured),
        or, if every tabulated count is larger, the smallest one scaled down.
        HadarE's copies (up to W GPUs of one node) use this.
        """
        if (job_type, k) in self.rates:
            return self.get(job_type, k, gpu_type)
        known = self.scale_factors(job_type)
        if not known:
            raise InputError(f"no throughput for job type {job_type!r} in {self.source or 'table'}")
        below = [c for c in known if c < k]
        ref = below[-1] if below else known[0]
        return self.get(job_type, ref, gpu_type) * k / ref

    def speed_order(self, gpu_types: Iterable[str]) -> tuple[str, ...]:
        """``gpu_types`` fastest first, by a rule that reads throughputs only, never names.

        A type's score is the sum over the table's rows (job type, GPU count; in sorted order) of its
        rate divided by the row's best rate among ``gpu_types`` (rows no type can run are skipped).
        Ties: the type whose rates, sorted from the highest, are lexicographically higher; then the
        one whose rates, row by row in sorted row order, are; then the position in ``gpu_types`` (a
        cluster's listing order). On Gavel's tables it gives v100, p100, k80.
        """
        types = tuple(dict.fromkeys(gpu_types))
        score = dict.fromkeys(types, 0.0)
        columns: dict[str, list[float]] = {t: [] for t in types}
        for row_key in sorted(self.rates):
            per_type = self.rates[row_key]
            row = [float(per_type.get(t, 0.0)) for t in types]
            best = max(row, default=0.0)
            for t, v in zip(types, row, strict=True):
                columns[t].append(v)
                if best > 0:
                    score[t] += v / best

        def key(pos: int) -> tuple[float, tuple[float, ...], tuple[float, ...], int]:
            t = types[pos]
            return (-score[t], tuple(-v for v in sorted(columns[t], reverse=True)),
                    tuple(-v for v in columns[t]), pos)

        return tuple(types[p] for p in sorted(range(len(types)), key=key))

    def pair_rates(self, job_type: str, other_type: str, k: int, gpu_type: str) -> tuple[float, float]:
        """Steps/s of ``(job_type, other_type)`` sharing ``k`` GPUs of ``gpu_type``; ``(0, 0)`` if not measured."""
        return self.pairs.get((job_type, k, other_type), {}).get(gpu_type, (0.0, 0.0))

    def row(self, job_type: str, k: int, gpu_types: Iterable[str]) -> tuple[float, ...]:
        return tuple(self.get(job_type, k, t) for t in gpu_types)

    def with_rate(self, job_type: str, k: int, gpu_type: str, rate: float) -> ThroughputTable:
        """A copy with one entry replaced (measured throughputs feed back this way)."""
        rates = {key: dict(v) for key, v in self.rates.items()}
        rates.setdefault((job_type, k), {})[gpu_type] = float(rate)
        return ThroughputTable(rates, self.source, self.pairs)

    @classmethod
    def load(cls, path: str | Path | None = None) -> ThroughputTable:
        """Load Gavel's nested JSON; ``None`` or a bundled name loads the shipped table."""
        if path is None or str(path) in BUNDLED:
            name = BUNDLED[str(path or "simulation")]
            text = resources.files("hadar.data").joinpath(name).read_text()
            return cls.from_gavel_json(json.loads(text), source=name)
        p = Path(path)
        if not p.is_file():
            raise InputError(f"throughputs file not found: {p}")
        try:
            data = json.loads(p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InputError(f"{p}: not valid JSON ({e})") from None
        return cls.from_gavel_json(data, source=str(p))

    @classmethod
    def from_gavel_json(cls, data: object, source: str = "") -> ThroughputTable:
        """Parse ``worker_type -> "('model', sf)" -> {"null": steps/s, ...}``.

        ``*_unconsolidated`` worker types are skipped (Gavel's simulator does
        not use them). The other keys of the inner object are co-location
        entries ``"('other', sf)": [rate of this job, rate of other]``; they
        fill :attr:`pairs` (only pairs of equal scale factor, as Gavel).
        """
        if not isinstance(data, dict) or not data:
            raise InputError(f"{source}: throughputs must be a non-empty JSON object keyed by GPU type")
        rates: dict[tuple[str, int], dict[str, float]] = {}
        pairs: dict[tuple[str, int, str], dict[str, tuple[float, float]]] = {}
        for gpu_type, per_job in data.items():
            if gpu_type.endswith("_unconsolidated"):
                continue
            if not isinstance(per_job, dict):
                raise InputError(f"{source}: entry for GPU type {gpu_type!r} is not an object")
            for key, inner in per_job.items():
                m = _KEY_RE.match(key)
                if not m:
                    raise InputError(f"{source}: bad job type key {key!r} (want \"('model', scale_factor)\")")
                value = inner.get("null") if isinstance(inner, dict) else inner
                if not isinstance(value, (int, float)) or value < 0:
                    raise InputError(f"{source}: throughput of {key} on {gpu_type} must be a number >= 0")
                rates.setdefault((m["model"], int(m["sf"])), {})[gpu_type] = float(value)
                if isinstance(inner, dict):
                    _read_pairs(inner, m["model"], int(m["sf"]), gpu_type, pairs, source)
        return cls(rates, source, pairs)


def _read_pairs(inner: Mapping[str, object], model: str, sf: int, gpu_type: str,
                pairs: dict[tuple[str, int, str], dict[str, tuple[float, float]]], source: str) -> None:
    """Co-location entries of one ``(model, sf)`` on ``gpu_type`` into ``pairs`` (equal sf only)."""
    for other_key, value in inner.items():
        if other_key == "null":
            continue
        om = _KEY_RE.match(other_key)
        if not om:
            raise InputError(f"{source}: bad co-located job key {other_key!r} under ({model!r}, {sf}) on {gpu_type}")
        if int(om["sf"]) != sf:
            continue
        if (not isinstance(value, list) or len(value) != 2
                or not all(isinstance(v, (int, float)) and v >= 0 for v in value)):
            raise InputError(f"{source}: co-location of ({model!r}, {sf}) with {other_key} on {gpu_type} "
                             "must be a list of two numbers >= 0")
        pairs.setdefault((model, sf, om["model"]), {})[gpu_type] = (float(value[0]), float(value[1]))
