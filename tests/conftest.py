"""Shared fixtures: the bundled tables and small clusters."""

from __future__ import annotations

import os

import pytest

from hadar.config import parse_cluster
from hadar.model.throughput import ThroughputTable

# Worker actors on a loaded machine (CI beside other work) may take minutes to start; the tests test
# the mechanism, not the machine's speed (src/hadar/runtime/pool.py, HADAR_WORKER_START_S).
os.environ.setdefault("HADAR_WORKER_START_S", "600")


@pytest.fixture(scope="session")
def table() -> ThroughputTable:
    return ThroughputTable.load()


@pytest.fixture(scope="session")
def physical_table() -> ThroughputTable:
    return ThroughputTable.load("physical")


@pytest.fixture
def cluster_444():
    return parse_cluster("4:4:4")


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray instance for the whole test session (``ray.init`` takes seconds).

    It emulates the logical nodes of both the runtime tests' demo cluster (2 V100, 1 P100, 1 K80) and the
    executor contract's cluster (``tests.helpers.two_type_cluster``: 2 V100, 2 K80) and two 1-GPU V100 nodes
    (``tests.helpers.gang_cluster``, where a 2-GPU gang spans nodes);
    ``hadar.runtime.session.start_local`` reuses it for every test whose cluster uses those node names.
    Ray is imported here, not at the top, so that a checkout without the runtime extra still collects.
    """
    import ray

    from hadar.model.cluster import Cluster
    from hadar.runtime import session
    from hadar.runtime.demo import demo_cluster
    from tests.helpers import gang_cluster, two_type_cluster

    sess = session.start_local(Cluster(demo_cluster().nodes + two_type_cluster().nodes + gang_cluster().nodes))
    yield sess
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A local Slurm cluster for the whole session (``tests.slurm.localcluster.LAYOUT``: 4 nodes, 3 GPU types),
    stopped by PID at its end; ``SLURM_CONF`` points at it meanwhile. Fails (never skips) without Slurm."""
    import os

    from tests.slurm.localcluster import LAYOUT, PARTITIONS, missing_commands, start

    if missing := missing_commands():
        pytest.fail(f"Slurm is not installed (missing {', '.join(missing)}): run .ci/install-slurm.sh", pytrace=False)
    cluster = start(tmp_path_factory.mktemp("slurm"), LAYOUT, PARTITIONS)
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        cluster.stop()
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


def _slurm_scope(nodeid: str) -> bool:
    """Whether a test runs on the session's Slurm cluster: the tests under ``tests/slurm/`` and the executor
    contract's Slurm case (parameter id ``slurm``)."""
    return nodeid.startswith("tests/slurm/") or "[slurm" in nodeid


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: `make test` runs the suite on several workers
def pytest_xdist_make_scheduler(config, log):
    """Every test on the session's Slurm cluster runs in one worker, so that one local cluster is started,
    as in a serial run; every other module's tests run in one worker each, in their order (a module's
    fixtures, such as a server started once for its tests, see them as a serial run does). (xdist's own
    ``--dist loadgroup`` cannot do this under pytest 9, whose test ids xdist 3.8 cannot suffix.)"""
    from xdist.scheduler import LoadScopeScheduling

    class SlurmTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "slurm" if _slurm_scope(nodeid) else super()._split_scope(nodeid)

    return SlurmTogether(config, log)
