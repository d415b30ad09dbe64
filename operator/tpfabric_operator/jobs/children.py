"""The objects a TensorParallelJob owns: one headless Service and one gated pod per worker
(born released instead when the gang's plan exists already: :mod:`.born_released`).

Pure: a job in, manifests out. Every name is deterministic (``<job>-worker-<index>``, with
``-a<attempt>`` after a restart), so creating them again after an operator restart is a no-op
(409) rather than a second set; the hostname stays ``<job>-worker-<index>`` in every attempt, so
DNS does not change. Worker ``index`` is the job's node rank: the gang placer steers worker ``i``
to the node its plan gives rank ``i``, so ``NODE_RANK`` follows the placement's topology-aware
rank order without changing after creation.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tpfabric_core import labels
from tpfabric_core.api import (
    ATTEMPT_LABEL,
    GANG_GATE,
    JOB_LABEL,
    SCHEDULER_NAME,
    WORKER_INDEX_LABEL,
    TensorParallelJob,
)
from tpfabric_core.placement.pod_fit import node_matcher
from tpfabric_core.pod_wiring import (
    GPU_RESOURCE,
    NCCL_CONF_ENV,
    SHARED_MOUNT,
    RdmaWiring,
    wire_rdma,
)
from tpfabric_core.rdma_default import RDMA_ANNOTATION, NodeOffer, RdmaDecision, decide_rdma

__all__ = [
    "ATTEMPT_LABEL",
    "FAILED_WORKER_LABEL",
    "GANG_GATE",
    "JOB_LABEL",
    "MASTER_PORT",
    "SCHEDULER_NAME",
    "SHARED_MOUNT",
    "WORKER_INDEX_LABEL",
    "headless_service",
    "rendezvous_id",
    "service_name",
    "worker_hostname",
    "worker_name",
    "worker_pod",
    "worker_rdma",
]

MASTER_PORT = 29500
#: the node labels that make a node part of the labelled fabric (the default levels')
FABRIC_KEYS = (labels.LEAF, labels.SPINE, labels.BLOCK)
#: Label of a failed pod kept for ``kubectl logs`` after it left the gang (value: the job name);
#: it carries no job label, so the placer, the Service and the operator's worker index skip it.
FAILED_WORKER_LABEL = "tpfabric.io/failed-worker-of"


def worker_hostname(job: str, index: int) -> str:
    """Return the hostname of worker ``index`` of ``job``: the same in every attempt."""
    return f"{job}-worker-{index}"


def worker_name(job: str, index: int, attempt: int = 0) -> str:
    """Return the pod name of worker ``index`` of ``job`` in ``attempt``.

    Attempt 0 is ``<job>-worker-<index>``; a restart's pods add ``-a<attempt>``, so the failed
    pods of the last attempt can stay for ``kubectl logs`` while the new ones run.
    """
    base = worker_hostname(job, index)
    return base if attempt == 0 else f"{base}-a{attempt}"


def service_name(job: str) -> str:
    """Return the name of the job's headless Service (the pods' DNS subdomain)."""
    return f"{job}-workers"


def headless_service(name: str, namespace: str) -> dict[str, Any]:
    """Return the headless Service that gives every worker a stable DNS name."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(name),
            "namespace": namespace,
            "labels": {JOB_LABEL: name},
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,  # rendezvous happens before readiness
            "selector": {JOB_LABEL: name},
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT}],
        },
    }


def rendezvous_id(job: TensorParallelJob, name: str, namespace: str, attempt: int) -> str:
    """Return ``PET_RDZV_ID``: the c10d rendezvous a worker joins.

    Per job object (its uid), and per attempt under ``RecreateGang``: a new gang must never join
    the rendezvous of an older one whose containers may still run (a pod stuck terminating on a
    node that does not answer). Under ``ReplaceWorker`` a replacement joins the rendezvous of the
    running workers, so the id stays that of the job.
    """
    uid = str(job.metadata.get("uid") or "")[:8]
    base = f"{namespace}-{name}-{uid}" if uid else f"{namespace}-{name}"
    if job.spec.failure_policy.restart_strategy == "RecreateGang":
        return f"{base}-a{attempt}"
    return base


def _env(
    job: TensorParallelJob, name: str, namespace: str, index: int, attempt: int
) -> list[dict[str, Any]]:
    spec = job.spec
    master = f"{worker_hostname(name, 0)}.{service_name(name)}.{namespace}.svc"
    values: dict[str, object] = {
        # node-level ranks; WORLD_SIZE counts processes (one per GPU), as torch.distributed does
        "NODE_RANK": index,
        "NNODES": spec.workers,
        "NPROC_PER_NODE": spec.gpus_per_worker,
        "WORLD_SIZE": spec.workers * spec.gpus_per_worker,
        "MASTER_ADDR": master,
        "MASTER_PORT": MASTER_PORT,
        "TENSOR_PARALLEL_SIZE": spec.tensor_parallel_size,
        "PIPELINE_PARALLEL_SIZE": spec.pipeline_parallel_size,
        "TPFABRIC_JOB": name,
        "NCCL_CONF_FILE": NCCL_CONF_ENV["value"],
    }
    launcher = spec.launcher
    if launcher.kind == "torchrun":
        # a plain `torchrun train.py` reads its flags from PET_<FLAG>
        values |= {
            "PET_NNODES": spec.workers,
            "PET_NPROC_PER_NODE": spec.gpus_per_worker,
            "PET_MASTER_ADDR": master,
            "PET_MASTER_PORT": MASTER_PORT,
        }
        if launcher.rendezvous == "c10d":
            values |= {
                "PET_RDZV_BACKEND": "c10d",
                "PET_RDZV_ENDPOINT": f"{master}:{MASTER_PORT}",
                "PET_RDZV_ID": rendezvous_id(job, name, namespace, attempt),
            }
        else:
            values["PET_NODE_RANK"] = index
    return [{"name": key, "value": str(value)} for key, value in values.items()]


def worker_rdma(
    job: TensorParallelJob, nodes: Iterable[NodeOffer], resource: str = "rdma/ib"
) -> RdmaDecision:
    """Return the RDMA devices of each worker of ``job`` and why: ``spec.rdma.count`` when set,
    else what most GPU nodes that could hold a worker offer (:mod:`tpfabric_core.rdma_default`).
    ``resource``: the cluster's RDMA resource, for a job whose ``spec.rdma.resourceName`` is
    unset."""
    spec = job.spec
    return decide_rdma(
        resource=spec.rdma.resource_name or resource,
        pod_gpus=spec.gpus_per_worker,
        gang_size=spec.workers,
        asked=spec.rdma.count,
        asked_by="spec.rdma.count",
        nodes=nodes,
        eligible=node_matcher(spec.template.spec),
        fabric_keys=FABRIC_KEYS,
    )


def _resources(
    container: dict[str, Any], job: TensorParallelJob, rdma: RdmaDecision
) -> dict[str, Any]:
    resources = dict(container.get("resources") or {})
    limits = dict(resources.get("limits") or {})
    limits[GPU_RESOURCE] = str(job.spec.gpus_per_worker)
    if rdma.count:
        limits[rdma.resource] = str(rdma.count)
    resources["limits"] = limits
    if "requests" in resources:
        requests = dict(resources["requests"])
        requests.pop(GPU_RESOURCE, None)
        requests.pop(rdma.resource, None)
        resources["requests"] = requests
    return resources


def worker_pod(
    job: TensorParallelJob,
    name: str,
    namespace: str,
    index: int,
    init_image: str,
    *,
    attempt: int = 0,
    fabric_profile: str | None = None,
    rdma: RdmaDecision | None = None,
) -> dict[str, Any]:
    """Return the gated pod of worker ``index``: the template plus rank env, RDMA wiring (with
    the fabric's contract, ``fabric_profile``: rdma-init's ``--fabric-profile``), gate.

    ``rdma``: the workers' RDMA devices (:func:`worker_rdma`; None: as the spec says, knowing
    no node), written on the pod (``tpfabric.io/rdma``) with why."""
    rdma = rdma if rdma is not None else worker_rdma(job, ())
    template = job.spec.template
    meta = template.metadata or {}
    labels = {
        **(meta.get("labels") or {}),
        JOB_LABEL: name,
        WORKER_INDEX_LABEL: str(index),
        ATTEMPT_LABEL: str(attempt),
    }
    containers = [
        {**container, "resources": _resources(container, job, rdma)}
        for container in template.spec.get("containers") or []
    ]
    pod_spec = wire_rdma(  # a new spec: the template is never changed
        {**template.spec, "containers": containers},
        RdmaWiring(
            init_image=init_image,
            gpus=job.spec.gpus_per_worker,
            rdma_resource=rdma.resource,
            rdma_count=rdma.count,
            gpu_direct=job.spec.rdma.gpu_direct,
            nccl_overrides=job.spec.nccl,
            annotations=meta.get("annotations") or {},
            fabric_profile=fabric_profile,
        ),
        _env(job, name, namespace, index, attempt),
    )
    pod_spec["schedulerName"] = SCHEDULER_NAME
    pod_spec["hostname"] = worker_hostname(name, index)  # DNS stays across attempts
    pod_spec["subdomain"] = service_name(name)
    pod_spec["restartPolicy"] = "Never"  # a failed worker is replaced whole, by the operator
    pod_spec["schedulingGates"] = [*(pod_spec.get("schedulingGates") or []), {"name": GANG_GATE}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": worker_name(name, index, attempt),
            "namespace": namespace,
            "labels": labels,
            "annotations": {**(meta.get("annotations") or {}), RDMA_ANNOTATION: rdma.annotation()},
        },
        "spec": pod_spec,
    }
