"""hadar.slurm without a Slurm: sacct's typed records as GPU-seconds, users' marked jobs from squeue and where
they go, and the restart's lease folders (records shaped as Slurm 22.05 prints them)."""

from __future__ import annotations

from pathlib import Path

from hadar.model.cluster import Cluster, Node
from hadar.slurm import accounting, userjobs
from hadar.slurm.commands import SlurmError
from hadar.slurm.serve import next_round


def _sacct(job_id: int, elapsed: int, *gres: tuple[str, int]) -> dict:
    alloc = [{"type": "cpu", "name": None, "id": 1, "count": 1}, {"type": "gres", "name": "gpu", "id": 1001,
                                                                   "count": sum(n for _, n in gres)}]
    alloc += [{"type": "gres", "name": name, "id": 1002, "count": n} for name, n in gres]
    return {"job_id": job_id, "nodes": "n1", "state": {"current": "COMPLETED", "reason": "None"},
            "time": {"elapsed": elapsed, "end": 1000 + elapsed}, "tres": {"allocated": alloc, "requested": []}}


def test_sacct_records_give_gpu_seconds_per_job_and_type_leaving_the_untyped_total_out() -> None:
    job_of = {11: 0, 12: 0, 13: 1}
    usage = [u for rec in (_sacct(11, 30, ("gpu:k80", 2)), _sacct(12, 10, ("gpu:v100", 1)), _sacct(13, 7),
                           _sacct(99, 5, ("gpu:k80", 1))) for u in accounting.parse(rec, job_of)]
    assert [(u.slurm_job, u.job, u.gpu_type, u.gpus, u.gpu_s) for u in usage] == [
        (11, 0, "k80", 2, 60.0), (12, 0, "v100", 1, 10.0), (99, -1, "k80", 1, 5.0)]  # 13 held no typed GPU
    assert accounting.by_job(usage) == {"0": {"k80": 60.0, "v100": 10.0}}  # 99 is no lease of this run


def _squeue(job_id: int, comment: str, *, priority: int = 0, reason: str = "JobHeldUser", state: str = "PENDING",
            tres: str = "gres:gpu:1", nodes: str = "", partition: str = "gpu") -> dict:
    return {"job_id": job_id, "comment": comment, "priority": priority, "state_reason": reason, "job_state": state,
            "tres_per_node": tres, "tres_per_job": "", "nodes": nodes, "required_nodes": "", "partition": partition,
            "user_name": "ann", "start_time": 0, "end_time": 0, "flags": []}


def test_only_marked_gpu_jobs_are_users_jobs_for_hadar() -> None:
    held = userjobs.parse(_squeue(1, "hadar"))
    assert held is not None and held.held and held.gpus == 1 and not held.checkpoints and held.node == ""
    sig = userjobs.parse(_squeue(2, "hadar:sigterm", tres="", priority=0) | {"tres_per_job": "gres:gpu:k80:2"})
    assert sig is not None and sig.gpus == 2 and sig.checkpoints
    assert userjobs.parse(_squeue(3, "hadar", tres="")) is None  # no GPU asked for
    assert userjobs.parse(_squeue(4, "")) is None
    assert userjobs.parse(_squeue(5, "hadar:0123abcd:1:0:2")) is None  # hadar's own lease
    running = userjobs.parse(_squeue(6, "hadar", priority=7, reason="None", state="RUNNING", nodes="b"))
    assert running is not None and not running.held and userjobs.busy([held, running]) == frozenset({"b"})


def test_a_users_job_goes_to_the_slowest_free_type_that_fits_then_the_smallest_node() -> None:
    cluster = Cluster((Node("a", "v100", 2), Node("b", "k80", 1), Node("c", "k80", 2), Node("d", "p100", 4)))
    slowness = {"v100": 1.0, "p100": 0.6, "k80": 0.3}.__getitem__
    one = userjobs.parse(_squeue(1, "hadar"))
    two = userjobs.parse(_squeue(2, "hadar", tres="gres:gpu:2"))
    assert one is not None and two is not None
    members = {n.name: ("gpu",) for n in cluster.nodes}
    assert userjobs.choose(one, cluster, frozenset(), slowness, members) == "b"
    assert userjobs.choose(two, cluster, frozenset(), slowness, members) == "c"
    assert userjobs.choose(two, cluster, frozenset({"c"}), slowness, members) == "d"
    assert userjobs.choose(two, cluster.with_down(frozenset({"c", "d"})), frozenset(), slowness, members) == "a"
    assert userjobs.choose(one, cluster, frozenset(), slowness, {**members, "b": ("other",)}) == "c"
    big = userjobs.parse(_squeue(3, "hadar", tres="gres:gpu:8"))
    assert big is not None and userjobs.choose(big, cluster, frozenset(), slowness, members) is None


def test_a_restart_numbers_its_leases_after_the_folders_of_its_run(tmp_path: Path) -> None:
    leases = tmp_path / "leases"
    assert next_round(leases, "0123abcd" * 4) == 0
    for name in ("0123abcd-j1-c0-r3-train", "0123abcd-j2-c1-r11-train", "ffffffff-j1-c0-r40-train", "notes"):
        (leases / name).mkdir(parents=True)
    assert next_round(leases, "0123abcd" * 4) == 12


class _FakeSacct:
    """sacct's answers, in turn (a dict: its JSON; a string: the error it prints)."""

    def __init__(self, *answers: dict | str) -> None:
        self.answers, self.asked = list(answers), []

    def json(self, *cmd: str) -> dict:
        self.asked.append(cmd)
        answer = self.answers.pop(0)
        if isinstance(answer, str):
            raise SlurmError(f"sacct: {answer}")
        return answer


def _lease(job_id: int, name: str, elapsed: int, end: int, state: str = "COMPLETED") -> dict:
    return _sacct(job_id, elapsed, ("gpu:k80", 1)) | {"name": name, "time": {"elapsed": elapsed, "end": end},
                                                       "state": {"current": state, "reason": "None"}}


def test_the_feed_hands_each_ended_lease_of_its_run_on_once_and_reads_only_while_something_is_to_read() -> None:
    run = "abcdef0123456789"
    kept: list[tuple[list[accounting.Accounted], float]] = []
    first = {"jobs": [_lease(5, "hadar-abcdef01-j2-c0-r0", 12, 2000), _lease(6, "hadar-abcdef01-j3-c0-r0", 3, 0,
                                                                            "RUNNING"),
                      _lease(7, "hadar-99999999-j2-c0-r0", 9, 2000), _lease(8, "train.sh", 9, 2000)]}
    second = {"jobs": [first["jobs"][0], _lease(6, "hadar-abcdef01-j3-c0-r0", 8, 2100)]}
    slurm = _FakeSacct(first, second, "Nothing found with query")
    feed = accounting.SacctFeed(slurm, run, 1000.0, lambda rows, since: kept.append((rows, since)), poll_s=0.0)
    assert feed.poll([5, 6]) == 1  # 6 still runs; 7 is another run's, 8 no lease of hadar's
    assert [(a.usage.slurm_job, a.usage.job, a.usage.gpu_type, a.usage.gpu_s, a.end_at) for a in kept[0][0]] == [
        (5, 2, "k80", 12.0, 2000.0)]
    assert slurm.asked[0][-1] == f"--starttime={accounting.local_time(1000.0 - accounting.MARGIN_S)}"
    assert feed.poll([5, 6]) == 1 and [a.usage.slurm_job for a in kept[1][0]] == [6]  # 5 again: not handed on
    assert feed.poll([5, 6]) == 0 and len(slurm.asked) == 2  # everything ended and handed on: no read
    assert feed.poll([5, 6, 9]) == 0 and len(slurm.asked) == 3 and not feed.off  # a window without jobs
    assert kept[1][1] < kept[2][1] and kept[2][0] == []  # the window moves on with each read


def test_without_accounting_the_feed_stops_reading() -> None:
    slurm = _FakeSacct("Slurm accounting storage is disabled")
    feed = accounting.SacctFeed(slurm, "abcdef01", 0.0, lambda rows, since: None, poll_s=0.0)
    assert feed.poll([1]) == 0 and feed.off == "sacct: Slurm accounting storage is disabled"
    assert feed.poll([1, 2]) == 0 and len(slurm.asked) == 1
