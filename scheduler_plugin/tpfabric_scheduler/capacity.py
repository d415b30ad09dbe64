"""The placer's view of free capacity: one snapshot of the store per placement cycle.

``build_snapshot`` turns the store into the engine's :class:`CapacitySnapshot`: per node, every
resource's allocatable amount minus what bound pods use (kube-scheduler's arithmetic, kept by the
store) minus what planned ranks that are not bound yet hold (their reservations, for every
resource their pods request).

``planned_rings``, ``ring_flows`` and ``load_of`` turn the plans of the gangs that span domains
into the planner's :class:`UplinkLoad`: each such gang's rank-ordered ring, one flow per rail on
every edge between two domains, up the uplinks on one side and down those on the other (the
simulation's flows at full duty: the placer cannot see when a job's collectives run). A gang
that must span domains then goes first to children whose uplinks it does not push past
saturation.

Built under the store lock in O(nodes + planned ranks); the plans of a cycle are then computed
on it outside the lock. Pure over the store's records: this module must never do I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import compress
from operator import is_not, or_

from tpfabric_core import labels
from tpfabric_core.placement.cost import (
    DEFAULT_COST,
    CostModelConfig,
    UplinkLoad,
    edge_uplinks,
    ring_flows_per_edge,
)
from tpfabric_core.placement.snapshot import CapacitySnapshot, NodeState, Taint, TaintEffect
from tpfabric_core.placement.topology import ClusterTopology
from tpfabric_core.pod_wiring import GPU_RESOURCE
from tpfabric_scheduler.store import ClusterStore, JobRecord, NodeRecord

__all__ = [
    "PlannedRing",
    "Reservation",
    "Snapshots",
    "build_snapshot",
    "load_of",
    "planned_rings",
    "rank_demands",
    "reservations_by_job",
    "ring_flows",
]


@dataclass(frozen=True, slots=True)
class Reservation:
    """A planned rank that is not bound yet: it holds ``demand`` on ``node``."""

    job: str
    rank: int
    node: str
    demand: Mapping[str, int]


def rank_demands(store: ClusterStore, job: JobRecord) -> dict[str, int]:
    """Return what one worker of ``job`` requests (from a member pod, else from the spec)."""
    for pod in store.workers.get(job.key, {}).values():
        if pod.requests:
            return dict(pod.requests)
    if job.job is None:
        return {}
    spec = job.job.spec
    demand = {GPU_RESOURCE: spec.gpus_per_worker, "pods": 1}
    if spec.rdma.count and spec.rdma.resource_name:  # a Gang record's pods name their own
        demand[spec.rdma.resource_name] = spec.rdma.count
    return demand


def reservations_by_job(store: ClusterStore) -> dict[str, list[Reservation]]:
    """Return the reservations of every planned job, by job key (call with the lock held)."""
    held: dict[str, list[Reservation]] = {}
    demands: dict[str, dict[str, int]] = {}
    for node, holders in store.reservations().items():
        for key, rank in holders:
            job = store.jobs.get(key)
            if job is None:
                continue
            if key not in demands:
                demands[key] = rank_demands(store, job)
            held.setdefault(key, []).append(Reservation(key, rank, node, demands[key]))
    return held


#: a planned gang's ring: (job uid, its nodes in rank order, GPUs per worker)
PlannedRing = tuple[str, tuple[str, ...], int]


def planned_rings(store: ClusterStore) -> list[PlannedRing]:
    """Return the ring of every planned gang of more than one node (call with the lock held;
    O(planned jobs): the flows are worked out outside the lock, see :func:`ring_flows`)."""
    rings = []
    for _, job, placement in store.holding_plans():
        assert job.job is not None  # holding_plans yields valid jobs only
        nodes = tuple(placement.nodes)
        if len(set(nodes)) > 1:
            rings.append((job.uid, nodes, job.job.spec.gpus_per_worker))
    return rings


def ring_flows(
    topology: ClusterTopology, nodes: tuple[str, ...], gpus_per_worker: int
) -> dict[tuple[int, int], float]:
    """Return the flows one planned ring sends across uplinks: (depth, domain) -> flows.

    Empty when a node left the fabric (the plan is checked again before anything else uses it).
    """
    if any(n not in topology.index_of for n in nodes):
        return {}
    ring = [topology.index_of[n] for n in nodes]
    per_edge = ring_flows_per_edge(topology, gpus_per_worker)
    flows: dict[tuple[int, int], float] = {}
    for a, b in zip(ring, ring[1:] + ring[:1], strict=True):
        for uplink in (*edge_uplinks(topology, a, b), *edge_uplinks(topology, b, a)):
            flows[uplink] = flows.get(uplink, 0.0) + per_edge
    return flows


def load_of(
    topology: ClusterTopology,
    per_ring: list[dict[tuple[int, int], float]],
    config: CostModelConfig = DEFAULT_COST,
) -> UplinkLoad | None:
    """Return the load of the rings' flows summed (None when none crosses an uplink), against
    the uplink capacities of ``config``."""
    total: dict[tuple[int, int], float] = {}
    for flows in per_ring:
        for uplink, amount in flows.items():
            total[uplink] = total.get(uplink, 0.0) + amount
    return UplinkLoad.from_flows(topology, total, config) if total else None


def _effect(text: str) -> TaintEffect:
    if text in ("NoExecute", "PreferNoSchedule"):
        return text  # type: ignore[return-value]
    return "NoSchedule"


def _held(reservations: Mapping[str, list[Reservation]]) -> dict[str, dict[str, int]]:
    """Return node -> resource -> what the reservations hold there."""
    held: dict[str, dict[str, int]] = {}
    for items in reservations.values():
        for item in items:
            on_node = held.setdefault(item.node, {})
            for resource, amount in item.demand.items():
                on_node[resource] = on_node.get(resource, 0) + amount
    return held


def _node_state(
    name: str,
    node: NodeRecord,
    used: Mapping[str, int],
    taken: Mapping[str, int],
    silent: bool = False,
) -> NodeState:
    """Return ``node``'s free capacity: allocatable minus bound pods minus reservations.
    A node whose agent is ``silent`` is unknown: new plans treat it as degraded."""
    free = {
        resource: amount - used.get(resource, 0) - taken.get(resource, 0)
        for resource, amount in node.allocatable.items()
        if resource != GPU_RESOURCE
    }
    gpus = node.allocatable.get(GPU_RESOURCE, 0)
    return NodeState(
        name=name,
        free_gpus=gpus - used.get(GPU_RESOURCE, 0) - taken.get(GPU_RESOURCE, 0),
        free_rdma=0,
        ready=node.ready,
        schedulable=not node.unschedulable,
        taints=tuple(Taint(key=k, value=v, effect=_effect(e)) for k, v, e in node.taints),
        health="degraded" if silent or node.labels.get(labels.HEALTH) == "degraded" else "ok",
        free=free,
        allocatable_gpus=gpus,
    )


def build_snapshot(
    store: ClusterStore,
    topology: ClusterTopology,
    reservations: Mapping[str, list[Reservation]],
) -> CapacitySnapshot:
    """Return free capacity per node with every reservation in ``reservations`` taken off.

    GPUs are the snapshot's ``free_gpus``; every other resource (CPU in millicores, memory in
    bytes, pod slots, the RDMA resource, other extended resources) is in ``free_other``, so one
    snapshot serves gangs that ask for different RDMA resource names.
    """
    held = _held(reservations)
    silent = store.silent_nodes
    return CapacitySnapshot.from_node_states(
        topology,
        (
            _node_state(name, node, store.used.get(name, {}), held.get(name, {}), name in silent)
            for name, node in store.nodes.items()
        ),
    )


class Snapshots:
    """Builds each cycle's snapshot from the last one: only the nodes whose record, use or
    reservations changed, or whose agent fell silent or spoke again, are read again (the records
    and uses compared by identity, node by node, in C: O(nodes) pointer comparisons, not
    O(nodes x resources) arithmetic); a new topology builds it whole. Same answer as
    :func:`build_snapshot`."""

    def __init__(self) -> None:
        self._base: CapacitySnapshot | None = None
        #: per node index of the base's topology: the record and the use it was read from
        self._nodes: list[NodeRecord | None] = []
        self._used: list[dict[str, int] | None] = []
        #: node -> what reservations held there, and the silent nodes, as last read
        self._held: dict[str, dict[str, int]] = {}
        self._silent: frozenset[str] = frozenset()

    def build(
        self,
        store: ClusterStore,
        topology: ClusterTopology,
        reservations: Mapping[str, list[Reservation]],
    ) -> CapacitySnapshot:
        """Return this cycle's snapshot (a copy: the cycle's plans take from it)."""
        held = _held(reservations)
        names, silent = topology.node_names, store.silent_nodes
        nodes = list(map(store.nodes.get, names))
        used = list(map(store.used.get, names))
        base = self._base
        self._nodes, was_nodes, self._used, was_used = nodes, self._nodes, used, self._used
        self._held, was_held, self._silent, was_silent = held, self._held, silent, self._silent
        if base is None or base.topology is not topology:
            base = self._base = build_snapshot(store, topology, reservations)
            return base.copy()
        changed = set(
            compress(
                range(len(names)),
                map(or_, map(is_not, nodes, was_nodes), map(is_not, used, was_used)),
            )
        )
        changed.update(
            name_index
            for name in {*held, *was_held}
            if held.get(name) != was_held.get(name)
            and (name_index := topology.index_of.get(name)) is not None
        )
        changed.update(
            name_index
            for name in silent ^ was_silent
            if (name_index := topology.index_of.get(name)) is not None
        )
        for i in changed:
            name, node = names[i], nodes[i]
            if node is None:
                base.put_state(NodeState(name=name, free_gpus=0, free_rdma=0, ready=False))
            else:
                base.put_state(
                    _node_state(name, node, used[i] or {}, held.get(name) or {}, name in silent)
                )
        return base.copy()
