"""Gavel's scheduling policies (spec/gavel.md section 2); importing registers them.

Module map: ``max_min`` (LAS), ``water_filling``, ``finish_time``, ``makespan``,
``throughput`` (max sum), ``fifo``, ``shares`` (isolated); solver
plumbing in ``problem`` (job classes + HiGHS) and ``center`` (interior point).
"""

from hadar.policies.gavel import (  # noqa: F401
    fifo,
    finish_time,
    makespan,
    max_min,
    packed,
    shares,
    throughput,
    water_filling,
)
