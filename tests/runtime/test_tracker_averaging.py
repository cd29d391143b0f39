"""HadarE's job tracker without Ray: weight averaging, copies' starting weights, disjoint shards, dead copies."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hadar.runtime import aggregate, checkpoint, workloads

LSTM = "LSTM-LM (batch size 20)"
RESNET = "ResNet (digits, batch size 32)"


def _opt_state(model):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    return opt.state_dict()


def test_averaging_two_copies_equals_the_sample_weighted_mean():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    sa = {**a.state_dict(), "count": torch.tensor(7)}
    sb = {**b.state_dict(), "count": torch.tensor(3)}
    out = aggregate.average_tensors([sa, sb], [300.0, 100.0])  # samples processed
    for k in ("weight", "bias"):
        assert torch.allclose(out[k], 0.75 * sa[k] + 0.25 * sb[k], atol=1e-7)
    assert out["count"].item() == 7  # non-float entries: from the copy that processed most
    same = aggregate.average_tensors([sa, sa], [1.0, 5.0])
    assert torch.allclose(same["weight"], sa["weight"])
    with pytest.raises(ValueError, match="positive sum"):
        aggregate.average_tensors([sa, sb], [0.0, 0.0])


def _copy_ckpt(tmp_path, copy, seed, steps, iterations):
    torch.manual_seed(seed)
    m = torch.nn.Linear(3, 2)
    state = {"model": m.state_dict(), "optimizer": _opt_state(m), "seen": copy}
    meta = {"run_id": "r", "job_id": 1, "copy": copy, "steps": 100 + steps, "iteration": 10 + iterations}
    path = aggregate.copy_path(tmp_path / "job-1.pt", copy)
    checkpoint.save_atomic({"hadar": meta, "state": state}, path)
    return aggregate.CopyResult(copy, path, float(steps), iterations), state


@pytest.mark.parametrize("policy", ["largest", "average"])
def test_merge_writes_the_weighted_average_and_the_progress_of_all_copies(tmp_path, policy):
    c0, s0 = _copy_ckpt(tmp_path, 0, 1, steps=60, iterations=60)
    c1, s1 = _copy_ckpt(tmp_path, 1, 2, steps=20, iterations=20)
    merged = aggregate.merge_copies(tmp_path / "job-1.pt", 100.0, 10, [c0, c1], optimizer=policy)
    assert merged is not None and merged.copies == (0, 1)
    got = checkpoint.load(tmp_path / "job-1.pt")
    meta, state = got["hadar"], got["state"]
    assert meta["steps"] == 180.0 and meta["iteration"] == 70 and meta["run_id"] == "r"  # copies split batches
    assert torch.allclose(state["model"]["weight"], 0.75 * s0["model"]["weight"] + 0.25 * s1["model"]["weight"])
    exp0 = s0["optimizer"]["state"][0]["exp_avg"]
    exp1 = s1["optimizer"]["state"][0]["exp_avg"]
    want = exp0 if policy == "largest" else 0.75 * exp0 + 0.25 * exp1
    assert torch.allclose(state["optimizer"]["state"][0]["exp_avg"], want, atol=1e-7)
    assert state["seen"] == 0  # every other entry: from the copy that did most steps


def test_an_outer_step_moves_the_model_by_that_times_the_copies_mean_move(tmp_path):
    torch.manual_seed(9)
    start = {"model": {**torch.nn.Linear(3, 2).state_dict(), "n": torch.tensor(5)}}
    checkpoint.save_atomic({"hadar": {"run_id": "r", "job_id": 1, "steps": 100, "iteration": 10}, "state": start},
                           tmp_path / "job-1.pt")
    c0, s0 = _copy_ckpt(tmp_path, 0, 1, steps=60, iterations=60)
    c1, s1 = _copy_ckpt(tmp_path, 1, 2, steps=20, iterations=20)
    aggregate.merge_copies(tmp_path / "job-1.pt", 100.0, 10, [c0, c1], outer=2.0)
    got = checkpoint.load(tmp_path / "job-1.pt")["state"]["model"]["weight"]
    mean = 0.75 * s0["model"]["weight"] + 0.25 * s1["model"]["weight"]
    w0 = start["model"]["weight"]
    assert torch.allclose(got, w0 + 2.0 * (mean - w0), atol=1e-6)  # the copies' two moves summed
    out = aggregate.extrapolate({"w": torch.zeros(2), "n": torch.tensor(1)}, {"w": torch.ones(2), "n": torch.tensor(4)},
                                0.5)
    assert torch.equal(out["w"], torch.full((2,), 0.5)) and out["n"].item() == 4  # integers: the merged model's


def test_a_dead_copy_is_left_out_and_nothing_else_is_lost(tmp_path):
    c0, s0 = _copy_ckpt(tmp_path, 0, 1, steps=40, iterations=40)
    dead = aggregate.CopyResult(1, aggregate.copy_path(tmp_path / "job-1.pt", 1), 0.0, 0)  # died: no steps
    merged = aggregate.merge_copies(tmp_path / "job-1.pt", 100.0, 10, [c0, dead])
    got = checkpoint.load(tmp_path / "job-1.pt")
    assert merged.copies == (0,) and got["hadar"]["steps"] == 140.0
    assert torch.equal(got["state"]["model"]["weight"], s0["model"]["weight"])  # the survivor's work, all of it
    # no copy survived: the canonical checkpoint is untouched
    assert aggregate.merge_copies(tmp_path / "job-1.pt", 0.0, 0, [dead]) is None
    assert checkpoint.load(tmp_path / "job-1.pt")["hadar"]["steps"] == 140.0


def test_copies_read_disjoint_shards_of_every_global_batch():
    wl = workloads.get(RESNET)
    train, _ = wl.make_data(1)
    seen = []
    for shard in range(3):  # copy 0 on 2 GPUs (shards 0, 1), copy 1 on 1 GPU (shard 2)
        x, _ = wl.batch(train, 0, shard, 3, seed=1)
        seen.append({tuple(r.flatten().tolist()) for r in x})
    assert all(len(s) > 0 for s in seen)
    assert not (seen[0] & seen[1]) and not (seen[0] & seen[2]) and not (seen[1] & seen[2])


def _spec(tmp_path, **kw):
    from hadar.job.lease import LeaseSpec

    base = LeaseSpec(job_id=1, entrypoint=workloads.entrypoint(RESNET), rank=0, world=1, max_iterations=4,
                     budget_s=60.0, checkpoint=str(tmp_path / "job-1.pt"), seed=3, run_id="r1", total_steps=100.0)
    return dataclasses.replace(base, **kw)


def test_a_forked_jobs_copies_start_each_round_from_identical_weights(tmp_path):
    """Two workers run copies for two rounds; the tracker merges in between; both copies of round 2 start
    from the merged weights, including the worker that holds its own copy's state in memory."""
    from hadar.job.state import digest
    from hadar.runtime.worker import Worker

    canonical = tmp_path / "job-1.pt"
    a, b = Worker(0, "a", "v100"), Worker(1, "b", "k80")
    first = a.run_lease(_spec(tmp_path, max_iterations=3))  # round 0: one copy (the job itself)
    assert first.ok
    steps, iteration = 3.0, 3
    for _ in range(2):
        outs = []
        for w, copy in ((a, 0), (b, 1)):
            spec = _spec(tmp_path, copy=copy, copies=2, restore_from=str(canonical), shard_offset=copy, shards=2,
                         checkpoint=str(aggregate.copy_path(canonical, copy)), start_iteration=iteration,
                         steps_done=steps, resume_steps=steps, max_iterations=3 + copy, digest=True)
            outs.append(w.run_lease(spec))
        assert all(o.ok for o in outs)
        assert outs[0].start_digest == outs[1].start_digest  # identical starting weights ...
        assert outs[0].start_digest == digest(checkpoint.load(canonical)["state"])  # ... the canonical ones
        assert outs[1].restored  # b never held the job: restored from the canonical checkpoint
        copies = [aggregate.CopyResult(c, aggregate.copy_path(canonical, c), float(o.iterations), o.iterations)
                  for c, o in enumerate(outs)]
        merged = aggregate.merge_copies(canonical, steps, iteration, copies)
        assert merged.steps == steps + 7 and merged.iteration == iteration + 4
        steps, iteration = merged.steps, merged.iteration
    assert outs[0].restored  # a copy's own state is never resumed from memory: a read the merged weights
