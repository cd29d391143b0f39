"""Shared fixtures: the bundled tables and small clusters."""

from __future__ import annotations

import pytest

from hadar.config import parse_cluster
from hadar.model.throughput import ThroughputTable


@pytest.fixture(scope="session")
def table() -> ThroughputTable:
    return ThroughputTable.load()


@pytest.fixture(scope="session")
def physical_table() -> ThroughputTable:
    return ThroughputTable.load("physical")


@pytest.fixture
def cluster_444():
    return parse_cluster("4:4:4")
