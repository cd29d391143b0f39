"""What the runtime measures for the scheduler's model of a job: its lease's batch, its noise scale, and
what each merge of its HadarE copies gained.

- ``lease_fields``: an adaptive job's lease carries the batch the scheduler chose (``Lease.batch``; a rigid
  job's: its own), its own batch, learning-rate rule and noise scale (``LeaseSpec``; ``ctx.batch_size``,
  ``ctx.lr_scale``).
- ``noise_scales``: the noise scale each job last reported (``ctx.gradient_noise``), for the round report.
- ``MergeMeter``: at each merge, the copies' held-out loss at the round's start (the model they started
  from) and end, and the merged model's, read from the first ``holdout_loss`` the job's next lease reports
  on it (its first lease after the merge, a copy or not, or the evaluation of a job that finished at the
  merge; ``hadar.job.goodput``). No extra lease runs for it: a merge is measured one round late, and a job
  that never reports ``holdout_loss`` is never measured. Each measured merge is a ``MergeGain`` (its gain
  and ``rho``), an event ``merge_gain`` and, in the next round report, HadarE's estimate of a copy's worth.

The gain is a ratio of loss decreases: it takes the loss as falling about linearly over one round's steps
(a merged model that lowered the loss twice as much as one copy is worth two copies' rounds). ``rho`` then
divides by what data-parallel training at the copies' summed batch would be worth, by the statistical
efficiency model with the copies' own measured noise scale: the runtime's copies split each global batch
``B`` of the job (``forks``), so each trains at ``b = B / k`` and the data-parallel reference is a step at
``B``, worth ``k (Bn + b) / (Bn + k b)`` steps of one copy.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hadar.job.goodput import HOLDOUT, HOLDOUT_START
from hadar.job.lease import LeaseOutcome
from hadar.model.job import Job
from hadar.model.plan import Lease, MergeGain

NOISE = "noise_scale"


def lease_fields(job: Job, lease: Lease, measured: float | None, done: float) -> dict[str, Any]:
    """The ``LeaseSpec`` fields of ``lease``'s batch: none for a job without an efficiency profile (it names
    no batch); ``measured``: the job's last measured noise scale; ``done``: its progress in steps."""
    eff = job.efficiency
    if eff is None:
        return {}
    fraction = min(max(done / job.total_steps, 0.0), 1.0) if job.total_steps > 0 else 0.0
    bn = measured if measured is not None else eff.noise_scale(fraction)
    return {"batch": lease.batch if lease.batch > 0 else eff.batch, "own_batch": eff.batch,
            "lr_rule": eff.lr_rule if job.batch_range is not None else "", "noise_scale": bn}


def measured_noise(metrics: Mapping[str, float]) -> float | None:
    """The noise scale a lease's metrics say: ``noise_scale``, or infinite where the meter measured a true
    gradient's squared norm at or below 0 (noise dominates: a larger batch scales perfectly); None where
    the job measured none."""
    if NOISE in metrics and metrics[NOISE] >= 0:
        return float(metrics[NOISE])
    if metrics.get("grad_sqr", 1.0) <= 0 and "grad_var" in metrics:
        return math.inf
    return None


def noise_scales(last: Mapping[int, Mapping[str, float]]) -> tuple[tuple[int, float], ...]:
    """(job id, noise scale) of every job whose last metrics (``last``: job id -> metrics) measured one."""
    return tuple((jid, bn) for jid, m in sorted(last.items()) if (bn := measured_noise(m)) is not None)


@dataclass
class _Pending:
    round: int
    copies: int
    start: float
    after: list[float]
    batch: float
    noise: float | None
    t: float


@dataclass
class MergeMeter:
    """Measures each merge (module docstring); ``on_event`` gets one ``merge_gain`` event per measured merge."""

    on_event: Callable[[dict[str, Any]], None] = field(default=lambda e: None)
    _copies: dict[int, list[tuple[float, float, float | None, float]]] = field(default_factory=dict)
    _pending: dict[int, _Pending] = field(default_factory=dict)
    measured: list[MergeGain] = field(default_factory=list)  # every merge measured in the run
    _new: list[MergeGain] = field(default_factory=list)

    def copy_done(self, job_id: int, head: LeaseOutcome, batch: float) -> None:
        """A forked copy's lease ended: its held-out loss at the start and end, its noise scale, its batch."""
        m = head.metrics
        if HOLDOUT_START in m and HOLDOUT in m:
            self._copies.setdefault(job_id, []).append((m[HOLDOUT_START], m[HOLDOUT], measured_noise(m), batch))

    def merged(self, job_id: int, round_no: int, t: float) -> None:
        """The job's copies of ``round_no`` were just averaged: wait for the merged model's held-out loss."""
        done = self._copies.pop(job_id, [])
        if len(done) < 2:
            return
        noise = [n for _, _, n, _ in done if n is not None]  # (one infinite: their mean is)
        self._pending[job_id] = _Pending(round_no, len(done), statistics.fmean(s for s, _, _, _ in done),
                                         [a for _, a, _, _ in done], statistics.fmean(b for *_, b in done),
                                         statistics.fmean(noise) if noise else None, t)

    def lease_started(self, job_id: int, head: LeaseOutcome) -> None:
        """A lease of the job reported its first ``holdout_loss``: a merge waiting for it is measured now."""
        p = self._pending.get(job_id)
        if p is None or HOLDOUT not in head.first_metrics:
            return
        del self._pending[job_id]
        g = measure(job_id, p, head.first_metrics[HOLDOUT])
        self.measured.append(g)
        self._new.append(g)
        self.on_event({"t": p.t, "event": "merge_gain", "job": job_id, "round": g.round, "copies": g.copies,
                       "start_loss": g.start_loss, "copy_loss": g.copy_loss, "merged_loss": g.merged_loss,
                       "gain": g.gain, "rho": g.rho, "batch": p.batch,
                       "noise_scale": p.noise if p.noise is not None and math.isfinite(p.noise) else None,
                       "noise_dominated": p.noise == math.inf,
                       "merged_metrics": dict(head.first_metrics)})

    def drain(self) -> tuple[MergeGain, ...]:
        """The merges measured since the last call (for the round report)."""
        out, self._new = tuple(self._new), []
        return out


def measure(job_id: int, p: _Pending, merged_loss: float) -> MergeGain:
    """One merge's ``MergeGain`` from its copies' held-out losses and the merged model's."""
    copy_loss = statistics.fmean(p.after)
    one = p.start - copy_loss
    gain = (p.start - merged_loss) / one if one > 0 else None
    rho = None
    if gain is not None and p.noise is not None and p.batch > 0:
        k, bn = p.copies, p.noise
        b = p.batch / k  # the copies split each global batch (``forks``): each trains at B / k
        rho = gain / (k if math.isinf(bn) else k * (bn + b) / (bn + k * b))
    return MergeGain(job_id, p.round, p.copies, p.start, copy_loss, merged_loss, gain, rho)
