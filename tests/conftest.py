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


#: modules whose long tests share no module fixture: each test (each parametrized case) is a work unit of
#: its own, so that one module's tests of minutes each run side by side, not one after another
_BY_TEST = ("tests/runtime/test_runtime.py", "tests/runtime/test_colocation.py", "tests/runtime/test_cli_run.py",
            "tests/runtime/test_tracker_runtime.py", "tests/runtime/test_user_jobs.py", "tests/slurm/test_slurm_run.py",
            "tests/slurm/test_slurm_serve.py")


def _scope(nodeid: str) -> str | None:
    """The work unit of a test where it is not its module's (None): the executor contract's Slurm case
    (parameter id ``slurm``) is one unit apart from the module's other cases; a test (a parametrized
    case) of a ``_BY_TEST`` module is one by itself. A worker starts its own local Slurm cluster once
    (``slurm_cluster``) for every Slurm unit it gets; the accounting tests start another that keeps accounting."""
    if nodeid.startswith("tests/contract/") and "[slurm" in nodeid:
        return "slurm-contract"
    return nodeid if nodeid.startswith(_BY_TEST) else None


#: the longest work units and their seconds: one module at a time under nice (its tests one after another,
#: ``--durations``), at load 10-20 on this machine's 2 cores (others' work beside them)
_RUNTIME, _COLOCATION = "tests/runtime/test_runtime.py::", "tests/runtime/test_colocation.py::"
_USER = "tests/runtime/test_user_jobs.py::test_a_job_file_mixing_a_user_job_with_bundled_ones_runs_to_completion"
_MEASURED_S = {
    "slurm-contract": 303, "tests/slurm/test_slurm_accounting.py": 239,
    "tests/runtime/test_tracker_runtime.py::test_a_gang_wider_than_a_node_trains_as_one_synchronous_lease_under_"
    "a_fork_efficiency": 207, "tests/integration/test_determinism.py": 154,
    _RUNTIME + "test_six_real_jobs_finish_under_max_min_fairness_perf": 151,
    _RUNTIME + "test_a_waiting_job_starts_when_a_lease_finishes_early_not_at_the_round_end": 109,
    _RUNTIME + "test_a_worker_killed_mid_round_loses_at_most_that_round": 108,
    "tests/integration/test_hadar_vs_gavel.py": 105,
    _COLOCATION + "test_the_worker_of_a_gpu_dying_while_it_holds_a_pair_loses_no_finished_work": 104,
    "tests/runtime/test_job_api.py": 96,
    "tests/runtime/test_tracker_runtime.py::test_hadare_forks_merges_and_survives_a_copy_dying_mid_round": 95,
    "tests/slurm/test_slurm_serve.py::test_serve_on_slurm_survives_kill_9_and_runs_every_job_once": 90,
    _COLOCATION + "test_hadar_run_packed_runs_pairs_at_their_co_located_rates_and_agrees_with_the_simulator": 74,
    "tests/runtime/test_noise.py": 72,
    "tests/runtime/test_cli_run.py::test_hadar_run_json_and_out": 71,
    _RUNTIME + "test_a_data_parallel_lease_across_gpu_types_a_rank_dying_in_it_and_its_rendezvous": 66,
    "tests/slurm/test_slurm_run.py::test_jobs_move_across_gpu_types_and_resume_from_their_checkpoints": 57,
    "tests/runtime/test_restart_measured.py": 55,
    "tests/service/test_dashboard.py": 130, "tests/service/test_api.py": 105,
    "tests/service/test_dashboard_teams.py": 94,
    "tests/runtime/test_user_jobs.py::test_failures_retry_from_the_last_checkpoint_and_end_at_max_failures": 76,
    _USER + "[max_min_fairness_perf]": 72, _USER + "[hadare]": 65, _USER + "[hadar]": 53,
    "tests/runtime/test_user_jobs.py::test_throughputs_start_as_estimates_become_measurements_and_the_policy_never_"
    "sees_a_hole": 69,
}

#: folders whose modules wait on processes, rounds and servers for tens of seconds per test
_SLOW_FOLDERS = ("tests/runtime/", "tests/service/", "tests/integration/", "tests/slurm/",
                 "tests/contract/test_executor_contract")


def _tier(scope: str) -> tuple[int, float]:
    """Which work units a free worker takes first: the measured long ones (``_MEASURED_S``), longest first,
    then the slow folders' units, then the rest, so that no long unit starts last and runs alone at the end."""
    if scope in _MEASURED_S:
        return (0, -_MEASURED_S[scope])
    return (1, 0.0) if scope.startswith(_SLOW_FOLDERS) else (2, 0.0)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: `make test` runs the suite on several workers
def pytest_xdist_make_scheduler(config, log):
    """A module's tests run in one worker, in their order (a module's fixtures, such as a server or a Slurm
    cluster started once for its tests, see them as a serial run does), except the units of ``_scope``. A
    free worker takes the unit of the lowest ``_tier`` first (then the collection's order). (xdist's own
    ``--dist loadgroup`` cannot do this under pytest 9, whose test ids xdist 3.8 cannot suffix.)"""
    from xdist.scheduler import LoadScopeScheduling

    class LongestFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid) or super()._split_scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            first = min(self.workqueue, key=_tier)  # the first of the lowest tier: min keeps the earliest
            self.workqueue.move_to_end(first, last=False)
            super()._assign_work_unit(node)

    return LongestFirst(config, log)
