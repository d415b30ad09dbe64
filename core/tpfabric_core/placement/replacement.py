"""Re-place one failed worker of a running gang without moving the others.

The replacement goes into the plan's domain when any node there has room (nearest to the rank's
ring neighbours first, then best fit); otherwise the answer lists the nearest options elsewhere,
each with the level the gang would then span, so the caller can pick one or re-plan the whole
gang. Room means the same as for a whole plan: every demanded resource, the pod's node
selector/affinity, taints, health; and where the topology keeps tensor-parallel groups whole
(an NVLink level), the rank stays in the domain of that level its group's other ranks are in.
The snapshot must still hold the other ranks' allocations. This module must never move a
healthy rank or mutate the snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tpfabric_core.placement._assembly import assemble_plan, plan_hops
from tpfabric_core.placement._capacity import degraded_indices, group_depth, worker_slots
from tpfabric_core.placement.cost import DEFAULT_COST, CostModelConfig, edge_hops
from tpfabric_core.placement.pod_fit import format_amount
from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.results import GangPlan, ReplacementOption, ReplacementOptions
from tpfabric_core.placement.snapshot import CapacitySnapshot
from tpfabric_core.placement.topology import ClusterTopology, Domain

__all__ = ["replan_worker"]

_Nearness = Callable[[int], tuple[bool, int, int, int, int]]

POLICY_NAME = "tpfabric"


def replan_worker(
    plan: GangPlan,
    rank: int,
    snapshot: CapacitySnapshot,
    request: GangRequest,
    *,
    exclude_failed_node: bool = True,
    max_options: int = 5,
    cost_config: CostModelConfig = DEFAULT_COST,
) -> GangPlan | ReplacementOptions:
    """Return ``plan`` with rank ``rank`` on a new node in the same domain, or the options.

    The failed node itself is never chosen unless ``exclude_failed_node`` is false.
    """
    topology = snapshot.topology
    if not 0 <= rank < len(plan.nodes_by_rank):
        raise ValueError(f"rank {rank} is not in plan {plan.job!r} of {len(plan.nodes_by_rank)}")
    ranks = [topology.index_of[name] for name in plan.nodes_by_rank]
    failed = ranks[rank]
    domain = _plan_domain(topology, plan)
    policy = request.policy
    slots = worker_slots(snapshot, request, use_degraded=policy.avoid_degraded != "avoid")
    if exclude_failed_node:
        slots[failed] = 0
    penalised: set[int] = set()
    if policy.avoid_degraded == "penalize":
        penalised = set(degraded_indices(snapshot, request))
    neighbours = _ring_neighbours(ranks, rank)

    def nearness(node: int) -> tuple[bool, int, int, int, int]:
        """Return the sort key of a candidate: healthy, near the ring, near the old node, tight."""
        to_ring = max((edge_hops(topology, node, n) for n in neighbours), default=0)
        return (
            node in penalised,
            to_ring,
            edge_hops(topology, node, failed),
            slots[node],
            node,
        )

    home = _group_home(topology, request, ranks, rank)
    if home is not None and home.depth < domain.depth:
        domain = home  # a tensor-parallel group never leaves its NVLink domain
    inside = [i for i in range(domain.start, domain.end) if slots[i] > 0]
    if inside:
        chosen = min(inside, key=nearness)
        new_ranks = [*ranks[:rank], chosen, *ranks[rank + 1 :]]
        names = topology.node_names
        reasons = (
            (
                f"rank {rank} moved from {names[failed]!r} to {names[chosen]!r} inside "
                f"{domain.level} {domain.name!r}"
            ),
            f"{nearness(chosen)[1]} hop(s) from its ring neighbours; the other ranks stay",
        )
        return assemble_plan(
            snapshot,
            request,
            new_ranks,
            policy=plan.policy or POLICY_NAME,
            reasons=reasons,
            cost_config=cost_config,
        )
    return _options_elsewhere(
        snapshot,
        request,
        plan,
        rank,
        ranks=ranks,
        domain=domain,
        slots=slots,
        nearness=nearness,
        max_options=max_options,
        cost_config=cost_config,
    )


def _plan_domain(topology: ClusterTopology, plan: GangPlan) -> Domain:
    """Return the topology domain the plan names (level and path)."""
    depth = topology.depth_of(plan.level)
    for domain in topology.domains[depth]:
        if domain.path == plan.domain_path and (domain.labelled or not domain.path):
            return domain
    raise ValueError(f"plan {plan.job!r} names {plan.level} {plan.domain!r}, not in topology")


def _group_home(
    topology: ClusterTopology, request: GangRequest, ranks: Sequence[int], rank: int
) -> Domain | None:
    """Return the group-keeping domain the other ranks of ``rank``'s TP group are in, or None."""
    quantum = request.workers_per_tp_group
    keep = group_depth(topology, quantum)
    if keep is None:
        return None
    first = rank - rank % quantum
    others = [ranks[k] for k in range(first, min(first + quantum, len(ranks))) if k != rank]
    if not others:
        return None
    return topology.domains[keep][topology.node_domain[keep][others[0]]]


def _ring_neighbours(ranks: Sequence[int], rank: int) -> list[int]:
    """Return the node indices of the ranks before and after ``rank`` in the ring."""
    if len(ranks) < 2:
        return []
    return [ranks[rank - 1], ranks[(rank + 1) % len(ranks)]]


def _options_elsewhere(
    snapshot: CapacitySnapshot,
    request: GangRequest,
    plan: GangPlan,
    rank: int,
    *,
    ranks: list[int],
    domain: Domain,
    slots: Sequence[int],
    nearness: _Nearness,
    max_options: int,
    cost_config: CostModelConfig,
) -> ReplacementOptions:
    """Return the nearest nodes outside ``domain`` that could take rank ``rank``."""
    topology = snapshot.topology
    others = [node for k, node in enumerate(ranks) if k != rank] or [ranks[rank]]
    anchor = others[0]
    required_depth = (
        topology.depth_of(request.policy.level)
        if request.policy.mode == "required"
        else topology.cluster_depth
    )
    candidates = [i for i, s in enumerate(slots) if s > 0]

    def span_with(node: int) -> int:
        """Return the depth the gang would span with ``node`` in it."""
        return max(domain.depth, topology.common_depth(node, anchor))

    best = sorted(candidates, key=lambda i: (span_with(i), nearness(i)))[:max_options]
    options = []
    for node in best:
        new_ranks = [*ranks[:rank], node, *ranks[rank + 1 :]]
        trial = assemble_plan(snapshot, request, new_ranks, policy="", cost_config=cost_config)
        options.append(
            ReplacementOption(
                node=topology.node_names[node],
                level=trial.level,
                domain=trial.domain,
                hops=plan_hops(topology, new_ranks),
                modelled_s=trial.cost.best_s,
                within_required_level=span_with(node) <= required_depth,
            )
        )
    failed_name = plan.nodes_by_rank[rank]
    needs = [f"{request.gpus_per_worker} GPUs"]
    if request.rdma_per_worker:
        needs.append(f"{request.rdma_per_worker} RDMA devices")
    needs.extend(format_amount(name, amount) for name, amount in request.other_resources if amount)
    summary = (
        f"{plan.job}: no node in {domain.level} {domain.name!r} can take rank {rank} "
        f"(was on {failed_name!r}; needs {', '.join(needs)})"
    )
    if options:
        first = options[0]
        summary += (
            f"; nearest option {first.node!r} would make the gang span {first.level} "
            f"{first.domain!r}"
        )
        if not first.within_required_level:
            summary += f" (breaks the required {request.policy.level} level)"
        summary += "; or re-plan the whole gang"
    else:
        summary += "; no node anywhere has room: wait or re-plan the whole gang"
    return ReplacementOptions(
        job=plan.job,
        rank=rank,
        failed_node=failed_name,
        level=domain.level,
        domain=domain.name,
        options=tuple(options),
        summary=summary,
    )
