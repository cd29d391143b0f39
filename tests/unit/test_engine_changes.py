"""The engine under change: nodes going down and joining, cancellations, a live job source."""

from __future__ import annotations

import pytest

from hadar.build import policy_for_run, wire
from hadar.clock import VirtualClock
from hadar.config import parse_cluster
from hadar.model.cluster import Cluster, Node
from hadar.model.job import Job
from hadar.model.plan import NodeChange, RoundPlan, RoundReport
from hadar.model.throughput import ThroughputTable
from hadar.sim.executor import SimulatedExecutor
from hadar.sources import Workload

R50 = "ResNet-50 (batch size 64)"


class FlakyNodes(SimulatedExecutor):
    """Simulated executor whose cluster view changes after given rounds: {round: Cluster}."""

    def __init__(self, cluster: Cluster, table: ThroughputTable, changes: dict[int, Cluster]) -> None:
        super().__init__(cluster, table)
        self.changes, self.rounds, self.plans = changes, 0, []

    def run_round(self, plan: RoundPlan) -> RoundReport:
        self.rounds += 1
        self.plans.append(plan)
        return super().run_round(plan)

    def cluster_view(self) -> NodeChange | None:
        view = self.changes.get(self.rounds)
        if view is None:
            return None
        self.cluster = view
        return NodeChange(view)


def test_cluster_view_leaves_down_nodes_out_but_keeps_gpu_ids():
    c = Cluster((Node("a", "v100", 2), Node("b", "v100", 1), Node("c", "k80", 1)))
    d = c.with_down({"a"})
    assert d.num_gpus == 4 and d.gpu_type_of == c.gpu_type_of
    assert d.count("v100") == 1 and d.gpus_by_type["v100"] == (2,) and d.up_gpus == (2, 3)
    assert d.nodes_of_type("v100") == (1,) and d.up_nodes == (1, 2)
    j = d.with_node(Node("e", "a100", 2))
    assert j.num_gpus == 6 and j.gpus_by_type["a100"] == (4, 5) and j.down == frozenset({"a"})


@pytest.mark.parametrize("policy", ["max_min_fairness_perf", "hadar", "hadare", "yarn_cs", "max_min_fairness"])
def test_jobs_move_off_a_node_that_goes_down_and_onto_one_that_joins(table, policy):
    cluster = parse_cluster("v100=2,p100=2,k80=2", gpus_per_node=2)
    names = [n.name for n in cluster.nodes]
    down = cluster.with_down({names[0]})  # the V100 node dies after round 2
    back = down.with_node(Node("v100-new", "v100", 2))  # a new V100 node joins after round 5
    ex = FlakyNodes(cluster, table, {2: down, 5: back})
    jobs = [Job(i, R50, 1, 30_000 + 1000 * i) for i in range(5)]
    run = policy_for_run(policy)
    engine, ledger = wire(run.policy, cluster, table, ex, VirtualClock(), round_s=360.0)
    engine.run(Workload(jobs))
    assert all(r.finish_s is not None for r in ledger.records.values())
    for k, plan in enumerate(ex.plans, start=1):
        used = [g for lease in plan.leases for g in lease.gpus]
        if k >= 3:
            assert not {0, 1} & set(used), (k, plan)  # nothing on the dead node after it went down
        if k <= 5:
            assert not {6, 7} & set(used)  # nor on the new node before it joined
    assert any({6, 7} & {g for lease in p.leases for g in lease.gpus} for p in ex.plans[5:])


def test_cancel_ends_a_job_at_the_next_boundary(table):
    class Cancelling(Workload):
        def __init__(self, jobs):
            super().__init__(jobs)
            self.calls = 0

        def pop_cancelled(self) -> list[int]:
            self.calls += 1
            return [1] if self.calls == 3 else []

    cluster = parse_cluster("1:0:0")
    ex = SimulatedExecutor(cluster, table)
    engine, ledger = wire(policy_for_run("max_min_fairness_perf").policy, cluster, table, ex, VirtualClock(),
                          round_s=360.0)
    engine.run(Cancelling([Job(0, R50, 1, 20_000), Job(1, R50, 1, 20_000)]))
    assert ledger.records[1].status == "cancelled" and ledger.records[1].finish_s is None
    assert ledger.records[0].status == "done"
    assert ledger.ended() == 2


def test_a_live_source_keeps_the_engine_waiting_for_submissions(table):
    class Live(Workload):
        """Jobs come in twice; the source is live (wait() is True) until the second batch is in."""

        def __init__(self):
            super().__init__([])
            self.pending = [Job(0, R50, 1, 500)]
            self.later = [Job(1, R50, 1, 500, arrival_s=4000.0)]
            self.waits = 0

        def pop_arrived(self, t: float) -> list[Job]:
            out = [j for j in self.pending if j.arrival_s <= t]
            self.pending = [j for j in self.pending if j.arrival_s > t]
            self.jobs.extend(out)
            return out

        def next_arrival(self) -> float | None:
            return min((j.arrival_s for j in self.pending), default=None)

        def wait(self, timeout_s: float) -> bool:
            self.waits += 1
            if self.later:
                self.pending += self.later
                self.later = []
            return True

        def done(self, finished: int) -> bool:
            return finished >= 2

    cluster = parse_cluster("1:0:0")
    ex = SimulatedExecutor(cluster, table)
    engine, ledger = wire(policy_for_run("max_min_fairness_perf").policy, cluster, table, ex, VirtualClock(),
                          round_s=360.0)
    src = Live()
    engine.run(src)
    assert src.waits >= 1 and ledger.ended() == 2
    assert ledger.records[1].first_start_s == pytest.approx(4000.0)
