"""Statistical efficiency: what a step at a large batch is worth in steps at the job's reference batch.

Pollux (OSDI'21) and Sia (SOSP'23) share one model. With ``mu2`` the true gradient's squared norm and
``sigma2`` the gradient noise at the reference batch ``M0``, a step at batch ``M = s * M0`` makes the
progress of ``r(s) = (sigma2 + mu2) / (sigma2 / s + mu2)`` steps at ``M0``. Written with the gradient noise
scale ``Bn = M0 * sigma2 / mu2``: ``r(s) = s * (Bn + M0) / (Bn + s * M0)``. ``r(1) = 1``; ``r`` grows with
``s`` up to ``(Bn + M0) / M0`` and is ``s`` (perfect scaling) when ``Bn`` is infinite (no true gradient
left to see). ``Bn`` grows as training goes on (10-60x over a run in Sia's profiles), so a big batch is
worth more late than early.

An ``Efficiency`` is one job's profile: its reference batch, the batch it runs at, and ``Bn`` over its
progress (piecewise constant: ``points`` are ``(progress fraction, Bn)`` from which ``Bn`` holds). A job's
``total_steps`` is then in reference steps: the world credits ``r`` per step at the batch used, and the job
ends when the credited steps reach its target (docs/sia.md, "Statistical progress").

An adaptive job (``Job.batch_range``) names the learning-rate rule it scales with (``lr_rule``): AdaScale
(``adascale``: the learning rate times ``r``, the model above), ``sqrt`` (times ``sqrt(s)``) or ``linear``
(times ``s``). A step is worth the rule's learning-rate factor ``g``, at most ``r``: ``min(g, r)`` reference
steps (a larger rate than ``r`` buys no more progress than the gradient's noise allows; what an overshoot
would cost is not modelled). ``adascale`` is ``r`` itself, every job's worth so far.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import pairwise

from hadar.errors import InputError

LR_RULES = ("adascale", "sqrt", "linear")


@dataclass(frozen=True, slots=True)
class Efficiency:
    """``ref_batch`` (M0), ``batch`` (the global batch the job runs at), ``points``: ``(fraction, Bn)``
    sorted by fraction, the first at 0: from ``fraction`` of the job's reference steps on, its noise scale
    is ``Bn`` (samples; ``inf`` allowed)."""

    ref_batch: float
    batch: float
    points: tuple[tuple[float, float], ...]
    lr_rule: str = "adascale"

    def __post_init__(self) -> None:
        if self.lr_rule not in LR_RULES:
            raise InputError(f"lr_rule: unknown rule {self.lr_rule!r} (known: {', '.join(LR_RULES)})")
        for name in ("ref_batch", "batch"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise InputError(f"{name} must be a positive number, got {v!r}")
        if not self.points or self.points[0][0] != 0.0:
            raise InputError("noise_scale: the first point must be at progress 0")
        fracs = [f for f, _ in self.points]
        if any(b <= a for a, b in pairwise(fracs)) or not all(0 <= f < 1 for f in fracs):
            raise InputError(f"noise_scale: progress fractions must rise within [0, 1), got {fracs}")
        if not all(bn >= 0 for _, bn in self.points):  # (NaN fails too)
            raise InputError("noise_scale: every noise scale must be a number >= 0")

    @property
    def scale(self) -> float:
        """``s``: the job's batch over its reference batch."""
        return self.batch / self.ref_batch

    def noise_scale(self, fraction: float) -> float:
        """``Bn`` at ``fraction`` of the job's reference steps (the last point at or below it)."""
        return step_at(self.points, fraction)

    def gain(self, fraction: float, batch: float | None = None) -> float:
        """``r``: reference steps one step at ``batch`` (default: the job's) makes at ``fraction`` (under
        ``lr_rule``: ``min(g, r)``, module docstring)."""
        b = self.batch if batch is None else batch
        r = gain(self.noise_scale(fraction), self.ref_batch, b)
        if self.lr_rule == "adascale":
            return r
        s = b / self.ref_batch
        return min(math.sqrt(s) if self.lr_rule == "sqrt" else s, r)

    def measured(self, fraction: float, noise_scale: float) -> Efficiency:
        """This profile as a job's measurement corrects it: ``noise_scale`` measured at ``fraction`` of its
        reference steps. Every point is scaled by measured / profiled ``Bn`` there (the profile's shape over
        training kept, its level the measured one); a constant profile at the measurement where the
        profile's ``Bn`` there is 0 or infinite, or the measurement is infinite."""
        here = self.noise_scale(fraction)
        if not (math.isfinite(noise_scale) and noise_scale >= 0):
            return replace(self, points=((0.0, math.inf),))
        if not (math.isfinite(here) and here > 0):
            return replace(self, points=((0.0, noise_scale),))
        k = noise_scale / here
        return replace(self, points=tuple((f, bn * k) for f, bn in self.points))

    def _bounds(self, total: float) -> list[float]:
        """Reference steps at which ``Bn`` changes (each point after the first), then infinity."""
        return [f * total for f, _ in self.points[1:]] + [math.inf]

    def credit(self, done: float, steps: float, total: float, batch: float | None = None) -> float:
        """Reference steps that ``steps`` steps at ``batch`` make from ``done`` reference steps on (of
        ``total``): exact across changes of ``Bn``."""
        got, left, at = 0.0, steps, done
        for bound in self._bounds(total):
            if bound <= at:
                continue
            r = self.gain(at / total, batch)
            need = (bound - at) / r  # steps to reach the bound
            if left <= need:
                return got + left * r
            got, left, at = got + (bound - at), left - need, bound
        return got

    def steps_for(self, done: float, target: float, total: float, batch: float | None = None) -> float:
        """Steps at ``batch`` that make ``target`` reference steps from ``done`` on (``credit``'s inverse)."""
        steps, left, at = 0.0, target, done
        for bound in self._bounds(total):
            if bound <= at:
                continue
            r = self.gain(at / total, batch)
            if left <= bound - at:
                return steps + left / r
            steps, left, at = steps + (bound - at) / r, left - (bound - at), bound
        return steps


def step_at(points: tuple[tuple[float, float], ...], fraction: float) -> float:
    """The value of the last ``(fraction, value)`` point at or below ``fraction`` (the first point's below it):
    a step function over a job's progress, its points sorted by fraction."""
    out = points[0][1]
    for f, v in points:
        if f > fraction:
            break
        out = v
    return out


def gain(noise_scale: float, ref_batch: float, batch: float) -> float:
    """``r = s (Bn + M0) / (Bn + s M0)``, ``s = batch / ref_batch`` (``s`` where ``Bn`` is infinite)."""
    s = batch / ref_batch
    if math.isinf(noise_scale):
        return s
    return s * (noise_scale + ref_batch) / (noise_scale + s * ref_batch)


def parse_points(text: str, where: str) -> tuple[tuple[float, float], ...]:
    """A ``noise_scale`` cell: one number (constant), or ``FRACTION:BN`` pairs separated by spaces."""
    out: list[tuple[float, float]] = []
    for part in text.split():
        f, sep, b = part.rpartition(":")
        try:
            out.append((float(f) if sep else 0.0, float(b)))
        except ValueError:
            raise InputError(f"{where}: noise_scale wants BN or FRACTION:BN pairs, got {part!r}") from None
    if not out:
        raise InputError(f"{where}: empty noise_scale")
    return tuple(out)


def format_points(points: tuple[tuple[float, float], ...]) -> str:
    """``parse_points``' inverse (``repr`` of each number: a round trip is exact)."""
    return " ".join(f"{f!r}:{b!r}" for f, b in points)


#: The default profile per family of Gavel's job types: (reference batch, ``(fraction, Bn)`` points). The
#: reference batch is the family's smallest batch in Gavel's table; ``Bn`` (samples, a property of the model
#: and data, not of the batch) is the median over each phase of training of ``M0 * grad_var / grad_sqr`` in
#: the per-epoch statistics Sia's artifact measured at its smallest batch for the nearest model it profiles
#: (docs/sia.md, "Default profiles"): ResNet-18 (CIFAR-10) <- Sia's cifar10 (ResNet-18 on CIFAR-10),
#: ResNet-50 (ImageNet) <- imagenet (ResNet-50), Transformer <- bert (a Transformer, fine-tuning),
#: LM (a recurrent language model) <- deepspeech2 (recurrent), Recommendation <- ncf. A3C and CycleGAN
#: have none (no data-parallel batch to grow): they stay as today.
FAMILY_DEFAULTS: dict[str, tuple[float, tuple[tuple[float, float], ...]]] = {
    "ResNet-18": (16.0, ((0.0, 290.0), (0.1, 1900.0), (0.25, 3500.0), (0.5, 7400.0), (0.75, 25000.0))),
    "ResNet-50": (16.0, ((0.0, 4600.0), (0.1, 5800.0), (0.25, 11000.0), (0.75, 14000.0))),
    "Transformer": (16.0, ((0.0, 420.0), (0.5, 1100.0))),
    "LM": (5.0, ((0.0, 44.0), (0.1, 960.0), (0.25, 14000.0), (0.5, 70000.0), (0.75, 820000.0))),
    "Recommendation": (512.0, ((0.0, 19000.0), (0.1, 4.0e6), (0.25, 7.2e6), (0.5, 2.1e7), (0.75, 4.9e7))),
}


def family_of(job_type: str) -> tuple[str, float | None]:
    """``("ResNet-50", 64.0)`` for ``"ResNet-50 (batch size 64)"``; the batch is None where the name has none."""
    name, _, rest = job_type.partition(" (batch size ")
    try:
        return name.strip(), float(rest.rstrip(")")) if rest else None
    except ValueError:
        return name.strip(), None


def default_efficiency(job_type: str, where: str, batch: float | None = None) -> Efficiency:
    """The family default of a Gavel job type at its own batch (``batch`` overrides the name's)."""
    family, named = family_of(job_type)
    if family not in FAMILY_DEFAULTS:
        raise InputError(f"{where}: no default noise scale for {job_type!r} (families with one: "
                         f"{', '.join(FAMILY_DEFAULTS)}); give noise_scale and ref_batch")
    ref, points = FAMILY_DEFAULTS[family]
    b = batch if batch is not None else named
    if b is None:
        raise InputError(f"{where}: {job_type!r} names no batch size; give batch")
    return Efficiency(ref, b, points)
