"""Describe one gang to the placement engine: what each worker demands and where it may run.

A worker's demands are read from one of its pods (kube-scheduler's arithmetic, kept by the
store: CPU, memory, a pod slot, GPUs, the RDMA resource, any other extended resource): what the
pod asks, never a device it does not ask for. Where it may run follows from the pod's node
selector, required node affinity and tolerations. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from tpfabric_core.api import TensorParallelJob
from tpfabric_core.api.gang import Gang
from tpfabric_core.placement.pod_fit import node_matcher
from tpfabric_core.placement.request import GangRequest, TopologyPolicy
from tpfabric_core.placement.snapshot import TaintEffect, Toleration
from tpfabric_core.pod_wiring import GPU_RESOURCE
from tpfabric_scheduler.store import ClusterStore, JobRecord, PodRecord

__all__ = [
    "EligibleNodes",
    "eligible_nodes",
    "gang_request",
    "tolerations_of",
]

_EFFECTS = set(get_args(TaintEffect))


def tolerations_of(pod_spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    """Return the engine's tolerations from a pod spec's ``tolerations`` list."""
    result = []
    for item in pod_spec.get("tolerations") or []:
        effect = item.get("effect") or None
        result.append(
            Toleration(
                key=str(item.get("key") or ""),
                operator="Exists" if item.get("operator") == "Exists" else "Equal",
                value=str(item.get("value") or ""),
                effect=effect if effect in _EFFECTS else None,
            )
        )
    return tuple(result)


def eligible_nodes(store: ClusterStore, scheduling: Mapping[str, Any]) -> frozenset[str] | None:
    """Return the nodes a worker's node selector and required affinity allow (None: every)."""
    if not scheduling.get("nodeSelector") and not (
        (scheduling.get("affinity") or {}).get("nodeAffinity") or {}
    ).get("requiredDuringSchedulingIgnoredDuringExecution"):
        return None
    matches = node_matcher(scheduling)
    return frozenset(name for name, node in store.nodes.items() if matches(name, node.labels))


class EligibleNodes:
    """The nodes each job's workers may run on (:func:`eligible_nodes`), kept per topology
    generation of the store (a node's labels change it) and per worker constraints."""

    #: the most entries kept; past it the cache starts over
    LIMIT = 4096

    def __init__(self) -> None:
        self._cached: dict[tuple[str, str], tuple[int, frozenset[str] | None]] = {}

    def of(self, store: ClusterStore, job: JobRecord, worker: PodRecord) -> frozenset[str] | None:
        """Return the nodes ``job``'s ``worker`` may run on (None: every node)."""
        key = (job.uid, repr(sorted(worker.scheduling.items())))
        cached = self._cached.get(key)
        if cached is not None and cached[0] == store.topology_generation:
            return cached[1]
        eligible = eligible_nodes(store, worker.scheduling)
        if len(self._cached) > self.LIMIT:
            self._cached.clear()
        self._cached[key] = (store.topology_generation, eligible)
        return eligible


def gang_request(
    key: str,
    job: TensorParallelJob | Gang,
    worker: PodRecord | None,
    eligible: frozenset[str] | None,
    refused: frozenset[str] = frozenset(),
    *,
    previous: tuple[str, ...] = (),
) -> GangRequest:
    """Return the engine's request for ``job``, its demands read from one worker pod.

    ``refused``: nodes kube-scheduler's own filters refuse for the gang now (see
    :func:`~tpfabric_scheduler.policy.refusals.refused_nodes`). A worker that takes a host
    port, or whose required pod anti-affinity repels the gang's other workers, goes one per
    node. ``previous``: the nodes of the gang's last plan (preferred by the engine when the
    gang is planned again).
    """
    spec = job.spec
    topology = spec.topology
    # what the pods ask is the demand: a pod's resources are fixed at its creation, and a
    # Gang record's pods carry their RDMA devices themselves (its spec.rdma is not read)
    demand = dict(worker.requests) if worker is not None and worker.requests else {}
    demand.setdefault("pods", 1)
    rdma = spec.rdma
    if worker is None and isinstance(job, TensorParallelJob) and rdma.count and rdma.resource_name:
        demand.setdefault(rdma.resource_name, rdma.count)
    demand.pop(GPU_RESOURCE, None)  # the engine counts GPUs itself (gpus_per_worker)
    scheduling = worker.scheduling if worker is not None else {}
    return GangRequest(
        name=key,
        workers=spec.workers,
        gpus_per_worker=spec.gpus_per_worker,
        rdma_per_worker=0,  # RDMA is one of the other resources: see build_snapshot
        tp_size=spec.tensor_parallel_size,
        pp_size=spec.pipeline_parallel_size,
        tolerations=tolerations_of(dict(scheduling)),
        other_resources=tuple(sorted((r, a) for r, a in demand.items() if a > 0)),
        eligible_nodes=eligible,
        refused_nodes=refused,
        previous_nodes=previous,
        max_workers_per_node=(
            1 if worker is not None and (worker.host_ports or worker.repels_peers) else None
        ),
        policy=TopologyPolicy(
            mode=topology.mode,
            level=topology.level,
            rail_aligned=topology.rail_aligned,
            avoid_degraded=topology.avoid_degraded,
            max_wait_seconds=topology.max_wait_seconds,
        ),
    )
