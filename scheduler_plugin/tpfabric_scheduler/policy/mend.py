"""Re-plan a rank, not the gang: a replacement worker, or a rank whose planned node is gone or
taken, moves to another node of the planned domain while every other rank stays.

``replan_ranks`` (the engine) looks only inside the planned domain, never on the node a worker
failed on. When no node there can take the rank and part of the gang runs or is on its way to
its nodes, the plan is dropped whole (:mod:`.drop`); when nothing of the gang runs, the caller
plans it afresh. A plan naming a node that left the cluster (a scale-down, a pulled server) is
mended at once instead of leaving the gang's next attempt gated on the old plan. Pure: works on
the cycle's snapshot, writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tpfabric_core.api.placement import StoredPlacement, ranks_moved, read_placement
from tpfabric_core.placement.replacement import replan_ranks
from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.results import CollectiveCost, GangPlan, ReplacementOptions
from tpfabric_core.placement.topology import CLUSTER_LEVEL, ClusterTopology
from tpfabric_core.pod_wiring import GPU_RESOURCE
from tpfabric_scheduler.facts import gone_ranks, in_flight, running
from tpfabric_scheduler.intent import PlacementIntent
from tpfabric_scheduler.policy.drop import drop_whole
from tpfabric_scheduler.store import PodRecord
from tpfabric_scheduler.work import Cycle, PlacementWork, PlacerMemory, Rules, gang_request_of

__all__ = ["Mend", "replace_gone", "replace_ranks"]


@dataclass(frozen=True)
class Mend:
    """What moving some ranks came to."""

    #: the write of the plan with its ranks moved, or the drop of the plan (None: neither)
    intent: PlacementIntent | None
    #: the plan with its ranks moved (None: no node of the domain could take them)
    placement: StoredPlacement | None


def replace_ranks(
    item: PlacementWork,
    cycle: Cycle,
    moves: list[PodRecord],
    nodes: list[str],
    replaced: dict[str, str],
    *,
    rules: Rules,
    memory: PlacerMemory,
) -> Mend:
    """Return the plan with new nodes for ``moves`` (and for ranks whose planned node left the
    cluster, with or without a pod to move), taken off the cycle's snapshot, with its write
    (``WorkerReplanned``); ``replaced``: rank -> uid of the pod each rank was moved for.

    When no node of the domain can take a rank and part of the gang runs (or is released and
    not bound yet), the plan is dropped; when nothing runs, nothing is written and the gang's
    reservations are given back to the snapshot, for the caller to plan it afresh.
    """
    placement = item.placement
    request = gang_request_of(item)
    topology = cycle.snapshot.topology
    moving = {p.worker_index for p in moves if p.worker_index is not None}
    gone = gone_ranks(nodes, topology)
    _give_back(cycle, item, moving)
    plan = _plan_of(placement, nodes, request, topology)
    try:
        answer = replan_ranks(plan, sorted(moving | gone), cycle.snapshot, request)
    except ValueError as err:  # the planned domain itself left the cluster
        why = f"{item.job.key}: {err}; the gang is planned again"
        answer = ReplacementOptions(item.job.key, min(gone, default=0), "", "", "", (), why)
    if isinstance(answer, ReplacementOptions):
        if running(item.members, topology) or in_flight(item.members):
            dropped = drop_whole(item, answer.summary, cycle.now, memory, reason="no_room")
            return Mend(dropped, None)
        _give_back(cycle, item, None if not moving else _others(item, moving))
        return Mend(None, None)
    demand = dict(request.other_resources)
    demand[GPU_RESOURCE] = request.gpus_per_worker
    uids = {p.worker_index: p.uid for p in moves}
    notes = []
    for rank in sorted(moving | gone):
        cycle.snapshot.take(answer.nodes_by_rank[rank], demand, GPU_RESOURCE)
        if rank in uids:
            replaced[str(rank)] = uids[rank]
        notes.append(f"rank {rank} -> {answer.nodes_by_rank[rank]}")
    updated = ranks_moved(placement, answer, replaced, notes, rules.clock())
    write = PlacementIntent(item.job, placement, updated, event="WorkerReplanned")
    return Mend(write, read_placement(updated))


def replace_gone(
    item: PlacementWork, cycle: Cycle, nodes: list[str], rules: Rules, memory: PlacerMemory
) -> PlacementIntent:
    """Return the move of the ranks whose planned node left the cluster (its intent says
    whether the plan still stands: ``placed``).

    A released worker whose node is gone only needs a new node in the plan (its affinity already
    holds it to the domain, and the extender steers it to its rank's node); when the domain has
    no room for it, the gang is dropped and planned again whole.
    """
    topology = cycle.snapshot.topology
    gone = gone_ranks(nodes, topology)
    moves = [
        p
        for p in item.members
        if p.worker_index in gone and p.node is None and not p.terminal and not p.deleting
    ]
    replaced = dict(item.placement.replaced_ranks)
    mend = replace_ranks(item, cycle, moves, nodes, replaced, rules=rules, memory=memory)
    if mend.placement is not None:
        assert mend.intent is not None
        return mend.intent
    if running(item.members, topology):  # replace_ranks dropped a plan that runs
        return mend.intent or PlacementIntent(item.job, placed=False)
    gone_names = sorted(nodes[r] for r in gone)
    dropped = drop_whole(
        item,
        f"{item.job.key}: planned node(s) {gone_names} left the cluster and the planned "
        "domain has no room for their ranks: the gang is planned again",
        cycle.now,
        memory,
        reason="node_gone",
        keep_wait=True,
    )
    # a rank on its way to its node made replace_ranks drop the plan already: it is dropped a
    # second time, for this reason, and its first wait kept
    return dropped if mend.intent is None else replace(mend.intent, then=dropped)


def _give_back(cycle: Cycle, item: PlacementWork, ranks: set[int] | None = None) -> None:
    """Add the job's reservations (of ``ranks``, default all) back to the cycle's snapshot."""
    for reservation in item.reservations:
        if ranks is None or reservation.rank in ranks:
            cycle.snapshot.give_back(reservation.node, reservation.demand, GPU_RESOURCE)


def _others(item: PlacementWork, ranks: set[int]) -> set[int]:
    """Return the ranks of ``item``'s reservations that are not in ``ranks``."""
    return {r.rank for r in item.reservations} - ranks


def _plan_of(
    placement: StoredPlacement, nodes: list[str], request: GangRequest, topology: ClusterTopology
) -> GangPlan:
    """Return the persisted plan as the engine's GangPlan (for ``replan_ranks``)."""
    level = placement.level or CLUSTER_LEVEL
    keys = {spec.name: spec.label_key for spec in topology.levels}
    labels = placement.domain_labels_or_level(keys.get) or {}
    # the API server returns maps with sorted keys: the path follows the levels, top down
    path: tuple[str, ...] = ()
    for spec in topology.levels:
        if spec.label_key not in labels:
            break
        path += (str(labels[spec.label_key]),)
    if not path and level != CLUSTER_LEVEL and nodes and nodes[0] in topology.index_of:
        path = topology.domain_of(nodes[0], level).path
    return GangPlan(
        job=request.name,
        policy="tpfabric",
        level=level,
        domain=placement.domain or CLUSTER_LEVEL,
        domain_path=path,
        domain_labels=tuple((str(k), str(v)) for k, v in labels.items()),
        nodes_by_rank=tuple(nodes),
        gpus_per_worker=request.gpus_per_worker,
        rdma_per_worker=request.rdma_per_worker,
        hops=placement.hops or 0,
        leaves_spanned=0,
        cost=CollectiveCost(0.0, 0.0, 0),
    )
