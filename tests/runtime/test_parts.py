"""Runtime parts that need torch but no Ray: checkpoints, workloads, emulation, tracker, cluster detection."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from hadar.errors import InputError
from hadar.model.cluster import Cluster, Node
from hadar.model.throughput import ThroughputTable
from hadar.runtime import checkpoint, emulation, workloads
from hadar.runtime.session import detect_cluster, pins_for_file
from hadar.runtime.tracker import ThroughputTracker

CLUSTER = Cluster((Node("a", "v100", 2), Node("b", "p100", 1), Node("c", "k80", 1)))


# ---- checkpoints -----------------------------------------------------------------
def test_checkpoint_roundtrip_is_atomic_and_leaves_no_temp_files(tmp_path):
    path = checkpoint.checkpoint_path(tmp_path, 3)
    checkpoint.save_atomic({"w": torch.arange(4.0), "steps": 12.0, "name": "x"}, path)
    got = checkpoint.load(path)
    assert got["steps"] == 12.0 and torch.equal(got["w"], torch.arange(4.0))
    assert os.listdir(tmp_path) == ["job-3.pt"]
    assert checkpoint.load(tmp_path / "missing.pt") is None


def test_a_crash_mid_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "job-1.pt"
    checkpoint.save_atomic({"steps": 1.0}, path)

    def torn(obj, f):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", torn)
    with pytest.raises(OSError):
        checkpoint.save_atomic({"steps": 2.0}, path)
    monkeypatch.undo()
    assert checkpoint.load(path)["steps"] == 1.0
    assert os.listdir(tmp_path) == ["job-1.pt"]


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_checkpoints_load_weights_only(tmp_path):
    path = tmp_path / "job-9.pt"
    torch.save({"x": _Evil()}, path)
    with pytest.raises(Exception, match="(?i)weights"):
        checkpoint.load(path)


# ---- workloads -------------------------------------------------------------------
@pytest.mark.parametrize("name", workloads.names())
def test_each_workload_learns_something_in_a_few_steps(name):
    torch.set_num_threads(1)
    wl = workloads.get(name)
    state = wl.new_state(seed=1)
    before = wl.evaluate(state.model, state.test)
    for _ in range(150):
        wl.train_step(state, 0, 1, seed=1)
    after = wl.evaluate(state.model, state.test)
    assert wl.better(after, before), (name, before, after)
    assert state.iteration == 150


@pytest.mark.parametrize("name", workloads.names())
def test_workloads_are_deterministic_in_the_seed(name):
    wl = workloads.get(name)
    a, b = wl.new_state(seed=4), wl.new_state(seed=4)
    for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_data_parallel_ranks_read_disjoint_slices_of_a_global_batch():
    wl = workloads.get("lstm")
    state = wl.new_state(seed=2)
    rows = [wl.batch(state, r, 2, seed=2) for r in range(2)]
    assert rows[0].shape == rows[1].shape == (wl.batch_size, rows[0].shape[1])
    flat = {tuple(x.tolist()) for r in rows for x in r}
    assert len(flat) == 2 * wl.batch_size


def test_aliases_and_unknown_job_types():
    assert workloads.resolve("ResNet") == "ResNet (digits, batch size 32)"
    with pytest.raises(InputError, match="unknown runtime job type"):
        workloads.resolve("ResNet-50 (batch size 64)")


# ---- emulation -----------------------------------------------------------------
def test_speed_factors_follow_gavels_ratios(table):
    jt = "ResNet (digits, batch size 32)"
    row = table.rates[("ResNet-18 (batch size 32)", 1)]
    f = {t: emulation.speed_factor(table, jt, 1, t, CLUSTER.gpu_types) for t in CLUSTER.gpu_types}
    assert max(f.values()) == pytest.approx(1.0)
    assert f["k80"] / f["p100"] == pytest.approx(row["k80"] / row["p100"])
    # the recommendation model is fastest on P100 in Gavel's table, so there too
    rec = {t: emulation.speed_factor(table, "Recoder (batch size 64)", 1, t, CLUSTER.gpu_types)
           for t in CLUSTER.gpu_types}
    assert rec["p100"] == 1.0 and rec["v100"] < 1.0


def test_local_resources_name_every_logical_node_and_type():
    res = emulation.local_resources(CLUSTER)
    assert res == {"hadar_node:a": 2, "hadar_gpu:v100": 2, "hadar_node:b": 1, "hadar_gpu:p100": 1,
                   "hadar_node:c": 1, "hadar_gpu:k80": 1}


def test_prior_table_lists_the_scale_factors_gavel_has(table):
    prior = emulation.prior_table({"Recoder (batch size 64)": 100.0, "LSTM-LM (batch size 20)": 50.0}, CLUSTER, table)
    assert prior.scale_factors("Recoder (batch size 64)") == (1,)
    assert prior.scale_factors("LSTM-LM (batch size 20)") == (1, 2, 4, 8)
    assert prior.get("Recoder (batch size 64)", 1, "p100") == pytest.approx(100.0)
    assert prior.get("LSTM-LM (batch size 20)", 2, "v100") == pytest.approx(2 * 50.0 * 0.9)


# ---- tracker ---------------------------------------------------------------------
def test_tracker_moving_average_and_correction_of_unmeasured_types():
    prior = ThroughputTable({("m", 1): {"v100": 100.0, "k80": 20.0}})
    tr = ThroughputTracker(prior, alpha=0.5)
    assert not tr.observe("m", 1, "v100", steps=5, seconds=0.1)  # too short to count
    assert tr.observe("m", 1, "v100", steps=50, seconds=1.0)
    assert tr.observe("m", 1, "v100", steps=70, seconds=1.0)
    t = tr.table()
    assert t.get("m", 1, "v100") == pytest.approx(60.0)  # 0.5 * 70 + 0.5 * 50
    assert t.get("m", 1, "k80") == pytest.approx(20.0 * 0.6)  # scaled like the measured type


# ---- cluster detection for --address ------------------------------------------------
def _node(res, ip="10.0.0.1", nid="n1"):
    return {"Alive": True, "NodeManagerAddress": ip, "NodeID": nid, "Resources": res}


def test_detect_cluster_from_ray_nodes():
    nodes = [
        _node({"CPU": 8, "GPU": 4, "accelerator_type:V100": 1}, "10.0.0.1", "id1"),
        _node({"CPU": 8, "GPU": 2, "hadar_gpu:k80": 2}, "10.0.0.2", "id2"),
        _node({"CPU": 4}, "10.0.0.3", "id3"),  # no GPUs: not part of the cluster
        _node({"CPU": 2, "hadar_node:e1": 2, "hadar_gpu:p100": 2}, "10.0.0.4", "id4"),
    ]
    cluster, pins = detect_cluster(nodes)
    assert cluster.capacity() == {"v100": 4, "p100": 2, "k80": 2}
    assert pins["v100-10.0.0.1"].node_id == "id1" and pins["v100-10.0.0.1"].num_gpus == 1
    assert pins["e1"].resource == "hadar_node:e1" and pins["e1"].num_gpus == 0


@pytest.mark.parametrize("nodes, match", [
    ([_node({"CPU": 8, "GPU": 4})], "cannot tell its GPU type"),
    ([_node({"CPU": 8})], "no GPU nodes"),
])
def test_detect_cluster_errors(nodes, match):
    with pytest.raises(InputError, match=match):
        detect_cluster(nodes)


def test_a_cluster_file_needs_its_nodes_on_the_ray_cluster():
    with pytest.raises(InputError, match="lacks nodes of the cluster file: b, c"):
        pins_for_file(CLUSTER, [_node({"hadar_node:a": 2})])


# ---- the worker, in-process (no Ray): leases, extension, restore, foreign checkpoints ----------
def _spec(tmp_path, **kw):
    from hadar.runtime.worker import LeaseSpec

    base = LeaseSpec(job_id=1, job_type="LSTM-LM (batch size 20)", seed=3, rank=0, world=1, max_iterations=5,
                     budget_s=30.0, speed=1.0, checkpoint=str(tmp_path / "job-1.pt"), expect_steps=0.0, run_id="r1")
    return dataclasses.replace(base, **kw)


def test_worker_continues_in_memory_restores_elsewhere_and_ignores_other_runs(tmp_path):
    from hadar.runtime.worker import Worker

    a, b = Worker(0, "n", "v100"), Worker(1, "n", "k80")
    first = a.run_lease(_spec(tmp_path))
    assert first.ok and first.iterations == 5 and first.steps_total == 5 and not first.restored
    assert first.finished  # max_iterations reached
    again = a.run_lease(_spec(tmp_path, expect_steps=5.0))  # same worker, same progress: lease extension
    assert again.ok and not again.restored and again.restore_s == 0.0 and again.steps_start == 5
    moved = b.run_lease(_spec(tmp_path, expect_steps=10.0))  # another worker: restore from the checkpoint
    assert moved.ok and moved.restored and moved.steps_start == 10 and moved.steps_total == 15
    other = b.run_lease(_spec(tmp_path, run_id="r2", expect_steps=-1.0))  # a new run, same folder
    assert other.ok and not other.restored and other.steps_start == 0
    assert checkpoint.load(tmp_path / "job-1.pt")["run_id"] == "r2"


def test_worker_emulated_speed_stretches_steps(tmp_path):
    from hadar.runtime.worker import Worker

    w = Worker(0, "n", "k80")
    w.run_lease(_spec(tmp_path, max_iterations=3))  # warm up
    fast = w.run_lease(_spec(tmp_path, max_iterations=40, expect_steps=3.0))
    slow = w.run_lease(_spec(tmp_path, max_iterations=40, expect_steps=43.0, speed=0.25))
    assert slow.train_s > 2.5 * fast.train_s


def test_worker_stops_at_the_deadline(tmp_path):
    from hadar.runtime.worker import Worker

    out = Worker(0, "n", "v100").run_lease(_spec(tmp_path, max_iterations=10**9, budget_s=0.5))
    assert out.ok and not out.finished and out.train_s < 3.0
