"""Map a TensorParallelJob spec onto the placement engine's GangRequest (pure)."""

from __future__ import annotations

from typing import Any, get_args

from tpfabric_core.api import TensorParallelJob
from tpfabric_core.placement.request import GangRequest, TopologyPolicy
from tpfabric_core.placement.snapshot import TaintEffect, Toleration

__all__ = ["gang_request", "tolerations_of"]

_EFFECTS = set(get_args(TaintEffect))


def tolerations_of(pod_spec: dict[str, Any]) -> tuple[Toleration, ...]:
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


def gang_request(key: str, job: TensorParallelJob) -> GangRequest:
    """Return the engine's request for ``job`` (named by its ``namespace/name`` key)."""
    spec = job.spec
    topology = spec.topology
    return GangRequest(
        name=key,
        workers=spec.workers,
        gpus_per_worker=spec.gpus_per_worker,
        rdma_per_worker=spec.rdma.count,
        tp_size=spec.tensor_parallel_size,
        pp_size=spec.pipeline_parallel_size,
        tolerations=tolerations_of(spec.template.spec),
        policy=TopologyPolicy(
            mode=topology.mode,
            level=topology.level,
            rail_aligned=topology.rail_aligned,
            avoid_degraded=topology.avoid_degraded,
            max_wait_seconds=topology.max_wait_seconds,
        ),
    )
