"""A policy's test world: a store built from objects, and the work item, cycle, settings and
memory a placer cycle hands a policy. No writer: a policy returns what to do, and the tests read
the intent it returns."""

from __future__ import annotations

import copy
from typing import Any

from builders import a_job, a_worker
from placer_world import NOW

from tpfabric_core.placement.cost import DEFAULT_COST
from tpfabric_core.placement.topology import DEFAULT_LEVELS, ClusterTopology
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.capacity import build_snapshot, reservations_by_job
from tpfabric_scheduler.queue import Queue
from tpfabric_scheduler.store import ClusterStore
from tpfabric_scheduler.work import Cycle, PlacementWork, Rules

__all__ = ["NOW", "add_job", "add_pods", "cycle_of", "planned", "rules", "work_of"]


def planned(**fields: Any) -> dict[str, Any]:
    """Return a placement that planned a gang of two on leaf-a-n0 and leaf-a-n1 for attempt 0,
    30 s before NOW, in term 1 (``fields`` replace or add to it)."""
    return {
        "state": "Planned",
        "level": "leaf",
        "domain": "leaf-a",
        "nodes": ["leaf-a-n0", "leaf-a-n1"],
        "attempt": 0,
        "plannedAt": rfc3339(NOW - 30),
        "term": 1,
        **fields,
    }


def add_job(
    store: ClusterStore,
    name: str,
    workers: int,
    *,
    placement: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    level: str = "leaf",
    created: float = NOW - 100,
) -> dict[str, Any]:
    """Add TensorParallelJob ``name`` (``required`` at ``level``) with ``placement``."""
    job = a_job(name, workers)
    job["spec"]["topology"] = {"mode": "required", "level": level}
    job["metadata"]["creationTimestamp"] = rfc3339(created)
    job["status"] = {**(status or {}), **({"placement": placement} if placement else {})}
    with store.lock:
        store.upsert_job(copy.deepcopy(job))
    return job


def add_pods(
    store: ClusterStore,
    name: str,
    ranks: range | list[int],
    *,
    nodes: list[str] | None = None,
    gated: bool = True,
    attempt: int | None = 0,
    created: float = NOW - 100,
) -> None:
    """Add the worker pods of ``ranks`` of ``name`` (bound to ``nodes[rank]`` when given)."""
    for rank in ranks:
        node = nodes[rank] if nodes is not None else None
        pod = a_worker(name, rank, node=node, gated=gated, attempt=attempt)
        pod["metadata"]["creationTimestamp"] = rfc3339(created)
        pod["spec"]["containers"][0]["resources"]["limits"]["rdma/ib"] = "8"
        with store.lock:
            store.upsert_pod(pod)


def rules(**settings: Any) -> Rules:
    """Return the placer's settings (a 60 s bind bound, a clock stopped at ``NOW``)."""
    values: dict[str, Any] = {
        "levels": DEFAULT_LEVELS,
        "cost": DEFAULT_COST,
        "clock": lambda: NOW,
        "head_of_line_seconds": 300.0,
        "bind_timeout": 60.0,
    }
    return Rules(**(values | settings))


def _topology(store: ClusterStore) -> ClusterTopology:
    return ClusterTopology.from_node_labels(
        {name: node.labels for name, node in store.nodes.items()}, DEFAULT_LEVELS
    )


def work_of(store: ClusterStore, name: str, now: float = NOW) -> PlacementWork:
    """Return the work item a cycle at ``now`` hands the policies for job ``name``."""
    due = Queue().pending(store, reservations_by_job(store), _topology(store), (), now)
    (item,) = [w for w in due if w.job.name == name]
    return item


def cycle_of(store: ClusterStore, now: float = NOW) -> Cycle:
    """Return the state of a cycle at ``now``: the snapshot of ``store``, its pods now."""
    snapshot = build_snapshot(store, _topology(store), reservations_by_job(store))
    return Cycle(snapshot, now, pods_now=lambda key: list(store.workers.get(key, {}).values()))
