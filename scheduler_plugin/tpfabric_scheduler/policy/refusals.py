"""Plans kube-scheduler can bind: the nodes its own filters refuse a gang's workers.

The engine models what puts a gang one worker per node (a host port, required pod anti-affinity
to the gang's own workers) and leaves out nodes whose host ports are taken. What it does not
model (pod affinity to other tenants' pods, volumes) kube-scheduler refuses: a released worker
it tried and could not bind on a planned node that had room is recorded in
``status.placement.refusedNodes`` with kube-scheduler's words when the bind bound drops the plan
(:mod:`.bind_bound`), and the gang is planned without that node while the refusal lasts
(:data:`~tpfabric_core.api.placement.REFUSAL_SECONDS`; every write carries it over), never onto
the same nodes again and again. Pure: reads a view of the store, writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from tpfabric_core.api.models import RefusedNode
from tpfabric_core.api.placement import StoredPlacement, refusal
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.store import ClusterStore, PodRecord

__all__ = ["recorded", "refused_nodes", "turned_down"]

#: kube-scheduler's words kept per refusal
WORDS = 300


def refused_nodes(
    store: ClusterStore, placement: StoredPlacement, worker: PodRecord, now: float
) -> frozenset[str]:
    """Return the nodes kube-scheduler's own filters refuse for a gang's worker now.

    Those it refused lately (``placement.refusedNodes``, not expired) and, for a worker that
    takes host ports, every node where a bound pod holds one of them (the NodePorts filter).
    Call with the store's lock held (or on a view of it).
    """
    nodes = {r.node for r in placement.live_refusals(now)}
    if worker.host_ports:
        nodes.update(
            node for node, ports in store.ports_used.items() if worker.host_ports & ports.keys()
        )
    return frozenset(nodes)


def turned_down(
    members: Iterable[PodRecord],
    unbound: Iterable[int],
    taken: Iterable[int],
    nodes: list[str],
    now: float,
) -> list[RefusedNode]:
    """Return the refusals of the ``unbound`` ranks kube-scheduler tried and could not bind on
    their planned node although it had room by the placer's count (not ``taken``): one of its
    own filters refused them there, in its words (the pod's ``Unschedulable`` message)."""
    said = {p.worker_index: p.unschedulable for p in members if p.unschedulable}
    left_out = set(taken)
    return [
        RefusedNode(node=nodes[r], reason=said[r][:WORDS], since=rfc3339(now))
        for r in unbound
        if r not in left_out and r < len(nodes) and r in said
    ]


def recorded(
    previous: StoredPlacement, refused: list[RefusedNode], now: float
) -> list[dict[str, str]] | None:
    """Return every refusal a dropped plan records, as written: those still live and the new
    ``refused`` (None without a new one: the write carries the live ones over by itself)."""
    if not refused:
        return None
    return [*previous.refusals(now), *(refusal(r.node, r.reason, r.since) for r in refused)]
