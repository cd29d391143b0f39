"""Fixtures of the contract tests: the Ray executor's worker pool, started once for this folder's tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="package")
def ray_contract_pool(ray_session: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The worker pool on the contract's cluster, warmed up, with the rates it measured (``ray_harness``); its
    actors are shut down once the contract tests are done (Ray itself lives on for the session)."""
    from tests.contract import ray_harness

    warm = ray_harness.start(tmp_path_factory.mktemp("ray-contract-warm-up"))
    yield warm
    warm.pool.shutdown()


@pytest.fixture(scope="package")
def slurm_contract_table(slurm_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The contract job's rates on the Slurm contract partition, measured once (``slurm_harness.warm_table``)."""
    from tests.contract import slurm_harness

    return slurm_harness.warm_table(slurm_cluster.conf, tmp_path_factory.mktemp("slurm-contract-warm-up"))
