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


# ---- workloads ----------------------------------------------------------------------
@pytest.mark.parametrize("name", workloads.names())
def test_each_workload_learns_something_in_a_few_steps_through_the_job_api(name, tmp_path):
    from hadar.job.lease import LeaseSpec
    from hadar.job.runner import run_lease

    torch.set_num_threads(1)
    wl = workloads.get(name)
    spec = LeaseSpec(job_id=1, entrypoint=workloads.entrypoint(name), rank=0, world=1, max_iterations=150,
                     budget_s=600.0, checkpoint=str(tmp_path / "job-1.pt"), seed=1, total_steps=150.0)
    out = run_lease(spec)
    assert out.ok and out.iterations == 150 and out.finished, out.error
    before, after = out.first_metrics[wl.metric], out.metrics[wl.metric]  # untrained, then trained
    assert wl.better(after, before), (name, before, after)
    assert checkpoint.load(spec.checkpoint)["hadar"]["iteration"] == 150


@pytest.mark.parametrize("name", workloads.names())
def test_workloads_are_deterministic_in_the_seed(name):
    wl = workloads.get(name)
    a, b = wl.build_model(4), wl.build_model(4)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_data_parallel_ranks_read_disjoint_slices_of_a_global_batch():
    wl = workloads.get("lstm")
    train, _ = wl.make_data(2)
    rows = [wl.batch(train, 5, r, 2, seed=2) for r in range(2)]
    assert rows[0].shape == rows[1].shape == (wl.batch_size, rows[0].shape[1])
    flat = {tuple(x.tolist()) for r in rows for x in r}
    assert len(flat) == 2 * wl.batch_size


def test_aliases_and_unknown_job_types():
    assert workloads.resolve("ResNet") == "ResNet (digits, batch size 32)"
    with pytest.raises(InputError, match="unknown runtime job type"):
        workloads.resolve("ResNet-50 (batch size 64)")


# ---- emulation -----------------------------------------------------------------
def test_speed_ratios_follow_gavels_rows(table):
    ratios = emulation.SpeedRatios(table, CLUSTER.gpu_types)
    row = table.rates[("ResNet-18 (batch size 32)", 1)]
    f = {t: ratios("ResNet-18 (batch size 32)", 1, t) for t in CLUSTER.gpu_types}
    assert max(f.values()) == pytest.approx(1.0)
    assert f["k80"] / f["p100"] == pytest.approx(row["k80"] / row["p100"])
    # the recommendation model is fastest on P100 in Gavel's table, so there too
    rec = {t: ratios("Recommendation (batch size 512)", 1, t) for t in CLUSTER.gpu_types}
    assert rec["p100"] == 1.0 and rec["v100"] < 1.0
    # a user job without emulate_as: the average Gavel model (documented numbers), for every GPU count
    avg = {t: round(ratios(emulation.AVERAGE, 4, t), 3) for t in CLUSTER.gpu_types}
    assert avg == {"v100": 1.0, "p100": 0.943, "k80": 0.297}


def test_local_resources_name_every_logical_node_and_type():
    res = emulation.local_resources(CLUSTER)
    assert res == {"hadar_node:a": 2, "hadar_gpu:v100": 2, "hadar_node:b": 1, "hadar_gpu:p100": 1,
                   "hadar_node:c": 1, "hadar_gpu:k80": 1}


# ---- tracker ---------------------------------------------------------------------
def test_tracker_moving_average_and_marks():
    tr = ThroughputTracker(("v100", "k80"), ratio=lambda jt, k, t: {"v100": 1.0, "k80": 0.2}[t])
    tr.add("m", 1)
    assert tr.kind("m", 1, "v100") == "estimated" and not tr.anchored("m")
    assert not tr.observe("m", 1, "v100", steps=5, seconds=0.1)  # too short to count
    assert tr.observe("m", 1, "v100", steps=50, seconds=1.0)
    assert tr.observe("m", 1, "v100", steps=70, seconds=1.0)
    t = tr.table()
    assert t.get("m", 1, "v100") == pytest.approx(60.0)  # 0.5 * 70 + 0.5 * 50
    assert t.get("m", 1, "k80") == pytest.approx(60.0 * 0.2)  # the prior ratio, at the measured level
    assert tr.kind("m", 1, "v100") == "measured" and tr.kind("m", 1, "k80") == "estimated" and tr.anchored("m")


def test_estimates_learn_type_and_count_ratios_from_other_jobs():
    """Job a measured on both types runs K80 at half the prior's ratio: job b's K80 estimate follows (shrunk);
    b's level comes from its own V100 measurement; a job with no measurement gets the typical level."""
    tr = ThroughputTracker(("v100", "k80"), ratio=lambda jt, k, t: {"v100": 1.0, "k80": 0.4}[t])
    for row in (("a", 1), ("b", 1), ("b", 2), ("c", 1)):
        tr.add(*row)
    before = tr.table()
    assert all(v > 0 for row in before.rates.values() for v in row.values())  # no holes, ever
    tr.observe("a", 1, "v100", 100.0, 1.0)
    tr.observe("a", 1, "k80", 20.0, 1.0)  # prior ratio says 40
    tr.observe("b", 1, "v100", 10.0, 1.0)
    t = tr.table()
    assert 10.0 * 0.2 < t.get("b", 1, "k80") < 10.0 * 0.4  # corrected towards a's measured ratio
    assert t.get("b", 2, "v100") == pytest.approx(2 * 0.9 * 10.0, rel=0.05)  # 2 GPUs: x 2 x 0.9 efficiency
    assert 10.0 < t.get("c", 1, "v100") < 100.0  # the typical level of the jobs measured so far
    kinds = {(e["job_type"], e["gpus"], e["gpu_type"]): e["kind"] for e in tr.entries()}
    assert kinds[("a", 1, "k80")] == "measured" and kinds[("b", 1, "k80")] == "estimated"


def test_given_throughputs_count_as_known_entries():
    given = ThroughputTable({("m", 1): {"v100": 40.0, "k80": 8.0}})
    tr = ThroughputTracker(("v100", "k80"), given=given)
    tr.add("m", 1)
    assert tr.kind("m", 1, "k80") == "given" and tr.table().get("m", 1, "k80") == 8.0 and tr.anchored("m")


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


# ---- the worker actor's body, in-process (no Ray) ------------------------------------------
def test_the_worker_keeps_the_last_saved_state_in_memory_for_the_next_lease(tmp_path):
    from hadar.job.lease import LeaseSpec
    from hadar.runtime.worker import Worker

    w = Worker(0, "n", "v100")
    spec = LeaseSpec(job_id=1, entrypoint=workloads.entrypoint("lstm"), rank=0, world=1, max_iterations=5,
                     budget_s=60.0, checkpoint=str(tmp_path / "job-1.pt"), run_id="r1", total_steps=20.0)
    first = w.run_lease(spec)
    assert first.ok and first.iterations == 5 and first.saved_steps == 5 and not first.restored
    os.remove(spec.checkpoint)  # lease extension: the same worker needs no file
    again = w.run_lease(dataclasses.replace(spec, start_iteration=5, steps_done=5.0, resume_steps=5.0))
    assert again.ok and again.continued and again.restore_s == 0.0
    other = w.run_lease(dataclasses.replace(spec, job_id=2, checkpoint=str(tmp_path / "job-2.pt")))
    assert other.ok and not other.continued  # another job: the first job's state was dropped
    assert w._cache.entry is not None and w._cache.entry.job_id == 2
