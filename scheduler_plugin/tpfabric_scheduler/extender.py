"""Filter and prioritize for one pod, answered from the store and the job's plan.

A worker whose planned node passed kube-scheduler's own filters gets that node alone back from
filter: each worker index lands where the plan's rank order wants it, and with one feasible node
kube-scheduler skips scoring and the prioritize call. That matters for a gang that spans the
cluster: a worker of a 256-worker gang on 1,000 nodes had every free node of the cluster scored,
by kube-scheduler's plugins and by prioritize, 24 ms of kube-scheduler CPU a worker.
That answer names no reasons for the other nodes: kube-scheduler shows them only when no node is
feasible, and ~1,000 worded reasons a worker were encoded here and decoded there for nothing.
Otherwise (the planned node is gone, cordoned or taken) the worker is kept inside its job's
planned domain: nodes that hold a not-yet-bound rank of any gang (``store.reservations()``:
another rank of the same job, or a rank of another job) are filtered out unless the node has room
for the worker beside every rank reserved there (sub-node gangs), so it never lands on a node
another gang was promised, and prioritize ranks the rest by health and best fit.

Every rejection answered is *failed and unresolvable*: no preemption on a node could make us
accept it, so kube-scheduler's DefaultPreemption must never evict pods for it. The plan read is
``store.placement_of(job)``: a plan the placer has just written counts at once, and a job deleted
and created again under the same name never sees the old job's plan.

A planned domain is matched on its full label path (``placement.domainLabels``: every level from
the top down to the plan's level), so two leaves of the same name under different spines are never
mixed up. Plans persisted before ``domainLabels`` existed fall back to the plan level's key alone.

Pods that are not TensorParallelJob workers pass through untouched: filter keeps every node,
prioritize scores nothing. Such pods only reach us when they name the tpfabric scheduler, and may
as well run on the default scheduler, so the extender neither holds them back nor steers them off
reserved nodes (the placer's capacity snapshot already accounts for them once they are bound).

The request's node list is walked once against the set of the planned domain's node names, which
is computed once per topology generation of the store (node set or labels changed) and shared by
every request, and the reservation map, cached by the store per capacity generation. Nothing here
lists the cluster or allocates per cluster node. Call with ``store.lock`` held.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from tpfabric_core import labels
from tpfabric_core.api import JOB_LABEL, WORKER_INDEX_LABEL
from tpfabric_core.api.placement import NO_PLACEMENT, StoredPlacement
from tpfabric_core.gangs import GANG_LABEL, RANK_LABEL
from tpfabric_core.input_limits import whole_number
from tpfabric_core.pod_wiring import GPU_RESOURCE
from tpfabric_scheduler.capacity import rank_demands
from tpfabric_scheduler.protocol import MAX_SCORE, ExtenderArgs, FilterResult
from tpfabric_scheduler.store import ClusterStore, JobRecord, gang_key

__all__ = [
    "DomainPath",
    "FilterReason",
    "WorkerView",
    "domain_members",
    "filter_nodes",
    "prioritize_nodes",
    "worker_view",
]

#: a planned domain as (label key, value) pairs, sorted; empty: the whole cluster
DomainPath = tuple[tuple[str, str], ...]

#: per store: domain path -> (topology generation, names of the domain's nodes)
_DomainCache = dict[DomainPath, tuple[int, frozenset[str]]]
_domain_cache: weakref.WeakKeyDictionary[ClusterStore, _DomainCache] = weakref.WeakKeyDictionary()
_DOMAIN_CACHE_SIZE = 1024  # planned domains in use at once; past this the cache starts over


class FilterReason:
    """Reasons a node is filtered out; also the label values of the filter metric."""

    OUTSIDE_DOMAIN = "outside-planned-domain"
    OTHER_RANK = "planned-for-another-rank"
    NOT_PLANNED = "not-the-planned-node"
    RESERVED = "reserved-by-another-gang"
    NO_PLAN = "job-not-planned"
    UNKNOWN_JOB = "unknown-job"


@dataclass(frozen=True, slots=True)
class WorkerView:
    """What the extender knows of a worker pod's job and plan.

    ``domain`` is None while the job has no plan; ``domain_path`` is then empty too.
    """

    job: JobRecord | None
    job_key: str
    index: int | None
    level: str | None
    domain: str | None
    domain_path: DomainPath
    planned_node: str | None
    other_ranks: dict[str, int]  # node -> rank, for the job's other ranks


def _domain_path(placement: StoredPlacement) -> DomainPath:
    """Return the planned domain's label path: ``domainLabels``, else the level key (old plans)."""
    domain_labels = placement.domain_labels_or_level(labels.level_key) or {}
    return tuple(sorted(domain_labels.items()))


def worker_view(store: ClusterStore, args: ExtenderArgs) -> WorkerView | None:
    """Return the plan view of a worker pod, or None for a pod that is not a worker."""
    job_name = args.pod.labels.get(JOB_LABEL)
    if job_name:
        key = f"{args.pod.namespace}/{job_name}"
        index_text = args.pod.labels.get(WORKER_INDEX_LABEL, "")
    elif gang := args.pod.labels.get(GANG_LABEL):  # a pod of a gang another controller made
        key = gang_key(args.pod.namespace, gang)
        index_text = args.pod.labels.get(RANK_LABEL, "")
    else:
        return None
    index = whole_number(index_text)
    job = store.jobs.get(key)
    placement = store.placement_of(job) if job is not None else NO_PLACEMENT
    nodes = placement.nodes
    level = placement.level or ""
    domain = placement.domain or ""
    planned = bool(level and domain and nodes)
    return WorkerView(
        job=job,
        job_key=key,
        index=index,
        level=level if planned else None,
        domain=domain if planned else None,
        domain_path=_domain_path(placement) if planned else (),
        planned_node=nodes[index] if index is not None and index < len(nodes) else None,
        other_ranks={n: r for r, n in enumerate(nodes) if r != index},
    )


def domain_members(store: ClusterStore, path: DomainPath) -> frozenset[str]:
    """Return the names of the store's nodes whose labels hold every item of ``path``.

    An empty path is the whole cluster. O(cluster) once per topology generation and domain, O(1)
    after that: a node's labels and the node set only change with ``store.topology_generation``.
    Call with ``store.lock`` held.
    """
    cache = _domain_cache.get(store)
    if cache is None:
        cache = _domain_cache[store] = {}
    generation = store.topology_generation
    cached = cache.get(path)
    if cached is not None and cached[0] == generation:
        return cached[1]
    members = frozenset(
        name
        for name, node in store.nodes.items()
        if all(node.labels.get(key) == value for key, value in path)
    )
    if len(cache) >= _DOMAIN_CACHE_SIZE:
        cache.clear()
    cache[path] = (generation, members)
    return members


def _reject_all(
    args: ExtenderArgs, message: str, reason: str
) -> tuple[FilterResult, dict[str, int]]:
    rejected = dict.fromkeys(args.node_names, message)
    return FilterResult(node_names=[], failed_unresolvable=rejected), {reason: len(rejected)}


def filter_nodes(store: ClusterStore, args: ExtenderArgs) -> tuple[FilterResult, dict[str, int]]:
    """Return the filter answer for ``args`` and counts of filtered nodes by reason."""
    view = worker_view(store, args)
    if view is None:
        return FilterResult(node_names=args.node_names), {}
    if view.job is None or view.domain is None:
        # A worker reaches the scheduler only after the placer released it, so its plan
        # exists: this replica's watch has not delivered it (the placer may be another
        # replica) or the job was just deleted. Answer an error: kube-scheduler retries the pod
        # after a short backoff, never preempts for it, and never parks it as unschedulable.
        if view.job is None:
            message = f"tpfabric: job {view.job_key} not known yet (or deleted)"
            reason = FilterReason.UNKNOWN_JOB
        else:
            message = f"tpfabric: the gang plan of job {view.job_key} is not visible here yet"
            reason = FilterReason.NO_PLAN
        return FilterResult(node_names=[], error=message), {reason: len(args.node_names)}
    members = domain_members(store, view.domain_path)
    reserved = store.reservations()
    kept: list[str] = []
    refused: list[tuple[str, str]] = []  # (node, reason), worded only when they are answered
    counts: dict[str, int] = {}
    planned: str | None = None  # the planned node, once the loop has kept it
    for name in args.node_names:
        if name not in members:
            reason = FilterReason.OUTSIDE_DOMAIN
        elif name == view.planned_node:  # its own reservation
            kept.append(name)
            planned = name
            continue
        elif name in view.other_ranks:
            reason = FilterReason.OTHER_RANK
        elif (holders := reserved.get(name)) and not _room_beside(store, args, name, holders):
            reason = FilterReason.RESERVED  # its own job's ranks there are in other_ranks
        else:
            kept.append(name)
            continue
        counts[reason] = counts.get(reason, 0) + 1
        refused.append((name, reason))
    if planned is not None:
        # The planned node passed kube-scheduler's own filters: it is the one feasible node, so
        # kube-scheduler neither scores nor calls prioritize, and the pod is bound there. Why
        # the other nodes were left out is never read then (kube-scheduler shows it only when
        # no node is feasible), so it is not sent: for a gang spanning the cluster that was
        # ~1,000 worded reasons a worker, encoded here and decoded by kube-scheduler.
        if len(kept) > 1:
            counts[FilterReason.NOT_PLANNED] = len(kept) - 1
        return FilterResult(node_names=[planned]), counts
    outside = f"tpfabric: outside the planned {view.level} {view.domain} of job {view.job_key}"
    rejected = {
        name: outside if reason == FilterReason.OUTSIDE_DOMAIN else _held(view, name, reserved)
        for name, reason in refused
    }
    return FilterResult(node_names=kept, failed_unresolvable=rejected), counts


def _room_beside(
    store: ClusterStore, args: ExtenderArgs, name: str, holders: tuple[tuple[str, int], ...]
) -> bool:
    """Return whether node ``name`` has room for the pod beside every rank reserved there.

    Ranks of gangs whose workers take part of a node (4-GPU workers on 8-GPU nodes) leave the
    rest of it to others: every resource the pod requests must be free after the bound pods
    (the store's use) and every reserved rank's demand. A pod the store does not know yet gets
    no such node (its demand is unknown). Only walked for nodes that hold reservations, on the
    path where the worker's planned node did not pass kube-scheduler's filters.
    """
    pod = store.pods.get(f"{args.pod.namespace}/{args.pod.name}")
    if pod is None:
        return False
    held: dict[str, int] = {}
    for job_key, _ in holders:
        job = store.jobs.get(job_key)
        if job is None:
            continue
        for resource, amount in rank_demands(store, job).items():
            held[resource] = held.get(resource, 0) + amount
    return all(
        store.free(name, resource) - held.get(resource, 0) >= amount
        for resource, amount in pod.requests.items()
        if amount > 0
    )


def _held(view: WorkerView, name: str, reserved: dict[str, tuple[tuple[str, int], ...]]) -> str:
    """Return the words kube-scheduler shows for ``name``, held by a rank of a gang."""
    if name in view.other_ranks:
        return f"tpfabric: planned for rank {view.other_ranks[name]} of job {view.job_key}"
    ranks = ", ".join(f"rank {rank} of job {job_key}" for job_key, rank in reserved[name][:3])
    return f"tpfabric: reserved for {ranks}"


def prioritize_nodes(store: ClusterStore, args: ExtenderArgs) -> list[tuple[str, int]]:
    """Return ``(node, score)`` for ``args``: the planned node 10, healthy best fit next.

    Nodes outside the domain, planned for another rank or reserved by another gang score 0 (the
    filter removes them anyway). Nothing for a pod that is not a planned worker.
    """
    view = worker_view(store, args)
    if view is None or view.domain is None:
        return []
    members = domain_members(store, view.domain_path)
    reserved = store.reservations()
    scores: list[tuple[str, int]] = []
    append = scores.append
    for name in args.node_names:
        if name not in members:
            append((name, 0))
            continue
        if name == view.planned_node:
            append((name, MAX_SCORE))
            continue
        if name in view.other_ranks or name in reserved:
            append((name, 0))
            continue
        node = store.nodes[name]
        if node.labels.get(labels.HEALTH, "ok") != "ok" or name in store.silent_nodes:
            append((name, 1))
        else:
            # best fit: a node with fewer free GPUs left after this worker scores higher
            free = store.free(name, GPU_RESOURCE)
            capacity = max(1, node.allocatable.get(GPU_RESOURCE, 1))
            append((name, 3 + round(4 * (1 - free / capacity))))
    return scores
