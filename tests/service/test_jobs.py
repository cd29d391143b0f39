"""The service's side of user jobs, without Ray: submissions with entrypoints checked as `hadar run` checks
them, one job per name across submissions, measured throughputs kept in the store, resuming from a committed
checkpoint, per-job logs, registration before admission, and a GPU type that joins later."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hadar.clock import VirtualClock
from hadar.errors import InputError
from hadar.model.cluster import Cluster, Node
from hadar.model.job import Job
from hadar.model.plan import Lease
from hadar.model.throughput import ThroughputTable
from hadar.runtime import checkpoint, emulation
from hadar.runtime.executor import RayExecutor
from hadar.runtime.tracker import ThroughputTracker
from hadar.service import joblog, runtime
from hadar.service.scheduler import _name_conflict
from hadar.service.specs import job_from_spec, parse_job_file, to_new_jobs
from hadar.service.store import Store

TRAIN = "def train(ctx):\n    for _ in ctx.steps():\n        pass\n"


def _folder(tmp_path: Path, name: str, text: str = TRAIN) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "train.py").write_text(text)
    return folder


def test_entrypoint_submissions_resolve_where_the_file_came_from(tmp_path):
    a = _folder(tmp_path, "a")
    text = "jobs:\n  - {name: mine, entrypoint: train.py:train, gpus: 1, total_steps: 100, args: {lr: 0.1}}\n"
    (job,) = parse_job_file(text, "jobs.yaml", base_dir=str(a))
    assert job.job_type == "mine" and job.train is not None and job.train.search_path == (str(a),)
    assert job.train.args == {"lr": 0.1}
    cwd = _folder(tmp_path, "cwd")  # not in the file's folder: the client's current folder is tried next
    (other,) = parse_job_file(text, "jobs.yaml", base_dir=str(tmp_path), cwd=str(cwd))
    assert other.train is not None and other.train.search_path == (str(tmp_path), str(cwd))
    (new,) = to_new_jobs([job], 50.0)
    assert new.name == "mine" and job_from_spec(4, json.loads(json.dumps(new.spec))).train == job.train
    bad = [
        ("jobs:\n  - {entrypoint: train.py:train, total_steps: 10}\n", None, "relative file; send base_dir"),
        ("jobs:\n  - {entrypoint: train.py:nope, total_steps: 10}\n", str(a), "no function 'nope'"),
        ("jobs:\n  - {entrypoint: gone.py:train, total_steps: 10}\n", str(a), "file gone.py not found"),
        ("jobs:\n  - {entrypoint: train.py:train, total_steps: 10}\n", "relative/dir", "base_dir must be an absolute"),
        ("jobs:\n  - {name: x, entrypoint: train.py:train, total_steps: 10}\n"
         "  - {name: x, entrypoint: train.py:train, total_steps: 10, args: {a: 1}}\n", str(a), "another job is named"),
        ("jobs:\n  - {job_type: lstm, total_steps: 10, emulate_as: nothing}\n", None, "emulate_as 'nothing'"),
    ]
    for body, base, message in bad:
        with pytest.raises(InputError, match=message):
            parse_job_file(body, "jobs.yaml", base_dir=base)


def test_one_job_per_name_across_submissions(tmp_path):
    a, b = _folder(tmp_path, "a"), _folder(tmp_path, "b")
    text = "jobs:\n  - {name: mine, entrypoint: train.py:train, total_steps: 100}\n"
    store = Store(tmp_path)
    first = store.submit(to_new_jobs(parse_job_file(text, "j.yaml", str(a)), 0.0), "req-0000001", _name_conflict)
    again = store.submit(to_new_jobs(parse_job_file(text, "j.yaml", str(a)), 1.0), "req-0000002", _name_conflict)
    assert first.ids == (1,) and again.ids == (2,)  # the same function, resubmitted: shares measurements
    elsewhere = to_new_jobs(parse_job_file(text, "j.yaml", str(b)), 2.0)  # another file, the same name
    with pytest.raises(InputError, match="job 1 is also named 'mine' but has a different entrypoint"):
        store.submit(elsewhere, "req-0000003", _name_conflict)
    bundled = to_new_jobs(parse_job_file("jobs:\n  - {job_type: lstm, total_steps: 9}\n", "k.yaml"), 3.0)
    assert store.submit(bundled * 2, "req-0000004", _name_conflict).ids == (3, 4)
    assert store.counts()["jobs"] == 4 and store.counts()["submissions"] == 3  # the refused one left nothing


def test_measured_throughputs_survive_the_store(tmp_path):
    tracker = ThroughputTracker(("v100", "k80"))
    tracker.add("mine", 1)
    assert tracker.observe("mine", 1, "v100", 40.0, 2.0) and tracker.observe("mine", 1, "v100", 60.0, 2.0)
    assert tracker.observe("other", 2, "k80", 10.0, 1.0)
    store = Store(tmp_path)
    with store.transaction() as con:
        store.save_throughputs(con, runtime.tracker_rows(tracker))
    fresh = ThroughputTracker(("v100", "k80"))
    runtime.restore_tracker(fresh, store.throughputs())
    assert fresh.measured == tracker.measured and fresh.samples == tracker.samples
    assert fresh.totals == tracker.totals and fresh.measurements() == tracker.measurements()
    fresh.add("mine", 1)
    fresh.add("other", 2)  # rows come with the jobs registered; the measurements with the store
    assert fresh.kind("mine", 1, "v100") == "measured" and fresh.table().get("mine", 1, "v100") == 25.0
    assert fresh.table().rates == tracker.table().rates  # the same estimates for what was not measured


def test_resume_from_a_committed_checkpoint(tmp_path):
    path = checkpoint.checkpoint_path(tmp_path, 5)
    assert runtime.saved_progress(path, "run-a", 5) is None  # none yet
    checkpoint.save_atomic({"hadar": {"run_id": "run-a", "job_id": 5, "steps": 120.0, "iteration": 60},
                            "state": {"w": 1}}, path)
    saved = runtime.saved_progress(path, "run-a", 5)
    assert saved == runtime.Saved(120.0, 60)
    assert runtime.saved_progress(path, "run-b", 5) is None  # another run's: never restored
    assert runtime.saved_progress(path, "run-a", 6) is None
    job = parse_job_file("jobs:\n  - {job_type: lstm, total_steps: 300, gpus: 2}\n", "j.yaml")[0]
    executor = _executor(tmp_path, Cluster((Node("a", "v100", 2),)))
    info = executor.register(job)
    runtime.resume(info, saved)
    spec = executor._spec(info, _lease(job), 10.0, 0, None, "train")
    assert (spec.steps_done, spec.start_iteration, spec.resume_steps) == (120.0, 60, 120.0)
    assert spec.restore_from == str(checkpoint.checkpoint_path(tmp_path, job.job_id)) and spec.run_id == "run-a"
    path.write_bytes(b"not a checkpoint")
    assert runtime.saved_progress(path, "run-a", 5) is None  # unreadable: starts over


def _executor(tmp_path: Path, cluster: Cluster) -> RayExecutor:
    return RayExecutor(cluster, None, VirtualClock(), checkpoint_dir=tmp_path,  # type: ignore[arg-type]
                       ratios=emulation.SpeedRatios(ThroughputTable.load(), cluster.gpu_types), run_id="run-a")


def _lease(job: Job, gpus: tuple[int, ...] | None = None) -> Lease:
    return Lease(job.job_id, job.job_type, job.scale_factor, gpus or tuple(range(job.scale_factor)), 180.0)


def test_job_logs_get_committed_events_and_are_read_from_the_end(tmp_path):
    events = [{"t": 3.0, "event": "arrival", "job": 2, "job_type": "mine", "scale_factor": 1},
              {"t": 4.5, "event": "lease", "job": 2, "gpus": [0], "iterations": 7, "progress_from": 0.0,
               "progress_to": 7.0, "restored": False},
              {"t": 4.5, "event": "measured", "job": 2, "rate": 1.0},  # not a log line
              {"t": 9.0, "event": "cancelled", "job": 3}]
    joblog.append(tmp_path, events)
    lines = joblog.read(tmp_path, 2)
    assert len(lines) == 2 and lines[0].endswith("[3.0 s] arrived (mine, 1 GPU(s))")
    assert lines[1].endswith("lease on GPUs [0]: 7 iterations, progress 0 -> 7 steps")
    assert joblog.read(tmp_path, 3)[-1].endswith("cancelled") and joblog.read(tmp_path, 4) == []
    with (tmp_path / "job-2.log").open("a") as f:
        f.write("x" * 100 + "\n" + "".join(f"line {i}\n" for i in range(200_000)))
    tail = joblog.read(tmp_path, 2, limit=3)
    assert tail == ["line 199997", "line 199998", "line 199999"]
    assert joblog.read(tmp_path, 2, limit=10**6)[0].startswith("line ")  # a cut first line is left out


class _Watcher:
    def __init__(self, view: Cluster) -> None:
        self.view: Cluster | None = view

    def poll(self) -> Cluster | None:
        view, self.view = self.view, None
        return view


def test_a_node_of_a_new_gpu_type_adds_its_column(tmp_path):
    cluster = Cluster((Node("a", "v100", 1),))
    executor = _executor(tmp_path, cluster)
    job = parse_job_file("jobs:\n  - {job_type: lstm, total_steps: 300}\n", "j.yaml")[0]
    assert executor.admit([job]).get(job.job_type, 1, "v100") > 0
    grown = cluster.with_node(Node("b", "k80", 2))
    executor.nodes = _Watcher(grown)
    change = executor.cluster_view()
    assert change is not None and change.cluster == grown and executor.book.cluster() == grown
    assert change.table is not None and change.table.get(job.job_type, 1, "k80") > 0
    assert executor.tracker.types == ("v100", "k80")
    executor.book.observe(_lease(job, (2,)), 30.0, 3.0, 1.0)
    assert executor.tracker.kind(job.job_type, 1, "k80") == "measured"  # a lease on the new node counts
