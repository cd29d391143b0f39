"""What an adaptive job is told at each lease: its batch and its learning-rate scale (``ctx.batch_size``,
``ctx.lr_scale``), and the held-out loss a job reports so that the job tracker can judge each merge.

The scheduler chooses an adaptive job's global batch for every lease (Hadar's adaptive rule,
``policies/hadar/elastic.py``); the lease carries it (``LeaseSpec.batch``) and the job's own batch,
learning-rate rule and the scheduler's noise scale for it. The job trains at ``ctx.batch_size`` and
multiplies the learning rate it is tuned for at its own batch by ``ctx.lr_scale``:

- ``adascale``: ``r(B) / r(own) = (Bn + own) B / ((Bn + B) own)`` (``model/efficiency.gain``), with ``Bn``
  the job's own noise meter's live estimate (``ctx.gradient_noise``) once it has one, else the scheduler's
  (``LeaseSpec.noise_scale``: the last one the job measured, else its profile's); 1 with neither;
- ``sqrt``: ``sqrt(B / own)``; ``linear``: ``B / own``.

A rigid job (no batch range) runs at its own batch: its scale is 1.

**Held-out loss** (``HOLDOUT``): a job that reports ``holdout_loss`` (its loss on a fixed batch it never
trains on) before its ``steps()`` loop, on the model it loaded, and after it, on the model it saves, lets
the job tracker measure what each merge of HadarE's copies gained (``hadar.runtime.merges``): the lease's
first value is kept as ``holdout_loss_start``.
"""

from __future__ import annotations

import math

from hadar.model.efficiency import gain

HOLDOUT = "holdout_loss"
HOLDOUT_START = "holdout_loss_start"


def lr_scale(rule: str, batch: float, own: float, noise_scale: float | None) -> float:
    """The learning-rate factor of a step at global ``batch`` for a job tuned at ``own`` (module docstring)."""
    if not rule or batch <= 0 or own <= 0 or batch == own:
        return 1.0
    s = batch / own
    if rule == "linear":
        return s
    if rule == "sqrt":
        return math.sqrt(s)
    if noise_scale is None or noise_scale < 0 or math.isnan(noise_scale):
        return 1.0
    return gain(noise_scale, own, batch)
