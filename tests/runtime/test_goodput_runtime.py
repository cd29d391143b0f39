"""On the runtime: an adaptive job trains at the batch Hadar's adaptive rule chose (the lease carries it to
``ctx``), and HadarE's merges are measured by the job tracker (``merge_gain`` events, ``merges.csv``). The unit
tests (tests/unit/test_runtime_goodput.py) prove each piece; these run them end to end through Ray."""

from __future__ import annotations

import csv

import pytest

from hadar.model.cluster import Cluster
from hadar.runtime import ttt
from tests.helpers import gang_cluster

pytestmark = pytest.mark.runtime


def test_an_adaptive_job_runs_at_the_chosen_batch_with_its_lr_scale(ray_session, tmp_path):
    from hadar.runtime.run import run

    one = Cluster(gang_cluster().nodes[:1])
    # a batch profile where 512 runs nearly as many steps/s as 16: the adaptive rule takes 512
    table = ttt.given_table({16: 100.0, 64: 95.0, 512: 90.0})
    res = run([ttt.job(True, 16, 0.02, 0.9, 4000)], one, "hadar", round_s=2.0, checkpoint_dir=tmp_path,
              throughputs=table)
    leases = [e for e in res.events if e.get("event") == "lease"]
    assert leases and {e["metrics"]["batch"] for e in leases} == {512.0}
    assert all(e["metrics"]["lr_scale"] > 1.0 for e in leases)  # AdaScale's r(512) / r(16) > 1
    # a lease is measured on its batch's row, never on the job's own; one shorter than the tracker's minimum
    # (on a fast machine the job reaches its target in a few short leases) says nothing and is not measured
    measured = {e["job_type"] for e in res.events if e.get("event") == "measured"}
    long_enough = [e for e in leases if e["train_s"] >= 0.5 and e["steps"] > 0]
    assert measured <= {"digits-mlp (batch size 512)"} and bool(measured) == bool(long_enough)
    assert res.quality[0].final >= 0.9  # it ended at its target


def test_hadare_merges_are_measured_by_the_job_tracker(ray_session, tmp_path):
    from hadar.runtime.run import run, write_outputs

    res = run([ttt.job(False, 64, 0.02, 0.99, 900)], gang_cluster(), "hadare", round_s=1.5, checkpoint_dir=tmp_path,
              dilation=3.0)
    gains = [e for e in res.events if e.get("event") == "merge_gain"]
    merges = [e for e in res.events if e.get("event") == "merge"]
    assert gains and len(gains) <= len(merges)
    for g in gains:
        assert g["copies"] == 2 and g["merged_loss"] > 0 and g["start_loss"] > 0
        if g["gain"] is not None:
            expect = (g["start_loss"] - g["merged_loss"]) / (g["start_loss"] - g["copy_loss"])
            assert g["gain"] == pytest.approx(expect)
    write_outputs(res, tmp_path / "out")
    with (tmp_path / "out" / "merges.csv").open() as f:
        assert len(list(csv.DictReader(f))) == len(gains)
