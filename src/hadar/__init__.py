"""hadar: heterogeneity-aware scheduling of deep-learning training jobs.

Gavel's policies and round mechanism, Hadar's task-level primal-dual
scheduler and HadarE's job forking, on one trace-driven simulator and one
real runtime (Ray + PyTorch) that share every decision.
"""

__version__ = "0.1.0"
