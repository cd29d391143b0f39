"""Elastic jobs (issue 40, item 3): a GPU-count range per job, Hadar sizing it by goodput each round (every
change paying the restart), and ``hadar trace import sia --efficiency / --jobs scale-gpus``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from hadar.cli import main
from hadar.config import parse_cluster
from hadar.errors import InputError
from hadar.model.efficiency import Efficiency
from hadar.model.job import Job
from hadar.model.state import JobView, SchedulerState
from hadar.model.throughput import ThroughputTable
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
          sf: int = 1) -> JobView:
    return JobView(job_id, TOY, sf, 1.0, 0.0, 1e4, 1e4, TABLE.row(TOY, sf, ("v100",)),
                   previous_gpus=tuple(range(ran)), restart_s=restart_s, gpu_range=gpu_range)


def _counts(*views: JobView) -> list[int]:
    state = SchedulerState(0.0, 360.0, CLUSTER, views, TABLE)
    return [j.scale_factor for j in sized(state).jobs]


def test_spare_gpus_go_to_the_most_speedup_per_gpu() -> None:
    # alone: from 1 GPU, 3 GPUs add 1.7 / 2 = 0.85 a GPU (2: 0.8, 4: 0.67); then 3 -> 4 adds 0.3: all 4
    assert _counts(_view(0)) == [4]
    # two alike: 2 spare GPUs; the first job's jump to 3 (0.85 a GPU) wins the tie with the second's
    assert _counts(_view(0), _view(1)) == [3, 1]
    # a rigid job asking for 2 leaves 1 spare: the elastic job goes to 2
    rigid = _view(1, gpu_range=None, sf=2)
    assert _counts(_view(0), rigid) == [2, 2]
    # rigid jobs asking for the whole cluster: the elastic job at its least
    assert _counts(_view(0), _view(1, gpu_range=None, sf=4)) == [1, 4]


def test_a_move_must_be_worth_its_restart() -> None:
    # ran on 1 GPU, a 180 s restore in a 360 s round halves any other count's goodput: 4 GPUs = 1.5, still worth it
    assert _counts(_view(0, ran=1, restart_s=180.0)) == [4]
    # a 300 s restore leaves a sixth: 4 GPUs are worth 0.5 of staying on 1: it stays
    assert _counts(_view(0, ran=1, restart_s=300.0)) == [1]
    # a job that never ran pays its restore anyway: no discount
    assert _counts(_view(0, restart_s=300.0)) == [4]


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
    """No rate on 1 GPU (too big a batch for one): the least count it can run on is 2; 3 GPUs (2's rate x 3/2)
    add 0.5 a GPU, 4 (the same rate as 3) nothing more: 3."""
    odd = "odd (batch size 400)"
    table = ThroughputTable.from_gavel_json({"v100": {f"('{odd}', {k})": {"null": r} for k, r in
                                                      ((1, 0.0), (2, 1.0), (4, 1.5))}})
    view = JobView(0, odd, 2, 1.0, 0.0, 1e4, 1e4, table.row(odd, 2, ("v100",)), gpu_range=(1, 4))
    assert [j.scale_factor for j in sized(SchedulerState(0.0, 360.0, CLUSTER, (view,), table)).jobs] == [3]


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
