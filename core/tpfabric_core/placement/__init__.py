"""The placement engine: one whole, topology-aware plan per tensor-parallel gang, or why not yet.

Pure and fast: an immutable :class:`ClusterTopology` built from node labels once per change of the
node set (levels configurable with :func:`parse_levels`), a cheap :class:`CapacitySnapshot` of
what is free beside it, and a :class:`GangRequest` (demands per worker from
:func:`pod_requests`, eligible nodes from :func:`node_matcher`) in; a :class:`GangPlan` (domain
and its labels, nodes by rank, hops, modelled cost, reasons) or an :class:`Unschedulable`
(per-domain shortfalls) out. Nothing here may import a Kubernetes client, kopf, an HTTP or gRPC
stack, or the API models (an adapter maps a TensorParallelJob onto a GangRequest), or do any I/O.
"""

from __future__ import annotations

from tpfabric_core.placement.cost import CostModelConfig, modelled_allreduce
from tpfabric_core.placement.planner import Reach, plan_gang, policy_reach
from tpfabric_core.placement.pod_fit import (
    NodeAffinityMatcher,
    format_amount,
    node_matcher,
    parse_quantity,
    pod_requests,
    resource_amount,
)
from tpfabric_core.placement.rank_order import order_ranks
from tpfabric_core.placement.replacement import replan_ranks, replan_worker
from tpfabric_core.placement.request import GangRequest, TopologyPolicy
from tpfabric_core.placement.results import (
    CollectiveCost,
    DomainShortfall,
    GangPlan,
    ReplacementOption,
    ReplacementOptions,
    ShortfallReason,
    Unschedulable,
)
from tpfabric_core.placement.snapshot import CapacitySnapshot, NodeState, Taint, Toleration
from tpfabric_core.placement.topology import (
    CLUSTER_LEVEL,
    DEFAULT_LEVELS,
    ClusterTopology,
    Domain,
    LevelSpec,
    parse_levels,
)

__all__ = [
    "CLUSTER_LEVEL",
    "DEFAULT_LEVELS",
    "CapacitySnapshot",
    "ClusterTopology",
    "CollectiveCost",
    "CostModelConfig",
    "Domain",
    "DomainShortfall",
    "GangPlan",
    "GangRequest",
    "LevelSpec",
    "NodeAffinityMatcher",
    "NodeState",
    "Reach",
    "ReplacementOption",
    "ReplacementOptions",
    "ShortfallReason",
    "Taint",
    "Toleration",
    "TopologyPolicy",
    "Unschedulable",
    "format_amount",
    "modelled_allreduce",
    "node_matcher",
    "order_ranks",
    "parse_levels",
    "parse_quantity",
    "plan_gang",
    "pod_requests",
    "policy_reach",
    "replan_ranks",
    "replan_worker",
    "resource_amount",
]
