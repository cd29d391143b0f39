"""The job API and the lease runner without Ray: one lease of a user function at a time, in this process."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hadar.errors import InputError
from hadar.job import check_entrypoint
from hadar.job.lease import LeaseSpec
from hadar.job.runner import run_lease
from hadar.job.state import StateCache, check_saveable, load
from hadar.runtime import workloads

JOBS = Path(__file__).parent / "jobs"
REPO = Path(__file__).parents[2]


def _spec(tmp_path: Path, entry: str = "regression.py:train", **kw: object) -> LeaseSpec:
    base = LeaseSpec(job_id=1, entrypoint=entry, rank=0, world=1, max_iterations=20, budget_s=60.0,
                     checkpoint=str(tmp_path / "job-1.pt"), search_path=(str(JOBS),), run_id="r1",
                     args_json=json.dumps({"marker": str(tmp_path / "marker")}), total_steps=60.0)
    return dataclasses.replace(base, **kw)


def _next(spec: LeaseSpec, out) -> LeaseSpec:
    """The spec of the job's next lease after ``out`` (what the executor would send)."""
    return dataclasses.replace(spec, start_iteration=spec.start_iteration + out.iterations,
                               steps_done=spec.steps_done + out.iterations * spec.world,
                               resume_steps=out.saved_steps if out.saved_steps is not None else spec.resume_steps)


def test_leases_resume_from_memory_on_the_same_worker_and_from_disk_elsewhere(tmp_path):
    torch.set_num_threads(1)
    mine, other = StateCache(), StateCache()
    first = run_lease(_spec(tmp_path), cache=mine)
    assert first.ok and first.iterations == 20 and first.saved_steps == 20 and not first.restored
    assert first.metrics["seen"] == 20 and "lease done: 20 steps seen" in first.output
    spec2 = _next(_spec(tmp_path), first)
    Path(spec2.checkpoint).rename(tmp_path / "moved.pt")  # the same worker must not need the file
    again = run_lease(spec2, cache=mine)
    assert again.ok and again.continued and not again.restored and again.restore_s == 0.0
    assert again.metrics["seen"] == 40
    spec3 = _next(spec2, again)
    moved = run_lease(spec3, cache=other)  # another worker reads the checkpoint file
    assert moved.ok and moved.restored and not moved.continued and moved.metrics["seen"] == 60
    assert moved.finished
    ckpt = load(spec3.checkpoint)
    assert ckpt["hadar"]["steps"] == 60 and ckpt["hadar"]["run_id"] == "r1" and ckpt["state"]["seen"] == 60
    stale = run_lease(dataclasses.replace(spec3, run_id="r2"), cache=StateCache())  # another run's file: ignored
    assert stale.ok and not stale.restored and stale.metrics["seen"] == 20


def test_the_lease_deadline_stops_the_steps_but_the_first_step_always_runs(tmp_path):
    out = run_lease(_spec(tmp_path, max_iterations=10**9, budget_s=0.3))
    assert out.ok and 1 <= out.iterations < 10**9 and not out.finished
    late = run_lease(_spec(tmp_path, max_iterations=10**9, budget_s=0.0))
    assert late.ok and late.iterations == 1


def test_emulated_speed_stretches_every_step(tmp_path, monkeypatch):
    """At speed f a lease lasts (its real work) / f: it sleeps (1 / f - 1) x the work (no wall-clock race)."""
    from hadar.job import context

    slept = []
    real_sleep = context._sleep

    def sleep(s: float) -> None:
        t = context.time.monotonic()
        real_sleep(s)
        slept.append(context.time.monotonic() - t)

    monkeypatch.setattr(context, "_sleep", sleep)
    fast = run_lease(_spec(tmp_path, max_iterations=30))
    assert fast.ok and not slept  # full speed: no waiting
    # steps of 10 ms (the job's step_s): the work the speed stretches, not the loop's bookkeeping between steps,
    # is what the lease's time is made of, also when a busy machine holds the process back between them
    heavier = json.dumps({"marker": str(tmp_path / "marker"), "step_s": 0.01})
    slow = run_lease(_spec(tmp_path, max_iterations=30, speed=0.25, args_json=heavier))
    work = slow.train_s - sum(slept)
    assert slow.ok and len(slept) >= 25 and slow.train_s >= 0.8 * work / 0.25


def test_an_exception_fails_the_lease_with_its_full_text_and_traceback_and_no_colour(tmp_path):
    cache = StateCache()
    ok = run_lease(_spec(tmp_path), cache=cache)
    assert ok.ok and cache.entry is not None
    bad = run_lease(_spec(tmp_path, args_json=json.dumps({"fail": "always"})), cache=cache)
    assert not bad.ok and bad.metrics == {}
    assert bad.error == "RuntimeError: the job's code failed\nsecond line of the reason"
    assert "\x1b" not in bad.error + bad.traceback
    assert 'regression.py", line' in bad.traceback and "Traceback (most recent call last)" in bad.traceback
    assert cache.entry is None  # a failed lease's memory is never resumed from


@pytest.mark.parametrize(("entry", "error"), [
    ("broken.py:no_steps", "returned without iterating ctx.steps()"),
    ("broken.py:bad_state", "save_state: state['model'] is a builtins.object"),
    ("broken.py:exits", "SystemExit: 3"),
    ("missing.py:train", "not found"),
])
def test_misused_apis_fail_the_lease_with_a_reason(tmp_path, entry, error):
    out = run_lease(_spec(tmp_path, entrypoint=entry))
    assert not out.ok and error in out.error


def test_a_job_that_never_saves_gets_a_warning_and_still_progresses(tmp_path):
    out = run_lease(_spec(tmp_path, entrypoint="notsaving.py:train"))
    assert out.ok and out.iterations == 20 and out.saved_steps is None
    assert any("without calling ctx.save_state" in w for w in out.warnings)


def test_profiling_and_finalizing_leases(tmp_path):
    first = run_lease(_spec(tmp_path))
    before = Path(_spec(tmp_path).checkpoint).read_bytes()
    prof = run_lease(_next(_spec(tmp_path, mode="profile", max_iterations=5), first))
    assert prof.ok and prof.iterations == 5 and prof.restored and prof.saved_steps is None
    assert Path(_spec(tmp_path).checkpoint).read_bytes() == before  # nothing it saved is kept
    fin = run_lease(_next(_spec(tmp_path, mode="finalize", max_iterations=0), first))
    assert fin.ok and fin.iterations == 0 and fin.finished and fin.metrics["seen"] == 20


def test_save_state_accepts_what_a_weights_only_load_reads_back():
    check_saveable({"model": torch.nn.Linear(2, 2).state_dict(), "step": 3, "names": ["a"], "lr": 0.1,
                    "opt": torch.optim.Adam(torch.nn.Linear(1, 1).parameters()).state_dict()})
    with pytest.raises(TypeError, match=r"state\['f'\] is a builtins.function"):
        check_saveable({"f": lambda: 0})


def test_a_bundled_workload_learns_through_the_api(tmp_path):
    spec = _spec(tmp_path, entrypoint=workloads.entrypoint("recoder"), max_iterations=150, total_steps=150.0)
    out = run_lease(spec)
    assert out.ok and out.finished
    wl = workloads.get("recoder")
    assert wl.better(out.metrics[wl.metric], out.first_metrics[wl.metric])  # trained vs untrained


@pytest.mark.parametrize(("entry", "message"), [
    ("nothere.py:train", "file nothere.py not found"),
    ("broken.py:nothing", "no function 'nothing' defined at the top level"),
    ("regression.py:os", "os is imported in .*regression.py \\(from os\\), not defined there"),
    ("hadar.runtime.workloads.image:train", None),
    ("hadar.runtime.workloads.nope:train", "module hadar.runtime.workloads.nope not found"),
    ("no_such_package_x.mod:train", "cannot find module no_such_package_x.mod"),
    ("train", "want FILE.py:FUNCTION"),
])
def test_entrypoints_are_checked_without_running_them(entry, message):
    if message is None:
        check_entrypoint(entry, [str(JOBS)])
        return
    with pytest.raises(InputError, match=message):
        check_entrypoint(entry, [str(JOBS)])


def test_syntax_errors_and_functions_without_a_parameter_are_caught(tmp_path):
    (tmp_path / "bad.py").write_text("def train(ctx):\n    return (\n")
    (tmp_path / "noarg.py").write_text("def train():\n    pass\n")
    with pytest.raises(InputError, match=r"syntax error in .*bad.py line"):
        check_entrypoint("bad.py:train", [str(tmp_path)])
    with pytest.raises(InputError, match="takes no argument"):
        check_entrypoint("noarg.py:train", [str(tmp_path)])


def test_python_m_hadar_job_runs_a_data_parallel_lease_on_two_processes(tmp_path):
    """Two ranks, gloo on loopback, DDP: the runner with no Ray at all (what a GPU check runs with NCCL)."""
    proc = subprocess.run([sys.executable, "-m", "hadar.job", "examples/ddp/train.py:train", "--steps", "40",
                           "--gpus", "2", "--leases", "2", "--lease-s", "120", "--checkpoint", str(tmp_path / "c.pt")],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [x["ok"] for x in lines] == [True] and lines[0]["iterations"] == 20  # 40 steps = 20 x 2 ranks
    assert 0.0 <= lines[0]["metrics"]["accuracy"] <= 1.0
    assert load(tmp_path / "c.pt")["hadar"]["steps"] == 40
    bad = subprocess.run([sys.executable, "-m", "hadar.job", "examples/nope.py:train"], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "not found" in bad.stderr


def _listening(port: int) -> set[str]:
    """The local addresses something listens on at ``port`` (Linux's /proc/net/tcp, IPv4)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, p = local.split(":")
        if state == "0A" and int(p, 16) == port:
            found.add(".".join(str(int(addr[i:i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


def test_the_rendezvous_store_listens_on_loopback_only_and_closes_with_the_lease(tmp_path):
    import gc

    from hadar.job.dist import open_store

    for n in range(2):  # the first process group of a process too (torch once kept that one open)
        store, port = open_store("127.0.0.1")
        assert _listening(port) == {"127.0.0.1"}  # torch's own TCPStore would listen on 0.0.0.0
        out = run_lease(_spec(tmp_path, process_group=True, rendezvous=("127.0.0.1", port), group=f"g{n}/"),
                        store=store)
        assert out.ok, out.traceback
        del store
        gc.collect()
        assert not _listening(port)


def test_a_job_stops_at_the_step_its_quality_metric_reaches_the_target(tmp_path):
    spec = _spec(tmp_path, "scored.py:train", max_iterations=50, total_steps=50.0, target_metric="score", target=5.0)
    out = run_lease(spec)
    assert out.error == "" and out.reached_target and out.finished
    assert out.iterations == 6 and out.metrics["score"] == 5.0 and out.metrics["finished"] == 1.0  # steps 0..5
    lower = run_lease(_spec(tmp_path, "scored.py:train", max_iterations=50, total_steps=50.0, target_metric="-score",
                            target=-1.0, checkpoint=str(tmp_path / "other.pt")))
    assert not lower.reached_target and lower.iterations == 50 and lower.finished  # a score never <= -1: all steps
    forked = run_lease(dataclasses.replace(spec, copy=0, copies=2, checkpoint=str(tmp_path / "copy.pt")))
    assert not forked.reached_target and forked.iterations == 50  # a copy's model is not the job's
