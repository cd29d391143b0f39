"""Scheduling policies: pure functions of a ``SchedulerState``.

Importing this package registers every built-in policy.
"""

from hadar.policies.base import Policy
from hadar.policies.registry import available, create, describe, register

__all__ = ["Policy", "available", "create", "describe", "register"]
