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

__all__ = ["replan_ranks", "replan_worker"]

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
    return replan_ranks(
        plan,
        (rank,),
        snapshot,
        request,
        exclude_failed_node=exclude_failed_node,
        max_options=max_options,
        cost_config=cost_config,
    )


def replan_ranks(
    plan: GangPlan,
    ranks_to_move: Sequence[int],
    snapshot: CapacitySnapshot,
    request: GangRequest,
    *,
    exclude_failed_node: bool = True,
    max_options: int = 5,
    cost_config: CostModelConfig = DEFAULT_COST,
) -> GangPlan | ReplacementOptions:
    """Return ``plan`` with every rank of ``ranks_to_move`` on a new node in the same domain, or
    the options of the first rank that finds none there.

    A rank's old node may have left the cluster (a node deleted under a running gang): it is
    then simply gone, and every rank the plan puts on a node the snapshot lacks must be among
    ``ranks_to_move`` (ValueError otherwise: a plan cannot keep a rank on no node). Ranks move in
    rank order, each taking one worker slot, so two moved ranks never share a slot.
    """
    topology = snapshot.topology
    count = len(plan.nodes_by_rank)
    moving = sorted(set(ranks_to_move))
    for rank in moving:
        if not 0 <= rank < count:
            raise ValueError(f"rank {rank} is not in plan {plan.job!r} of {count}")
    current: list[int | None] = [topology.index_of.get(name) for name in plan.nodes_by_rank]
    stranded = [r for r, i in enumerate(current) if i is None and r not in moving]
    if stranded:
        raise ValueError(
            f"plan {plan.job!r} keeps rank(s) {stranded} on node(s) no longer in the cluster: "
            "move them too"
        )
    failed = {rank: current[rank] for rank in moving}
    domain = _plan_domain(topology, plan)
    policy = request.policy
    slots = worker_slots(snapshot, request, use_degraded=policy.avoid_degraded != "avoid")
    if exclude_failed_node:
        for node in failed.values():
            if node is not None:
                slots[node] = 0
    penalised: set[int] = set()
    if policy.avoid_degraded == "penalize":
        penalised = set(degraded_indices(snapshot, request))
    for rank in moving:
        current[rank] = None  # its old node is not its ring neighbour's anchor any more
    names = topology.node_names
    reasons: list[str] = []
    for rank in moving:
        old = failed[rank]
        neighbours = _ring_neighbours(current, rank)

        def nearness(
            node: int, old: int | None = old, neighbours: list[int] = neighbours
        ) -> tuple[bool, int, int, int, int]:
            """Return the sort key of a candidate: healthy, near the ring, near the old node,
            tight."""
            to_ring = max((edge_hops(topology, node, n) for n in neighbours), default=0)
            return (
                node in penalised,
                to_ring,
                edge_hops(topology, node, old) if old is not None else 0,
                slots[node],
                node,
            )

        inside_of = domain
        home = _group_home(topology, request, current, rank)
        if home is not None and home.depth < inside_of.depth:
            inside_of = home  # a tensor-parallel group never leaves its NVLink domain
        inside = [i for i in range(inside_of.start, inside_of.end) if slots[i] > 0]
        if not inside:
            return _options_elsewhere(
                snapshot,
                request,
                plan,
                rank,
                ranks=current,
                domain=inside_of,
                slots=slots,
                nearness=nearness,
                max_options=max_options,
                cost_config=cost_config,
            )
        chosen = min(inside, key=nearness)
        slots[chosen] -= 1
        current[rank] = chosen
        was = repr(names[old]) if old is not None else f"{plan.nodes_by_rank[rank]!r} (gone)"
        reasons += [
            (
                f"rank {rank} moved from {was} to {names[chosen]!r} inside "
                f"{inside_of.level} {inside_of.name!r}"
            ),
            f"{nearness(chosen)[1]} hop(s) from its ring neighbours; the other ranks stay",
        ]
    placed = [i for i in current if i is not None]
    assert len(placed) == count  # every None was a moving rank, and each one found a node
    return assemble_plan(
        snapshot,
        request,
        placed,
        policy=plan.policy or POLICY_NAME,
        reasons=reasons,
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
    topology: ClusterTopology, request: GangRequest, ranks: Sequence[int | None], rank: int
) -> Domain | None:
    """Return the group-keeping domain the other placed ranks of ``rank``'s TP group are in, or
    None (no such level, or no other rank of the group has a node)."""
    quantum = request.workers_per_tp_group
    keep = group_depth(topology, quantum)
    if keep is None:
        return None
    first = rank - rank % quantum
    others = [
        node
        for k in range(first, min(first + quantum, len(ranks)))
        if k != rank and (node := ranks[k]) is not None
    ]
    if not others:
        return None
    return topology.domains[keep][topology.node_domain[keep][others[0]]]


def _ring_neighbours(ranks: Sequence[int | None], rank: int) -> list[int]:
    """Return the node indices of the ranks before and after ``rank`` in the ring (those that
    have a node)."""
    if len(ranks) < 2:
        return []
    return [n for n in (ranks[rank - 1], ranks[(rank + 1) % len(ranks)]) if n is not None]


def _options_elsewhere(
    snapshot: CapacitySnapshot,
    request: GangRequest,
    plan: GangPlan,
    rank: int,
    *,
    ranks: Sequence[int | None],
    domain: Domain,
    slots: Sequence[int],
    nearness: _Nearness,
    max_options: int,
    cost_config: CostModelConfig,
) -> ReplacementOptions:
    """Return the nearest nodes outside ``domain`` that could take rank ``rank``.

    ``ranks`` may lack a node for ranks still to be moved (None): an option is then scored as if
    they went where ``rank`` goes (the options are advice, not a plan).
    """
    topology = snapshot.topology
    others = [node for k, node in enumerate(ranks) if k != rank and node is not None]
    anchor = others[0] if others else domain.start
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
        new_ranks = [node if k == rank or r is None else r for k, r in enumerate(ranks)]
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
