"""Gavel's scheduling policies (spec/gavel.md section 2); importing registers them.

Module map: ``max_min`` (LAS), ``water_filling``, ``finish_time``, ``makespan``,
``throughput`` (max sum), ``fifo``, ``shares`` (isolated), ``allox``, ``cost`` (per dollar, ``cost_packed`` with pairs),
``hierarchical`` (entity water filling); space sharing in ``packing`` (LP rows), ``packed``,
``packed_water_filling`` and ``gandiva``; solver plumbing in ``problem`` (job classes + HiGHS)
and ``center`` (interior point).
"""

from hadar.policies.gavel import (  # noqa: F401
    allox,
    cost,
    cost_packed,
    fifo,
    finish_time,
    gandiva,
    hierarchical,
    makespan,
    max_min,
    packed,
    packed_water_filling,
    shares,
    throughput,
    water_filling,
)
