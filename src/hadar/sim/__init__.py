"""Trace-driven simulation: workloads and the simulated executor."""
