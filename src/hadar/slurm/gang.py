"""Where a lease's Slurm job runs: its nodes, its tasks and GPUs per node, and the partition it goes to.

A lease is one task per node, with a CPU and a GPU per rank: one GPU, ``--nodes=1 --ntasks=1 --gres=gpu:1``.
A gang (a lease of W > 1 GPUs) on K nodes, each holding the same number k of the lease's GPUs, is
``--nodes=K --ntasks=K --ntasks-per-node=1 --cpus-per-task=k --gres=gpu:k`` with the nodes pinned
(``--nodelist``); the batch script starts the K tasks with ``srun``, and each forks its node's k ranks
(``hadar.slurm.lease``). Slurm's ``--gres`` counts per node, so a gang with different GPU counts on its
nodes cannot be asked for: such a lease fails with that reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hadar.model.cluster import Cluster


@dataclass(frozen=True, slots=True)
class Layout:
    """A lease's nodes (sorted by name) and how many of its GPUs (so tasks) each holds."""

    nodes: tuple[str, ...]
    per_node: int

    @property
    def world(self) -> int:
        return len(self.nodes) * self.per_node

    def options(self) -> list[str]:
        """sbatch's options for the layout: one task per node (it forks its ranks), a CPU per GPU."""
        k = len(self.nodes)
        return [f"--nodelist={','.join(self.nodes)}", f"--nodes={k}", f"--ntasks={k}", "--ntasks-per-node=1",
                f"--cpus-per-task={self.per_node}", f"--gres=gpu:{self.per_node}"]


def layout(cluster: Cluster, gpus: Sequence[int]) -> Layout | str:
    """The layout of a lease on ``gpus``, or why Slurm cannot run it."""
    count: dict[str, int] = {}
    for g in gpus:
        name = cluster.nodes[cluster.node_of[g]].name
        count[name] = count.get(name, 0) + 1
    nodes = tuple(sorted(count))
    if len(set(count.values())) > 1:
        spread = ", ".join(f"{n}: {count[n]}" for n in nodes)
        return f"a gang with different GPU counts per node ({spread}) cannot be asked of Slurm (--gres is per node)"
    return Layout(nodes, count[nodes[0]])


def partition(nodes: Sequence[str], default: Mapping[str, str], members: Mapping[str, Sequence[str]]) -> str:
    """The partition a job on ``nodes`` goes to: the first node's (``default``) when every node is in it, else the
    first of the first node's partitions that holds them all ("" when none: Slurm's default partition)."""
    first = default.get(nodes[0], "")
    if len(nodes) == 1 or not members:
        return first
    common = [p for p in members.get(nodes[0], ()) if all(p in members.get(n, ()) for n in nodes[1:])]
    if first and first in common:
        return first
    return common[0] if common else ""
