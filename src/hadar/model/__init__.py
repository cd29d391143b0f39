"""Frozen value objects shared by every component."""

from hadar.model.cluster import Cluster, Node
from hadar.model.job import Job
from hadar.model.state import Allocation, JobView, SchedulerState
from hadar.model.throughput import ThroughputTable

__all__ = ["Allocation", "Cluster", "Job", "JobView", "Node", "SchedulerState", "ThroughputTable"]
