"""The simulated cluster: a generated fabric with a few seeded sick nodes, and how stranded it is.

This module must never place or simulate jobs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tpfabric_core import labels
from tpfabric_core.fabric_description import FabricDescription
from tpfabric_core.placement import CapacitySnapshot, ClusterTopology, NodeState

__all__ = ["Cluster", "build_cluster", "stranded_fraction"]


@dataclass
class Cluster:
    """The benchmark cluster: topology, the initial snapshot, its usable GPUs and GPUs per node."""

    name: str
    topology: ClusterTopology
    snapshot: CapacitySnapshot
    gpus: int
    gpus_per_node: int


def build_cluster(fabric: FabricDescription, seed: int, *, anomalies: bool = True) -> Cluster:
    """Return the cluster of ``fabric`` with seeded degraded, cordoned and miscabled nodes.

    About one node in 64 is degraded, one in 64 cordoned and one in 128 has a rail cabled to
    another leaf's rail switch (with ``anomalies``).
    """
    rng = random.Random(seed)  # noqa: S311 - a seeded simulation, not cryptography
    node_labels = {node.name: fabric.node_labels(node) for node in fabric.nodes}
    names = sorted(node_labels)
    per_node = fabric.node.gpus
    degraded: set[str] = set()
    cordoned: set[str] = set()
    if anomalies:
        n = len(names)
        sick = max(1, n // 64)
        picks = rng.sample(names, min(n, sick * 2 + max(1, n // 128)))
        degraded = set(picks[:sick])
        cordoned = set(picks[sick : sick * 2])
        for name in picks[sick * 2 :]:
            other = rng.choice(names)
            node_labels[name][labels.rail_key(3)] = node_labels[other][labels.LEAF] + "-rail-x"
    topology = ClusterTopology.from_node_labels(node_labels)
    states = [
        NodeState(
            name,
            free_gpus=per_node,
            free_rdma=fabric.node.rdma,
            schedulable=name not in cordoned,
            health="degraded" if name in degraded else "ok",
        )
        for name in names
    ]
    snapshot = CapacitySnapshot.from_node_states(topology, states)
    usable = per_node * (len(names) - len(cordoned))
    return Cluster(fabric.name, topology, snapshot, usable, per_node)


def stranded_fraction(cluster: Cluster, snapshot: CapacitySnapshot, median_workers: int) -> float:
    """Return the share of free healthy GPUs in leaf domains that cannot hold a median gang.

    A leaf's whole nodes free count as worker slots; cordoned, degraded and miscabled nodes are
    left out (their GPUs are held back by health, not stranded by placement: counting them
    would reward placers that use sick nodes).
    """
    total = 0
    stranded = 0
    anomaly = cluster.topology.rail_anomaly
    per_node = cluster.gpus_per_node
    free_gpus, schedulable, degraded = snapshot.free_gpus, snapshot.schedulable, snapshot.degraded
    for leaf in cluster.topology.domains[0]:
        gpus = 0
        slots = 0
        for i in range(leaf.start, leaf.end):
            if schedulable[i] and not degraded[i] and not anomaly[i]:
                gpus += free_gpus[i]
                slots += free_gpus[i] // per_node
        total += gpus
        if slots < median_workers:
            stranded += gpus
    return stranded / total if total else 0.0
