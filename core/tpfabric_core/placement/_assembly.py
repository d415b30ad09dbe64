"""Turn chosen nodes and a rank order into a :class:`GangPlan`: domain, hops, modelled cost.

Shared by the planner, the replacement planner and every baseline so that all of them are
described and scored the same way. This module must never choose nodes.
"""

from __future__ import annotations

from collections.abc import Sequence

from tpfabric_core.placement.cost import CostModelConfig, modelled_allreduce_by_index
from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.results import GangPlan
from tpfabric_core.placement.snapshot import CapacitySnapshot
from tpfabric_core.placement.topology import ClusterTopology, Domain


def plan_hops(topology: ClusterTopology, nodes: Sequence[int]) -> int:
    """Return the most switch hops between two of ``nodes`` on the same rail (0: one node)."""
    distinct = set(nodes)
    if len(distinct) <= 1:
        return 0
    depth = topology.span_depth(distinct)
    if depth > 0:
        return 2 * depth + 1
    rails = {topology.rail_switches[i] for i in distinct}
    return 1 if len(rails) == 1 else 3


def span_domain(topology: ClusterTopology, nodes: Sequence[int]) -> Domain:
    """Return the smallest labelled domain holding every node index in ``nodes``."""
    depth = topology.span_depth(nodes)
    return topology.domains[depth][topology.node_domain[depth][nodes[0]]]


def assemble_plan(
    snapshot: CapacitySnapshot,
    request: GangRequest,
    ranks: Sequence[int],
    *,
    policy: str,
    reasons: Sequence[str] = (),
    cost_config: CostModelConfig,
) -> GangPlan:
    """Return the plan placing rank ``k`` on node index ``ranks[k]``, described and scored."""
    topology = snapshot.topology
    domain = span_domain(topology, ranks)
    degraded = frozenset(i for i in set(ranks) if snapshot.degraded[i])
    cost = modelled_allreduce_by_index(
        topology, ranks, request.gpus_per_worker, degraded=degraded, config=cost_config
    )
    names = topology.node_names
    return GangPlan(
        job=request.name,
        policy=policy,
        level=domain.level,
        domain=domain.name,
        domain_path=domain.path,
        nodes_by_rank=tuple(names[i] for i in ranks),
        gpus_per_worker=request.gpus_per_worker,
        rdma_per_worker=request.rdma_per_worker,
        hops=plan_hops(topology, ranks),
        leaves_spanned=len({topology.node_domain[0][i] for i in ranks}),
        cost=cost,
        degraded_nodes=tuple(names[i] for i in sorted(degraded)),
        reasons=tuple(reasons),
        domain_labels=topology.domain_labels(domain),
        other_resources=tuple((name, amount) for name, amount in request.other_resources if amount),
    )
