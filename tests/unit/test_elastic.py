"""Elastic jobs (issue 40, item 3): a GPU-count range per job, Hadar choosing its GPU type and count each round (every
change paying the restart), and ``hadar trace import sia --efficiency / --jobs scale-gpus``."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from hadar.cli import main
from hadar.config import parse_cluster
from hadar.errors import InputError
from hadar.model.efficiency import Efficiency
from hadar.model.job import Job
from hadar.model.state import JobView, SchedulerState
from hadar.model.throughput import ThroughputTable
from hadar.policies.hadar import water
from hadar.policies.hadar.elastic import sized
from hadar.sim.run import simulate
from hadar.sim.trace import read_jobs
from tests.unit.test_cli import hadar

TOY = "toy (batch size 200)"
DATA = Path(__file__).parent / "data" / "sia"
#: steps/s on 1, 2 and 4 V100s (3 GPUs: the table's rule, 2 GPUs' rate x 3/2 = 2.7)
TABLE = ThroughputTable.from_gavel_json({"v100": {f"('{TOY}', {k})": {"null": r} for k, r in
                                                  ((1, 1.0), (2, 1.8), (4, 3.0))}})
CLUSTER = parse_cluster("v100=4", gpus_per_node=4)


def _view(job_id: int, ran: int = 0, restart_s: float = 0.0, gpu_range: tuple[int, int] | None = (1, 4),
          sf: int = 1, left: float = 1e4) -> JobView:
    return JobView(job_id, TOY, sf, 1.0, 0.0, 1e4, left, TABLE.row(TOY, sf, ("v100",)),
                   previous_gpus=tuple(range(ran)), restart_s=restart_s, gpu_range=gpu_range)


def _counts(*views: JobView, memo: dict[str, object] | None = None) -> list[int]:
    state = SchedulerState(0.0, 360.0, CLUSTER, views, TABLE, memo=memo or {})
    return [j.scale_factor for j in sized(state)[0].jobs]


def test_spare_gpus_go_to_the_most_rate_of_finishing_per_gpu() -> None:
    # alone (value: its speedup over 1 GPU): 1 GPU first (1 a GPU; 2: 0.9, 3: 0.9, 4: 0.75), then 3 (1.7 / 2 =
    # 0.85 a GPU; 2: 0.8, 4: 0.67), then 3 -> 4 adds 0.3: all 4
    assert _counts(_view(0)) == [4]
    # two alike: the tie counts the first as the shorter (rank weight sqrt(3) against 1): its first GPU (1.73),
    # then its jump to 3 (1.73 x 1.7 / 2 = 1.47 a GPU) before the other's first (1), which gets the last
    assert _counts(_view(0), _view(1)) == [3, 1]
    # the second with half the work left: the shorter, it takes 3 first
    assert _counts(_view(0), _view(1, left=5e3)) == [1, 3]
    # a rigid job asking for 2 leaves 2: the elastic job gets them
    rigid = _view(1, gpu_range=None, sf=2)
    assert _counts(_view(0), rigid) == [2, 2]
    # rigid jobs asking for the whole cluster: the elastic job gets nothing, and no rate (Hadar leaves it out)
    state = sized(SchedulerState(0.0, 360.0, CLUSTER, (_view(0), _view(1, gpu_range=None, sf=4)), TABLE))[0]
    assert state.jobs[0].scale_factor == 1 and state.jobs[0].throughputs == (0.0,)


LONG = {water.HELD: {0: ((0, 1), -1e5)}}  # job 0 has held 1 V100 for 1e5 s: a move's gain lasts to its end


def test_a_move_must_finish_the_job_sooner_restore_paid() -> None:
    """Ran on 1 GPU (1 step/s) for long, a 300 s restore to move: on 4 GPUs (3 steps/s) its remaining ``R``
    steps take R / 3 + 300 s against R s staying."""
    assert _counts(_view(0, ran=1, restart_s=300.0), memo=LONG) == [4]  # 1e4 steps: 3,633 s against 10,000 s
    # 300 steps: 400 s on 4 against 300 s staying (2: 467 s, 3: 411 s): it stays
    assert _counts(_view(0, ran=1, restart_s=300.0, left=300.0), memo=LONG) == [1]
    # 600 steps: 500 s on 4, 522 s on 3, against 600 s: it moves
    assert _counts(_view(0, ran=1, restart_s=300.0, left=600.0), memo=LONG) == [4]
    # a job that has not run pays its restore anywhere: no discount
    assert _counts(_view(0, restart_s=300.0, left=300.0)) == [4]


def test_a_move_is_worth_the_time_its_new_placement_is_expected_to_hold() -> None:
    """On 2 GPUs (1.8 steps/s), 1e4 steps left, a 300 s restore: 4 GPUs (3 steps/s) are judged over the time
    the move's gain lasts, ``H = min(T, max(round, held))``. Held since long ago: H = T = 3,333 s, 3 x 3,333 /
    3,633 = 2.75 > 1.8, it moves; placed a round ago: H = 360 s, 3 x 360 / 660 = 1.64 < 1.8, it stays."""
    long_ago = {water.HELD: {0: ((0, 2), -1e5)}}
    assert _counts(_view(0, ran=2, restart_s=300.0), memo=long_ago) == [4]
    assert _counts(_view(0, ran=2, restart_s=300.0), memo={water.HELD: {0: ((0, 2), -360.0)}}) == [2]
    assert _counts(_view(0, ran=2, restart_s=300.0)) == [2]  # nothing remembered: since last round
    # the memo after the round: a pick kept keeps its start, a new one starts now
    both = (_view(0, ran=2, restart_s=300.0), _view(1, ran=0))
    state = SchedulerState(50.0, 360.0, CLUSTER, both, TABLE, memo={water.HELD: {0: ((0, 2), -1e5)}})
    memo = sized(replace(state, memo={water.HELD: {0: ((0, 2), 40.0)}}))[1][water.HELD]
    assert memo[0] == ((0, 2), 40.0) and memo[1][1] == 50.0


#: steps/s on 1 and 2 GPUs: the V100 scales, the K80 hardly
TWO = ThroughputTable.from_gavel_json({"v100": {f"('{TOY}', 1)": {"null": 1.0}, f"('{TOY}', 2)": {"null": 1.8}},
                                       "k80": {f"('{TOY}', 1)": {"null": 0.5}, f"('{TOY}', 2)": {"null": 0.6}}})


def test_each_job_gets_a_type_and_a_count_sized_on_that_type() -> None:
    """2 V100s, 2 K80s, two jobs of 1 to 2 GPUs that never ran, 1,000 and 4,000 steps left. Value: each job's
    speedup over its best single GPU (a V100: 1), times its rank weight (the longer job 1, the shorter
    sqrt(3)): the short job takes a V100 (1.73 a GPU), then the second (1.8 x 1.73 - 1.73 = 1.39); the long
    job then gets a K80 (0.5), then the second (0.1). Each view has its rate on its own type only."""
    cluster = parse_cluster("v100=2,k80=2", gpus_per_node=2)

    def run(left: tuple[float, float]) -> list[tuple[int, dict[str, float]]]:
        views = tuple(JobView(i, TOY, 1, 1.0, 0.0, 1e4, n, TWO.row(TOY, 1, cluster.gpu_types), gpu_range=(1, 2))
                      for i, n in enumerate(left))
        out = sized(SchedulerState(0.0, 360.0, cluster, views, TWO))[0].jobs
        return [(j.scale_factor, dict(zip(cluster.gpu_types, j.throughputs, strict=True))) for j in out]

    assert run((1e3, 4e3)) == [(2, {"v100": 1.8, "k80": 0.0}), (2, {"v100": 0.0, "k80": 0.6})]
    assert run((4e3, 1e3)) == [(2, {"v100": 0.0, "k80": 0.6}), (2, {"v100": 1.8, "k80": 0.0})]
    # alike: the tie counts the job first in the state as the shorter; it takes both V100s (its second, 1.39,
    # beats the other's first, 1) and the other the K80s: one finishes first, as the rank weights want
    assert run((1e3, 1e3)) == [(2, {"v100": 1.8, "k80": 0.0}), (2, {"v100": 0.0, "k80": 0.6})]


def test_hadar_runs_an_elastic_job_on_the_count_it_chose_and_rigid_jobs_as_they_ask() -> None:
    """2,160 steps: on 4 GPUs (3 steps/s) 720 s; rigid on its 1 GPU 2,160 s."""
    elastic = Job(job_id=0, job_type=TOY, scale_factor=1, total_steps=2160.0, gpu_range=(1, 4), restart_s=0.0)
    rigid = Job(job_id=0, job_type=TOY, scale_factor=1, total_steps=2160.0, restart_s=0.0)
    out = simulate([elastic], CLUSTER, TABLE, "hadar").summary
    assert out["avg_jct_s"] == pytest.approx(720.0)
    assert out["jct_bound_s"] == pytest.approx(720.0)  # the bound takes its best count (4 GPUs)
    assert out["ttd_lp_bound_s"] == pytest.approx(540.0)  # per GPU best on 1 (1 step/s): 2,160 / 4 GPUs
    out = simulate([rigid], CLUSTER, TABLE, "hadar").summary
    assert out["avg_jct_s"] == pytest.approx(2160.0) and out["jct_bound_s"] == pytest.approx(2160.0)
    # under another policy an elastic job runs rigid at its scale factor
    assert simulate([elastic], CLUSTER, TABLE, "fifo").summary["avg_jct_s"] == pytest.approx(2160.0)


def test_an_elastic_job_with_a_profile_is_credited_its_gain() -> None:
    """Bn infinite: r = s = 2 at batch 200 over M0 100; 4,320 reference steps = 2,160 steps: 720 s on 4 GPUs."""
    eff = Efficiency(100.0, 200.0, ((0.0, float("inf")),))
    job = Job(job_id=0, job_type=TOY, scale_factor=1, total_steps=4320.0, gpu_range=(1, 4), restart_s=0.0,
              efficiency=eff)
    assert simulate([job], CLUSTER, TABLE, "hadar").summary["avg_jct_s"] == pytest.approx(720.0)


def test_the_trace_columns_of_a_gpu_range(tmp_path) -> None:
    f = tmp_path / "jobs.csv"
    f.write_text(f"job_type,total_steps,scale_factor,min_gpus,max_gpus\n{TOY},10,2,1,4\n{TOY},10,2,,8\n{TOY},10,2,,\n")
    assert [j.gpu_range for j in read_jobs(f)] == [(1, 4), (1, 8), None]
    f.write_text(f"job_type,total_steps,scale_factor,min_gpus,max_gpus\n{TOY},10,2,3,4\n")
    with pytest.raises(InputError, match="want 1 <= min_gpus <= scale_factor <= max_gpus"):
        read_jobs(f)


def _import(tmp_path: Path, *extra: str) -> list[dict[str, str]]:
    out = tmp_path / "out"
    assert main(["trace", "import", "sia", str(DATA / "workloads" / "tiny.csv"), "--sia-dir", str(DATA),
                 "--out-dir", str(out), *extra]) == 0
    return list(csv.DictReader((out / "trace.csv").open()))


def test_sia_import_writes_each_jobs_profile(tmp_path) -> None:
    """The fixture's bert: M0 = 16, P = 100 then 200. At batch 64 epoch 0 has grad_var 6, grad_sqr 1: Bn = 16 x 6
    = 96, epoch 1 Bn = 16; at 32, grad_var 4 (interpolated): Bn 64. The steps a job needs alone at its batch
    are the rigid import's iterations."""
    rigid = _import(tmp_path)
    rows = _import(tmp_path, "--efficiency")
    assert [r["total_steps"] for r in rows] == ["200.0"] * 3
    assert [r["noise_scale"] for r in rows] == ["0.0:96.0 0.5:16.0", "0.0:64.0 0.5:16.0", "0.0:96.0 0.5:16.0"]
    assert {r["ref_batch"] for r in rows} == {"16"} and [r["batch"] for r in rows] == ["64", "32", "64"]
    jobs = read_jobs(tmp_path / "out" / "trace.csv")
    assert [j.table_steps for j in jobs] == pytest.approx([float(r["total_steps"]) for r in rigid], rel=1e-12)


def test_sia_import_scale_gpus_gives_a_range_and_a_rate_per_count(tmp_path) -> None:
    rows = _import(tmp_path, "--jobs", "scale-gpus")
    assert [(r["min_gpus"], r["max_gpus"]) for r in rows] == [("1", "4"), ("1", "8"), ("1", "1")]
    table = ThroughputTable.load(tmp_path / "out" / "throughputs.json")
    assert table.scale_factors("bert (batch size 64)") == (1, 2, 3, 4)
    assert table.scale_factors("bert (batch size 32)") == tuple(range(1, 9))
    assert [j.gpu_range for j in read_jobs(tmp_path / "out" / "trace.csv")] == [(1, 4), (1, 8), (1, 1)]


def test_counts_a_job_cannot_run_on_are_left_out() -> None:
    """No rate on 1 GPU (too big a batch for one): 2 GPUs and 3 (2's rate x 3/2) are worth 0.5 a GPU each
    (per step left), the tie to the smaller count; 2 -> 3 adds 0.5, 4 (the same rate as 3) nothing more: 3."""
    odd = "odd (batch size 400)"
    table = ThroughputTable.from_gavel_json({"v100": {f"('{odd}', {k})": {"null": r} for k, r in
                                                      ((1, 0.0), (2, 1.0), (4, 1.5))}})
    view = JobView(0, odd, 2, 1.0, 0.0, 1e4, 1e4, table.row(odd, 2, ("v100",)), gpu_range=(1, 4))
    assert [j.scale_factor for j in sized(SchedulerState(0.0, 360.0, CLUSTER, (view,), table))[0].jobs] == [3]


def test_the_cli_runs_scale_gpus_jobs_sooner_than_rigid_ones_under_hadar(tmp_path) -> None:
    """The fixture's three bert jobs on Sia's 64 GPUs: rigid, each holds its own count; scale-gpus, Hadar gives
    the idle GPUs to them, and the runs describe the same work (the profile's steps alone = the rigid ones)."""
    got = {}
    for kind in ("rigid", "scale-gpus"):
        out = tmp_path / kind
        assert main(["trace", "import", "sia", str(DATA / "workloads" / "tiny.csv"), "--sia-dir", str(DATA),
                     "--out-dir", str(out), "--jobs", kind]) == 0
        got[kind] = json.loads(hadar("simulate", "--trace", str(out / "trace.csv"), "--throughputs",
                                     str(out / "throughputs.json"), "--cluster", str(out / "cluster.yaml"),
                                     "--policy", "hadar", "--json").stdout)
    assert got["rigid"]["jobs_completed"] == got["scale-gpus"]["jobs_completed"] == 3
    assert got["scale-gpus"]["avg_jct_s"] < got["rigid"]["avg_jct_s"]
