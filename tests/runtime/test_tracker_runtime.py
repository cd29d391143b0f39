"""HadarE on the real runtime (one Ray per session): forked copies, the job tracker's merges, a copy dying."""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest

from hadar.model.job import Job
from hadar.runtime import aggregate, checkpoint, workloads
from hadar.runtime.demo import demo_cluster
from hadar.runtime.run import run
from tests.helpers import load_scale

pytestmark = pytest.mark.runtime


def test_hadare_forks_merges_and_survives_a_copy_dying_mid_round(ray_session, tmp_path):
    jobs = [Job(0, "lstm", 1, 1600), Job(1, "resnet", 1, 700)]
    victim: dict = {}

    def on_pool(pool):
        victim["pool"] = pool

    def on_dispatch(round_no, plan):
        copies = [le for le in plan.leases if le.job_id == 0]
        if "gpu" not in victim and len(copies) >= 2:
            victim["gpu"], victim["round"] = copies[-1].gpus[0], round_no
            victim["copy"] = copies[-1].copy
            threading.Timer(0.8, victim["pool"].kill, args=(copies[-1].gpus[0],)).start()

    res = run(jobs, demo_cluster(), "hadare", round_s=3.0, checkpoint_dir=tmp_path, on_pool=on_pool,
              on_dispatch=on_dispatch, grace_s=20.0 * load_scale())
    s = res.summary
    assert s["jobs_completed"] == 2 and "round" in victim
    assert s["forked_job_rounds"] >= 1 and s["failed_leases"] == 1 and s["worker_replacements"] == 1
    leases = [e for e in res.events if e["event"] == "lease"]
    merges = {(e["job"], e["round"]): e for e in res.events if e["event"] == "merge"}
    failed = [e for e in res.events if e["event"] == "lease_failed"]
    assert [(e["job"], e["round"], e["copy"]) for e in failed] == [(0, victim["round"], victim["copy"])]
    # the dead copy is left out of that round's average; the other copies' steps all count
    m = merges[(0, victim["round"])]
    assert victim["copy"] not in m["copies"] and m["copies"]
    ok_then = [e for e in leases if e["job"] == 0 and e["round"] == victim["round"]]
    assert sum(e["steps"] for e in ok_then) == pytest.approx(sum(m["steps"]))
    by_round: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for e in leases:
        by_round[(e["job"], e["round"])].append(e)
    progress: dict[int, float] = {0: 0.0, 1: 0.0}
    for (job, rnd), es in sorted(by_round.items(), key=lambda kv: kv[0][1]):
        # every copy of a round starts from the same weights at the job's canonical progress
        assert len({e["start_digest"] for e in es}) == 1, (job, rnd, es)
        assert all(e["progress_from"] == pytest.approx(progress[job]) for e in es), (job, rnd, es)
        progress[job] = merges[(job, rnd)]["progress_to"] if (job, rnd) in merges else es[0]["progress_to"]
    for job in jobs:
        ckpt = checkpoint.load(res.quality[job.job_id].checkpoint)
        assert job.total_steps <= ckpt["hadar"]["steps"] <= job.total_steps + 8  # the sample budget, split over copies
        q = res.quality[job.job_id]
        assert q.final is not None and workloads.get(job.job_type).better(q.final, q.initial)
    assert not list(tmp_path.glob("*.copy*")) and not list(tmp_path.glob("*.next*"))  # merged or committed, removed
    assert any(e["event"] == "merge" and e["final"] is not None for e in res.events)  # the merged model, evaluated
    assert aggregate.copy_path(tmp_path / "job-0.pt", 1).name == "job-0.copy1.pt"


def test_a_gang_wider_than_a_node_trains_as_one_synchronous_lease_under_a_fork_efficiency(ray_session, tmp_path):
    """A 2-GPU job on two 1-GPU nodes: ideal, HadarE runs it as two copies merged every round; told that
    two copies are worth one (half per doubling), the planner runs it as one 2-GPU lease across both nodes
    (fork_credit.py), so nothing is merged and the job trains as one data-parallel gang."""
    from hadar.model.fork_efficiency import ForkEfficiency
    from tests.helpers import gang_cluster

    cluster = gang_cluster()
    half = ForkEfficiency({}, job_types={}, default=0.5)
    # 200 steps: the prior (30 steps/s a copy, 3 s rounds) leaves room for a second copy in the first round
    res = run([Job(0, "resnet", 2, 200)], cluster, "hadare", round_s=3.0, checkpoint_dir=tmp_path,
              fork_efficiency=half)
    assert res.summary["jobs_completed"] == 1
    leases = [e for e in res.events if e["event"] == "lease"]
    assert leases and all(len(e["gpus"]) == 2 and e["copy"] == 0 for e in leases)
    assert not [e for e in res.events if e["event"] == "merge"]
    assert res.summary["forked_job_rounds"] == 0
    ideal = run([Job(0, "resnet", 2, 200)], cluster, "hadare", round_s=3.0, checkpoint_dir=tmp_path / "ideal")
    copies = [e for e in ideal.events if e["event"] == "lease"]
    assert copies and all(len(e["gpus"]) == 1 for e in copies)  # one copy per node, merged every round
    assert [e for e in ideal.events if e["event"] == "merge"]
