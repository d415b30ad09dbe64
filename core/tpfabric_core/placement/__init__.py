"""The placement engine: one whole, topology-aware plan per tensor-parallel gang, or why not yet.

Pure and fast: an immutable :class:`ClusterTopology` built from node labels once per change of the
node set, a cheap :class:`CapacitySnapshot` of what is free beside it, and a :class:`GangRequest`
in; a :class:`GangPlan` (domain, nodes by rank, hops, modelled cost, reasons) or an
:class:`Unschedulable` (per-domain shortfalls) out. Nothing here may import a Kubernetes client,
kopf, an HTTP or gRPC stack, or the API models (an adapter maps a TensorParallelJob onto a
GangRequest), or do any I/O.
"""

from __future__ import annotations

from tpfabric_core.placement.cost import CostModelConfig, modelled_allreduce
from tpfabric_core.placement.planner import plan_gang
from tpfabric_core.placement.rank_order import order_ranks
from tpfabric_core.placement.replacement import replan_worker
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
    "NodeState",
    "ReplacementOption",
    "ReplacementOptions",
    "ShortfallReason",
    "Taint",
    "Toleration",
    "TopologyPolicy",
    "Unschedulable",
    "modelled_allreduce",
    "order_ranks",
    "plan_gang",
    "replan_worker",
]
