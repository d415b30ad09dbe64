"""Fluent test builders: ``a_cluster().with_leaves(4, nodes=4)``, ``a_job(workers=4)``.

Clusters are built the way the scheduler sees them: node labels in the canonical
``topology.tpfabric.io/`` scheme plus one NodeState per node. Every node has ``gpus`` GPUs and
``rails`` RDMA devices allocatable; ``busy``/``with_free_gpus`` only change what is free.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from tpfabric_core import labels
from tpfabric_core.placement import (
    DEFAULT_LEVELS,
    CapacitySnapshot,
    ClusterTopology,
    GangPlan,
    GangRequest,
    LevelSpec,
    NodeState,
    Taint,
    Toleration,
    TopologyPolicy,
    Unschedulable,
)
from tpfabric_core.placement.request import DegradedPolicy


def planned(result: GangPlan | Unschedulable) -> GangPlan:
    """Return ``result`` as a plan (the test fails with the why-not otherwise)."""
    assert isinstance(result, GangPlan), result.explain()
    return result


def waiting(result: GangPlan | Unschedulable) -> Unschedulable:
    """Return ``result`` as an Unschedulable (the test fails with the plan otherwise)."""
    assert isinstance(result, Unschedulable), result.explain()
    return result


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
    resources: dict[str, int] = field(default_factory=dict)
    dropped_labels: dict[str, tuple[str, ...]] = field(default_factory=dict)
    extra_labels: dict[str, dict[str, str]] = field(default_factory=dict)

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
        return self.states.get(node) or NodeState(
            node,
            free_gpus=self.gpus,
            free_rdma=self.rails,
            free=dict(self.resources),
            allocatable_gpus=self.gpus,
            allocatable_rdma=self.rails,
        )

    def with_resources(self, **free: int) -> ClusterBuilder:
        """Give every node these free amounts of other resources (``cpu`` in millicores)."""
        self.resources.update(free)
        for name, state in self.states.items():
            self.states[name] = replace(state, free={**state.free, **free})
        return self

    def with_free(self, node: str, resource: str, amount: int) -> ClusterBuilder:
        state = self._state(node)
        self.states[node] = replace(state, free={**state.free, resource: amount})
        return self

    def unlabelled(self, node: str, *keys: str) -> ClusterBuilder:
        """Drop the given level label keys (default: the leaf label) from ``node``."""
        self.dropped_labels[node] = keys or (labels.LEAF,)
        return self

    def labelled(self, node: str, key: str, value: str) -> ClusterBuilder:
        self.extra_labels.setdefault(node, {})[key] = value
        return self

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
                for key in self.dropped_labels.get(name, ()):
                    node.pop(key, None)
                node.update(self.extra_labels.get(name, {}))
                result[name] = node
        return result

    def topology(self, levels: tuple[LevelSpec, ...] = DEFAULT_LEVELS) -> ClusterTopology:
        return ClusterTopology.from_node_labels(self.node_labels(), levels)

    def snapshot(self, levels: tuple[LevelSpec, ...] = DEFAULT_LEVELS) -> CapacitySnapshot:
        topology = self.topology(levels)
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
    other_resources: dict[str, int] = field(default_factory=dict)
    eligible_nodes: frozenset[str] | None = None
    previous_nodes: tuple[str, ...] = ()

    def returning_from(self, *nodes: str) -> JobBuilder:
        """The gang's last plan had these nodes (a group made again)."""
        self.previous_nodes = nodes
        return self

    def needing(self, **resources: int) -> JobBuilder:
        """Each worker also needs these resources (``cpu`` in millicores, ``pods``, ...)."""
        self.other_resources.update(resources)
        return self

    def needing_resource(self, name: str, amount: int) -> JobBuilder:
        self.other_resources[name] = amount
        return self

    def only_on(self, *nodes: str) -> JobBuilder:
        self.eligible_nodes = frozenset(nodes)
        return self

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
            other_resources=tuple(sorted(self.other_resources.items())),
            eligible_nodes=self.eligible_nodes,
            previous_nodes=self.previous_nodes,
        )


def a_job(workers: int) -> JobBuilder:
    return JobBuilder(workers=workers)


CLIQUE_KEY = "nvidia.com/gpu.clique"
NVL72_LEVELS: tuple[LevelSpec, ...] = (
    *DEFAULT_LEVELS,
    LevelSpec("nvlink", CLIQUE_KEY, keep_tp_groups=True),
)
"""The canonical levels plus an NVLink clique level below the leaf."""


def nvl72_snapshot(
    racks: int,
    *,
    nodes_per_rack: int = 18,
    racks_per_leaf: int = 2,
    busy: Mapping[int, int] | None = None,
    levels: tuple[LevelSpec, ...] = NVL72_LEVELS,
) -> CapacitySnapshot:
    """Return a GB200 NVL72-like cluster: 4 GPUs per node, 18 nodes per NVLink clique (rack).

    ``busy``: rack -> how many of its nodes have no GPU free.
    """
    node_labels: dict[str, dict[str, str]] = {}
    states = []
    for rack in range(racks):
        leaf = rack // racks_per_leaf
        for k in range(nodes_per_rack):
            name = f"r{rack:02d}-n{k:02d}"
            node_labels[name] = {
                labels.BLOCK: "block-0",
                labels.SPINE: "spine-0",
                labels.LEAF: f"leaf-{leaf}",
                CLIQUE_KEY: f"clique-{rack}",
            }
            free = 0 if busy and k < busy.get(rack, 0) else 4
            states.append(
                NodeState(name, free_gpus=free, free_rdma=4, allocatable_gpus=4, allocatable_rdma=4)
            )
    topology = ClusterTopology.from_node_labels(node_labels, levels)
    return CapacitySnapshot.from_node_states(topology, states)
