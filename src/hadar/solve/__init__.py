"""Solver plumbing shared by the policies and the metrics: HiGHS LP helpers and the min-time LPs."""
