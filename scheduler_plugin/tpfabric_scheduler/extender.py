"""Filter and prioritize for one pod, answered from the store and the job's persisted plan.

Pods that are not TensorParallelJob workers pass through untouched (filter keeps every node,
prioritize scores nothing). A worker is kept inside its job's planned domain; inside it, the node
planned for its rank scores highest, nodes planned for other ranks of the same job are filtered
out (so each worker index lands where the plan's rank order wants it), and the other nodes of the
domain are ranked by health and best fit. The request's node list is walked once against the
set of the planned domain's node names, which is computed once per topology generation of the
store (node set or labels changed) and shared by every request; nothing else here lists the
cluster or allocates per cluster node.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from tpfabric_core import labels
from tpfabric_core.placement.topology import CLUSTER_LEVEL
from tpfabric_scheduler.protocol import MAX_SCORE, ExtenderArgs, FilterResult
from tpfabric_scheduler.store import (
    GPU_RESOURCE,
    JOB_LABEL,
    WORKER_INDEX_LABEL,
    ClusterStore,
    JobRecord,
)

__all__ = [
    "FilterReason",
    "WorkerView",
    "domain_members",
    "filter_nodes",
    "prioritize_nodes",
    "worker_view",
]

#: per store: (level key, domain) -> (topology generation, names of the domain's nodes)
_DomainCache = dict[tuple[str, str], tuple[int, frozenset[str]]]
_domain_cache: weakref.WeakKeyDictionary[ClusterStore, _DomainCache] = weakref.WeakKeyDictionary()
_DOMAIN_CACHE_SIZE = 1024  # planned domains in use at once; past this the cache starts over


class FilterReason:
    """Reasons a node is filtered out; also the label values of the filter metric."""

    OUTSIDE_DOMAIN = "outside-planned-domain"
    OTHER_RANK = "planned-for-another-rank"
    NO_PLAN = "job-not-planned"
    UNKNOWN_JOB = "unknown-job"


@dataclass(frozen=True, slots=True)
class WorkerView:
    """What the extender knows of a worker pod's job and plan."""

    job: JobRecord | None
    job_key: str
    index: int | None
    level_key: str | None
    domain: str | None
    planned_node: str | None
    other_ranks: dict[str, int]  # node -> rank, for the job's other ranks


def worker_view(store: ClusterStore, args: ExtenderArgs) -> WorkerView | None:
    """Return the plan view of a worker pod, or None for a pod that is not a worker."""
    job_name = args.pod.labels.get(JOB_LABEL)
    if not job_name:
        return None
    key = f"{args.pod.namespace}/{job_name}"
    index_text = args.pod.labels.get(WORKER_INDEX_LABEL, "")
    index = int(index_text) if index_text.isdigit() else None
    job = store.jobs.get(key)
    placement = (job.raw_status.get("placement") or {}) if job else {}
    nodes = [str(n) for n in placement.get("nodes") or []]
    level = placement.get("level")
    domain = placement.get("domain")
    planned = nodes[index] if index is not None and index < len(nodes) else None
    return WorkerView(
        job=job,
        job_key=key,
        index=index,
        level_key=labels.level_key(str(level)) if level and domain and nodes else None,
        domain=str(domain) if domain and nodes else None,
        planned_node=planned,
        other_ranks={n: r for r, n in enumerate(nodes) if r != index},
    )


_CLUSTER_KEY = labels.level_key(CLUSTER_LEVEL)


def domain_members(store: ClusterStore, level_key: str, domain: str) -> frozenset[str]:
    """Return the names of the store's nodes labelled ``level_key=domain``.

    O(cluster) once per topology generation and domain, O(1) after that: a node's labels and the
    node set only change with ``store.topology_generation``. Call with ``store.lock`` held.
    """
    cache = _domain_cache.get(store)
    if cache is None:
        cache = _domain_cache[store] = {}
    generation = store.topology_generation
    cached = cache.get((level_key, domain))
    if cached is not None and cached[0] == generation:
        return cached[1]
    if level_key == _CLUSTER_KEY:  # a plan spread over the whole cluster: every node is in
        members = frozenset(store.nodes)
    else:
        members = frozenset(
            name for name, node in store.nodes.items() if node.labels.get(level_key) == domain
        )
    if len(cache) >= _DOMAIN_CACHE_SIZE:
        cache.clear()
    cache[(level_key, domain)] = (generation, members)
    return members


def filter_nodes(store: ClusterStore, args: ExtenderArgs) -> tuple[FilterResult, dict[str, int]]:
    """Return the filter answer for ``args`` and counts of filtered nodes by reason."""
    view = worker_view(store, args)
    if view is None:
        return FilterResult(node_names=args.node_names), {}
    if view.job is None:
        message = f"tpfabric: job {view.job_key} does not exist (worker without a job)"
        return FilterResult(
            node_names=[], failed_unresolvable=dict.fromkeys(args.node_names, message)
        ), {FilterReason.UNKNOWN_JOB: len(args.node_names)}
    if view.domain is None or view.level_key is None:
        message = f"tpfabric: job {view.job_key} has no gang plan yet"
        return FilterResult(node_names=[], failed=dict.fromkeys(args.node_names, message)), {
            FilterReason.NO_PLAN: len(args.node_names)
        }
    members = domain_members(store, view.level_key, view.domain)
    names = args.node_names
    level = view.level_key.removeprefix(labels.PREFIX)
    outside = f"tpfabric: outside the planned {level} {view.domain} of job {view.job_key}"
    unresolvable = dict.fromkeys([n for n in names if n not in members], outside)
    kept: list[str] = []
    failed: dict[str, str] = {}
    for name in [n for n in names if n in members] if unresolvable else names:
        if name in view.other_ranks and name != view.planned_node:
            failed[name] = (
                f"tpfabric: planned for rank {view.other_ranks[name]} of job {view.job_key}"
            )
        else:
            kept.append(name)
    counts = {}
    if unresolvable:
        counts[FilterReason.OUTSIDE_DOMAIN] = len(unresolvable)
    if failed:
        counts[FilterReason.OTHER_RANK] = len(failed)
    return FilterResult(node_names=kept, failed=failed, failed_unresolvable=unresolvable), counts


def prioritize_nodes(store: ClusterStore, args: ExtenderArgs) -> list[tuple[str, int]]:
    """Return ``(node, score)`` for ``args``: the planned node 10, healthy best fit next."""
    view = worker_view(store, args)
    if view is None or view.domain is None or view.level_key is None:
        return []
    members = domain_members(store, view.level_key, view.domain)
    scores: list[tuple[str, int]] = []
    append = scores.append
    for name in args.node_names:
        if name not in members:
            append((name, 0))
            continue
        node = store.nodes[name]
        if name == view.planned_node:
            append((name, MAX_SCORE))
        elif node.labels.get(labels.HEALTH, "ok") != "ok":
            append((name, 1))
        else:
            # best fit: a node with fewer free GPUs left after this worker scores higher
            free = store.free(name, GPU_RESOURCE)
            capacity = max(1, node.allocatable.get(GPU_RESOURCE, 1))
            append((name, 3 + round(4 * (1 - free / capacity))))
    return scores
