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


def _slurm_scope(nodeid: str) -> str | None:
    """Which local Slurm cluster a test runs on, if any: the tests under ``tests/slurm/`` share one, the
    executor contract's Slurm case (parameter id ``slurm``) another (each worker starts its own)."""
    if nodeid.startswith("tests/slurm/"):
        return "slurm"
    return "slurm-contract" if "[slurm" in nodeid else None


#: folders whose modules wait on processes, rounds and servers for tens of seconds per test
_SLOW_FOLDERS = ("tests/runtime/", "tests/service/", "tests/integration/", "tests/contract/test_executor_contract")


def _tier(scope: str) -> int:
    """Which work units a free worker takes first: the Slurm groups (the longest chains), then the slow
    folders' modules, then the rest, so that no long unit starts last and runs alone at the end."""
    if scope.startswith("slurm"):
        return 0
    return 1 if scope.startswith(_SLOW_FOLDERS) else 2


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: `make test` runs the suite on several workers
def pytest_xdist_make_scheduler(config, log):
    """The tests of one Slurm group run in one worker, on one local cluster, as in a serial run; every other
    module's tests run in one worker each, in their order (a module's fixtures, such as a server started
    once for its tests, see them as a serial run does). A free worker takes the unit of the lowest
    ``_tier`` first (then the collection's order). (xdist's own ``--dist loadgroup`` cannot do this under
    pytest 9, whose test ids xdist 3.8 cannot suffix.)"""
    from xdist.scheduler import LoadScopeScheduling

    class SlurmTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _slurm_scope(nodeid) or super()._split_scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            first = min(self.workqueue, key=_tier)  # the first of the lowest tier: min keeps the earliest
            self.workqueue.move_to_end(first, last=False)
            super()._assign_work_unit(node)

    return SlurmTogether(config, log)
