"""Hadar (IPDPS 2024): task-level primal-dual scheduling. Importing registers ``hadar``."""

from hadar.policies.hadar.policy import HadarPolicy

__all__ = ["HadarPolicy"]
