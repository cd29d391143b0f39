"""hadar.slurm without a Slurm: reading sinfo's and squeue's JSON, the lease files, gangs' layouts, no Ray imported."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from hadar.job.lease import LeaseOutcome, LeaseSpec
from hadar.slurm import gang, lease, script
from hadar.slurm.cluster import SlurmNode, gpus_of, read_nodes, to_cluster
from hadar.slurm.commands import SlurmError, parse_job


def _node(name: str, gres: str, state: str = "idle", flags: tuple[str, ...] = (), parts: tuple[str, ...] = ("gpu",)):
    return {"name": name, "gres": gres, "state": state, "state_flags": list(flags), "partitions": list(parts)}


def test_typed_gres_give_type_and_count() -> None:
    assert gpus_of("n", "gpu:v100:4") == ("v100", 4)
    assert gpus_of("n", "gpu:a100:8(S:0-1)") == ("a100", 8)
    assert gpus_of("n", "gpu:k80:2,gpu:k80:1") == ("k80", 3)
    assert gpus_of("n", "") is None
    assert gpus_of("n", "mps:100") is None


@pytest.mark.parametrize(("gres", "says"), [("gpu:4", "no type"), ("gpu:v100:2,gpu:k80:2", "several types")])
def test_untyped_or_mixed_gpus_are_errors(gres: str, says: str) -> None:
    with pytest.raises(SlurmError, match=says):
        gpus_of("n1", gres)


def test_nodes_of_a_partition_sorted_with_down_and_drained_nodes_down() -> None:
    recs = [_node("z", "gpu:k80:2", "down"), _node("a", "gpu:v100:2"), _node("m", "gpu:p100:1", flags=("DRAIN",)),
            _node("cpu", ""), _node("other", "gpu:v100:8", parts=("big",))]
    nodes = read_nodes(recs, "gpu")
    assert [(n.name, n.gpu_type, n.gpus, n.up) for n in nodes] == [
        ("a", "v100", 2, True), ("m", "p100", 1, False), ("z", "k80", 2, False)]
    cluster = to_cluster(nodes)
    assert cluster.down == frozenset({"m", "z"}) and cluster.num_gpus == 5
    assert cluster.count("v100") == 2 and cluster.count("k80") == 0  # down nodes leave the scheduling view
    assert [n.name for n in read_nodes(recs, None)] == ["a", "m", "other", "z"]


def test_unknown_partition_and_a_partition_without_gpus_are_errors() -> None:
    recs = [_node("a", "gpu:v100:2"), _node("c", "", parts=("cpu",))]
    with pytest.raises(SlurmError, match="unknown partition 'nope'"):
        read_nodes(recs, "nope")
    with pytest.raises(SlurmError, match="no node with typed GPUs"):
        read_nodes(recs, "cpu")


def test_squeue_records() -> None:
    st = parse_job({"job_id": 7, "name": "hadar-x", "job_state": "COMPLETED", "state_reason": "None", "nodes": "n1",
                    "exit_code": 0, "comment": "hadar:r:1:0:2", "restart_cnt": 0, "flags": ["COMPLETING"]})
    assert (st.job_id, st.state, st.completing, st.ended) == (7, "COMPLETED", True, False)
    st = parse_job({"job_id": 8, "job_state": "FAILED", "exit_code": {"status": "ERROR", "return_code": 1}})
    assert st.ended and st.exit_code == 1


def test_lease_files_round_trip(tmp_path) -> None:
    spec = LeaseSpec(job_id=3, entrypoint="x.py:train", rank=0, world=2, max_iterations=5, budget_s=0.0,
                     checkpoint=str(tmp_path / "c.pt"), search_path=("/a", "/b"), rendezvous=("127.0.0.1", 5))
    path = script.write_lease(tmp_path / "l", spec, 123.5, "cpu", python="/usr/bin/python3", path=("/src", "/a"))
    text = path.read_text()
    # a gang: srun starts its tasks, with the rendezvous from Slurm's environment
    assert "exec srun --kill-on-bad-exit=1 " in text and " /usr/bin/python3 -m hadar.slurm.lease " in text
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in text
    assert "MASTER_PORT=$((20000 + SLURM_JOB_ID % 12000))" in text
    assert "PYTHONPATH=/src:/a$" in text
    one = script.write_lease(tmp_path / "one", replace(spec, world=1), 1.0, "cpu", python="/usr/bin/python3")
    assert "exec /usr/bin/python3 -m hadar.slurm.lease" in one.read_text() and "srun" not in one.read_text()
    got, deadline, device = script.read_lease(tmp_path / "l" / script.SPEC)
    assert (got, deadline, device) == (spec, 123.5, "cpu")
    assert script.read_result(tmp_path / "l") is None
    script.write_result(tmp_path / "l", LeaseOutcome(ok=True, iterations=4, train_s=1.5), 10.0, 12.0)
    out, start, end = script.read_result(tmp_path / "l")
    assert (out.ok, out.iterations, out.train_s, start, end) == (True, 4, 1.5, 10.0, 12.0)
    # another node's ranks answer in their own file: the lease fails with their error if they failed
    script.write_result(tmp_path / "l", LeaseOutcome(ok=True, iterations=4), 10.0, 12.0, rank=2)
    assert script.read_result(tmp_path / "l")[0].ok
    script.write_result(tmp_path / "l", LeaseOutcome(error="rank 2 broke"), 10.0, 12.0, rank=2)
    out, _, _ = script.read_result(tmp_path / "l")
    assert (out.ok, out.error, out.iterations) == (False, "rank 2 broke", 4)
    script.write_lease(tmp_path / "l", spec, 123.5, "cpu")  # a new lease in the folder: no answer yet
    assert script.read_result(tmp_path / "l") is None and not list((tmp_path / "l").glob("rank-*.json"))


def test_a_gangs_layout_and_place_come_from_its_gpus_and_slurms_environment() -> None:
    cluster = to_cluster([SlurmNode("a", "v100", 2, True, "idle", ("gpu", "x")),
                          SlurmNode("b", "k80", 2, True, "idle", ("y", "gpu")),
                          SlurmNode("c", "k80", 1, True, "idle", ("y",))])
    one = gang.layout(cluster, (0, 1))
    assert one == gang.Layout(("a",), 2) and one.options() == [
        "--nodelist=a", "--nodes=1", "--ntasks=1", "--ntasks-per-node=1", "--cpus-per-task=2", "--gres=gpu:2"]
    two = gang.layout(cluster, (4, 2))
    assert two == gang.Layout(("b", "c"), 1) and two.world == 2 and "--nodelist=b,c" in two.options()
    assert "different GPU counts per node (a: 2, b: 1)" in str(gang.layout(cluster, (0, 1, 2)))
    # a job on several nodes goes to a partition holding them all
    members = {"a": ("gpu", "x"), "b": ("y", "gpu"), "c": ("y",)}
    assert gang.partition(("a", "b"), {"a": "x", "b": "y"}, members) == "gpu"
    assert gang.partition(("b", "c"), {"b": "y"}, members) == "y" and gang.partition(("a",), {"a": "x"}, members) == "x"
    assert gang.partition(("a", "c"), {"a": "x"}, members) == ""
    spec = LeaseSpec(job_id=3, entrypoint="x.py:train", rank=0, world=4, max_iterations=5, budget_s=0.0, checkpoint="c")
    env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "MASTER_ADDR": "n1", "MASTER_PORT": "20007"}
    assert lease.gang_place(spec, env) == (1, 2, ("n1", 20007))
    for bad, why in (({**env, "SLURM_NTASKS": "3"}, "task 1 of 3 for a gang of 4"),
                     ({k: v for k, v in env.items() if k != "MASTER_PORT"}, "not a task of an srun gang")):
        with pytest.raises(ValueError, match=why):
            lease.gang_place(spec, bad)
    assert script.rendezvous_port(12007) == 20007


def test_the_slurm_executor_never_imports_ray() -> None:
    code = "import sys, hadar.slurm.executor, hadar.slurm.lease; print('ray' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--partition", "gpu", "--jobs", "x.yaml"], "--partition applies to --slurm runs only"),
    (["--slurm", "--cluster", "v100=1", "--jobs", "x.yaml"], "--cluster does not apply to --slurm"),
    (["--slurm", "--address", "h:1", "--jobs", "x.yaml"], "--address does not apply to --slurm"),
    (["--slurm"], "--slurm needs --jobs FILE"),
])
def test_hadar_run_slurm_flags_checked_first(capsys, argv, message) -> None:
    from hadar.cli import main

    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


class _Sinfo:
    """A Slurm that answers sinfo only (the executor's construction asks nothing else)."""

    def waiting(self, retry_s: float) -> _Sinfo:
        return self

    def nodes(self) -> list[dict]:
        return [_node("a", "gpu:v100:2"), _node("b", "gpu:k80:1")]


class _Users:
    refreshed = 0

    def refresh(self) -> frozenset[str]:
        self.refreshed += 1
        return frozenset({"b"})


def test_the_slurm_executors_settings_are_construction_arguments(tmp_path) -> None:
    import os

    from hadar.clock import WallClock
    from hadar.runtime import emulation
    from hadar.slurm.executor import SlurmExecutor, SlurmOptions
    from hadar.slurm.serve import ServiceExecutor

    fake = _Sinfo()
    auto = SlurmExecutor(fake, WallClock(), SlurmOptions(tmp_path / "a", dilation="auto", round_base=7))  # type: ignore[arg-type]
    assert auto.dilation == emulation.dilation(3, os.cpu_count() or 1) and auto.round_base == 7
    plain = SlurmExecutor(fake, WallClock(), SlurmOptions(tmp_path / "p"))  # type: ignore[arg-type]
    assert plain.dilation is None and plain.round_base == 0
    users, feed = _Users(), object()
    served = ServiceExecutor(fake, WallClock(), SlurmOptions(tmp_path / "s", dilation=2.0),  # type: ignore[arg-type]
                             users=users, feed=feed)  # type: ignore[arg-type]
    assert served.users is users and served.feed is feed and served.dilation == 2.0
    assert users.refreshed == 0 and served.cluster.down == frozenset()  # the first sinfo read counts no user job
    assert served.read_cluster().down == frozenset({"b"}) and users.refreshed == 1  # later reads hold the users' nodes
