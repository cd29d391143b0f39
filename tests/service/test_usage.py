"""Accounting from the recorded rounds (``service/usage.py``), on a store written directly (no server):
GPU-seconds per team, user, job and GPU type, the ``since`` cut, normalized seconds, the CSV."""

from __future__ import annotations

import time

import pytest

from hadar.model.cluster import Cluster, Node
from hadar.service.record import cluster_json
from hadar.service.specs import parse_job_file, to_new_jobs
from hadar.service.store import Store
from hadar.service.usage import usage, usage_csv

JOBS = "jobs:\n  - {job_type: lstm, total_steps: 100}\n"


def test_usage_sums_the_rounds_per_team_user_job_and_type(tmp_path):
    store = Store(tmp_path)
    cluster = Cluster((Node("a", "v100", 2), Node("b", "k80", 1)))  # GPUs 0, 1: v100; 2: k80
    with store.transaction() as con:
        store.set_meta(con, "cluster", cluster_json(cluster))
    new = to_new_jobs(parse_job_file(JOBS, "j.yaml"), 0.0)
    (a,) = store.submit(new, "r1", owner=("vis1", "vision")).ids
    (b,) = store.submit(new, "r2", owner=("nlp1", "nlp")).ids
    (c,) = store.submit(new, "r3", owner=("vis2", "vision")).ids
    with store.transaction() as con:
        store.add_round(con, 0.0, 10.0, [[a, 0, [0, 1], 0], [b, 0, [2], 0]], 3, 3)
        store.add_round(con, 10.0, 14.0, [[a, 0, [0], 0], [c, 0, [1], 1], [b, 0, [2], 0]], 3, 3)
    cut = time.time() + 1e-3
    time.sleep(0.01)
    with store.transaction() as con:
        store.add_round(con, 14.0, 15.0, [[c, 0, [2], 0]], 1, 3)
    got = usage(store)
    assert got["rounds"] == 3 and got["gpu_s"] == pytest.approx(20 + 10 + 4 + 4 + 4 + 1)
    assert got["teams"]["vision"]["by_type"] == {"v100": pytest.approx(28.0), "k80": pytest.approx(1.0)}
    assert got["teams"]["nlp"]["by_type"] == {"k80": pytest.approx(14.0)}
    assert got["users"]["vis2"] == {"team": "vision", "gpu_s": pytest.approx(5.0),
                                    "by_type": {"v100": pytest.approx(4.0), "k80": pytest.approx(1.0)}}
    assert [(j["id"], j["gpu_s"]) for j in got["jobs"]] == [(a, 24.0), (b, 14.0), (c, 5.0)]
    assert got["by_type"] == {"v100": pytest.approx(28.0), "k80": pytest.approx(15.0)}
    assert usage(store, team="nlp")["teams"].keys() == {"nlp"}
    late = usage(store, since_at=cut)
    assert late["rounds"] == 1 and late["gpu_s"] == pytest.approx(1.0)
    # lstm at 6 steps/s on a v100, 2 on a k80: its proportional rate on 2 v100 + 1 k80 is 14/3
    normed = usage(store, rates={(new[0].job_type, 1): {"v100": 6.0, "k80": 2.0}})
    prop = (2 * 6.0 + 2.0) / 3
    assert normed["teams"]["nlp"]["normalized_s"] == pytest.approx(14.0 * 2.0 / prop)
    assert normed["teams"]["vision"]["normalized_s"] == pytest.approx((10 + 4 + 4) * 6.0 / prop + 1 * 2.0 / prop)
    lines = usage_csv(got).splitlines()
    assert lines[0] == "level,name,team,gpu_type,gpu_s" and "team,nlp,nlp,k80,14.000" in lines
    assert f"job,{c},vision,k80,1.000" in lines


def test_sacct_records_in_the_store_are_the_usage_once_each_and_the_rounds_are_not(tmp_path):
    store = Store(tmp_path)
    with store.transaction() as con:
        store.set_meta(con, "cluster", cluster_json(Cluster((Node("a", "v100", 2), Node("b", "k80", 1)))))
    new = to_new_jobs(parse_job_file(JOBS, "j.yaml"), 0.0)
    (a,) = store.submit(new, "r1", owner=("vis1", "vision")).ids
    (b,) = store.submit(new, "r2", owner=("nlp1", "nlp")).ids
    with store.transaction() as con:
        store.add_round(con, 0.0, 10.0, [[a, 0, [0, 1], 0], [b, 0, [2], 0]], 3, 3)
    assert usage(store)["source"] == "rounds"
    # (Slurm job, GPU type, job, nodes, state, elapsed s, GPUs, end): a's lease on 2 v100, then b's and a's
    rows = [(41, "v100", a, "a", "COMPLETED", 12.0, 2, 500.0), (42, "k80", b, "b", "COMPLETED", 11.0, 1, 500.0),
            (43, "k80", a, "b", "COMPLETED", 5.0, 1, 600.0)]
    assert store.add_slurm_usage(rows, 700.0) == 3
    assert store.add_slurm_usage(rows[1:], 800.0) == 0  # read again (a restart): kept once
    assert store.meta("sacct_since") == "800.0"
    got = usage(store)
    assert got["source"] == "sacct" and got["slurm_records"] == 3 and "rounds" not in got
    assert [(j["id"], j["by_type"]) for j in got["jobs"]] == [(a, {"v100": 24.0, "k80": 5.0}), (b, {"k80": 11.0})]
    assert got["teams"]["vision"]["gpu_s"] == 29.0 and got["by_type"] == {"v100": 24.0, "k80": 16.0}
    assert usage(store, since_at=550.0)["gpu_s"] == 5.0  # cut by each lease's end
    normed = usage(store, rates={(new[0].job_type, 1): {"v100": 6.0, "k80": 2.0}})
    assert normed["teams"]["nlp"]["normalized_s"] == pytest.approx(11.0 * 2.0 / ((2 * 6.0 + 2.0) / 3))
