"""Fluent test builders: ``a_cluster().with_leaves(4, nodes=4)``, ``a_job(workers=4)``.

Clusters are built the way the scheduler sees them: node labels in the canonical
``topology.tpfabric.io/`` scheme plus one NodeState per node.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tpfabric_core import labels
from tpfabric_core.placement import (
    CapacitySnapshot,
    ClusterTopology,
    GangRequest,
    NodeState,
    Taint,
    Toleration,
    TopologyPolicy,
)
from tpfabric_core.placement.request import DegradedPolicy


@dataclass
class ClusterBuilder:
    """A rail-optimized cluster: leaves of nodes, grouped into spines and blocks."""

    leaves: int = 1
    nodes_per_leaf: int = 4
    leaves_per_spine: int = 2
    spines_per_block: int = 2
    rails: int = 8
    gpus: int = 8
    states: dict[str, NodeState] = field(default_factory=dict)
    rail_overrides: dict[tuple[str, int], str] = field(default_factory=dict)

    def with_leaves(
        self, count: int, *, nodes: int = 4, per_spine: int = 2, spines_per_block: int = 2
    ) -> ClusterBuilder:
        self.leaves = count
        self.nodes_per_leaf = nodes
        self.leaves_per_spine = per_spine
        self.spines_per_block = spines_per_block
        return self

    def node_names(self) -> list[str]:
        return [
            node_name(leaf, k) for leaf in range(self.leaves) for k in range(self.nodes_per_leaf)
        ]

    def _state(self, node: str) -> NodeState:
        return self.states.get(node) or NodeState(node, free_gpus=self.gpus, free_rdma=self.rails)

    def with_free_gpus(self, node: str, gpus: int) -> ClusterBuilder:
        self.states[node] = replace(self._state(node), free_gpus=gpus)
        return self

    def with_free_rdma(self, node: str, rdma: int) -> ClusterBuilder:
        self.states[node] = replace(self._state(node), free_rdma=rdma)
        return self

    def busy(self, *nodes: str) -> ClusterBuilder:
        for node in nodes:
            self.with_free_gpus(node, 0)
        return self

    def busy_leaf(self, leaf: int, nodes: int | None = None) -> ClusterBuilder:
        count = self.nodes_per_leaf if nodes is None else nodes
        return self.busy(*(node_name(leaf, k) for k in range(count)))

    def cordoned(self, node: str) -> ClusterBuilder:
        self.states[node] = replace(self._state(node), schedulable=False)
        return self

    def not_ready(self, node: str) -> ClusterBuilder:
        self.states[node] = replace(self._state(node), ready=False)
        return self

    def tainted(self, node: str, taint: Taint) -> ClusterBuilder:
        state = self._state(node)
        self.states[node] = replace(state, taints=(*state.taints, taint))
        return self

    def degraded(self, node: str) -> ClusterBuilder:
        self.states[node] = replace(self._state(node), health="degraded")
        return self

    def miscabled(self, node: str, rail: int, to_leaf: int) -> ClusterBuilder:
        self.rail_overrides[(node, rail)] = f"leaf-{to_leaf}-rail{rail}"
        return self

    def node_labels(self) -> dict[str, dict[str, str]]:
        result: dict[str, dict[str, str]] = {}
        for leaf in range(self.leaves):
            spine = leaf // self.leaves_per_spine
            block = spine // self.spines_per_block
            for k in range(self.nodes_per_leaf):
                name = node_name(leaf, k)
                node = {
                    labels.BLOCK: f"block-{block}",
                    labels.SPINE: f"spine-{spine}",
                    labels.LEAF: f"leaf-{leaf}",
                    labels.HEALTH: "ok",
                }
                for rail in range(self.rails):
                    node[labels.rail_key(rail)] = self.rail_overrides.get(
                        (name, rail), f"leaf-{leaf}-rail{rail}"
                    )
                result[name] = node
        return result

    def topology(self) -> ClusterTopology:
        return ClusterTopology.from_node_labels(self.node_labels())

    def snapshot(self) -> CapacitySnapshot:
        topology = self.topology()
        return CapacitySnapshot.from_node_states(
            topology, [self._state(name) for name in self.node_names()]
        )


def node_name(leaf: int, k: int) -> str:
    return f"l{leaf:02d}-n{k:02d}"


def a_cluster() -> ClusterBuilder:
    return ClusterBuilder()


@dataclass
class JobBuilder:
    """A gang request with a fluent policy."""

    workers: int
    name: str = "job"
    gpus_per_worker: int = 8
    rdma_per_worker: int = 8
    tp_size: int = 8
    pp_size: int = 1
    tolerations: tuple[Toleration, ...] = ()
    policy: TopologyPolicy = field(default_factory=TopologyPolicy)

    def named(self, name: str) -> JobBuilder:
        self.name = name
        return self

    def with_gpus(self, gpus: int, rdma: int | None = None) -> JobBuilder:
        self.gpus_per_worker = gpus
        self.rdma_per_worker = gpus if rdma is None else rdma
        if self.tp_size > gpus and self.tp_size % gpus:
            self.tp_size = gpus
        return self

    def parallel(self, tp: int, pp: int = 1) -> JobBuilder:
        self.tp_size = tp
        self.pp_size = pp
        return self

    def tolerating(self, toleration: Toleration) -> JobBuilder:
        self.tolerations = (*self.tolerations, toleration)
        return self

    def requiring(self, level: str) -> JobBuilder:
        self.policy = replace(self.policy, mode="required", level=level)
        return self

    def preferring(self, level: str, max_wait: float | None = None) -> JobBuilder:
        self.policy = replace(self.policy, mode="preferred", level=level, max_wait_seconds=max_wait)
        return self

    def degraded_nodes(self, handling: DegradedPolicy) -> JobBuilder:
        self.policy = replace(self.policy, avoid_degraded=handling)
        return self

    def rail_aligned(self, aligned: bool) -> JobBuilder:
        self.policy = replace(self.policy, rail_aligned=aligned)
        return self

    def build(self) -> GangRequest:
        return GangRequest(
            name=self.name,
            workers=self.workers,
            gpus_per_worker=self.gpus_per_worker,
            rdma_per_worker=self.rdma_per_worker,
            tp_size=self.tp_size,
            pp_size=self.pp_size,
            tolerations=self.tolerations,
            policy=self.policy,
        )


def a_job(workers: int) -> JobBuilder:
    return JobBuilder(workers=workers)
