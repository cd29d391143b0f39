"""The Slurm tests: they run against a real local Slurm cluster (``tests.slurm.localcluster``).

The cluster itself is the session fixture ``slurm_cluster`` (in ``tests/conftest.py``, so that the
executor contract's Slurm case shares it): four nodes of three GPU types, started once, stopped by PID
at the session's end. Without Slurm's daemons installed (``.ci/install-slurm.sh``) it fails, never skips.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm.localcluster import LocalSlurm


@pytest.fixture
def slurm_idle(slurm_cluster: LocalSlurm) -> Iterator[LocalSlurm]:
    """The session's cluster with no job of a previous test left on it (and none left by this test)."""
    slurm_cluster.wait_idle()
    yield slurm_cluster
    slurm_cluster.run("scancel", "--full", "--partition", "gpu", check=False)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return tmp_path / "work"
