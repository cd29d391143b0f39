"""One local Ray instance for the whole test session (``ray.init`` takes seconds).

It emulates the demo cluster (3 logical nodes: 2 V100, 1 P100, 1 K80);
``hadar.runtime.session.start_local`` reuses it for every test whose
cluster uses those node names.
"""

from __future__ import annotations

import pytest
import ray

from hadar.runtime import session
from hadar.runtime.demo import demo_cluster


@pytest.fixture(scope="session")
def ray_session():
    sess = session.start_local(demo_cluster())
    yield sess
    if ray.is_initialized():
        ray.shutdown()
