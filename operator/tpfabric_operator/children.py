"""The objects a TensorParallelJob owns: one headless Service and one gated pod per worker.

Pure: a job in, manifests out. Every name is deterministic (``<job>-worker-<index>``), so creating
them again after an operator restart is a no-op (409) rather than a second set. Worker ``index``
is the job's rank: the gang placer steers worker ``i`` to the node its plan gives rank ``i``, so
``RANK`` follows the placement's topology-aware rank order without changing after creation.
"""

from __future__ import annotations

import json
from typing import Any

from tpfabric_core.api import (
    GANG_GATE,
    JOB_LABEL,
    SCHEDULER_NAME,
    WORKER_INDEX_LABEL,
    TensorParallelJob,
)

__all__ = [
    "GANG_GATE",
    "JOB_LABEL",
    "MASTER_PORT",
    "SCHEDULER_NAME",
    "SHARED_MOUNT",
    "WORKER_INDEX_LABEL",
    "headless_service",
    "service_name",
    "worker_name",
    "worker_pod",
]

MASTER_PORT = 29500
SHARED_MOUNT = "/tpfabric"
PODINFO_MOUNT = "/etc/podinfo"
GPU_RESOURCE = "nvidia.com/gpu"
INIT_CONTAINER = "rdma-init"


def worker_name(job: str, index: int) -> str:
    """Return the pod name of worker ``index`` of ``job``."""
    return f"{job}-worker-{index}"


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


def _env(job: TensorParallelJob, name: str, namespace: str, index: int) -> list[dict[str, Any]]:
    spec = job.spec
    master = f"{worker_name(name, 0)}.{service_name(name)}.{namespace}.svc"
    values = {
        # pod-level ranks (torchrun derives per-process RANK/WORLD_SIZE from these)
        "RANK": index,
        "NODE_RANK": index,
        "WORLD_SIZE": spec.workers,
        "NNODES": spec.workers,
        "NPROC_PER_NODE": spec.gpus_per_worker,
        "MASTER_ADDR": master,
        "MASTER_PORT": MASTER_PORT,
        "TENSOR_PARALLEL_SIZE": spec.tensor_parallel_size,
        "PIPELINE_PARALLEL_SIZE": spec.pipeline_parallel_size,
        "TPFABRIC_JOB": name,
        "NCCL_CONF_FILE": f"{SHARED_MOUNT}/nccl.conf",
    }
    return [{"name": key, "value": str(value)} for key, value in values.items()]


def _merge_env(existing: list[dict[str, Any]], ours: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return ``ours`` followed by the user's variables (the user's win on a name clash)."""
    names = {item.get("name") for item in existing}
    return [item for item in ours if item["name"] not in names] + existing


def _resources(container: dict[str, Any], job: TensorParallelJob) -> dict[str, Any]:
    resources = dict(container.get("resources") or {})
    limits = dict(resources.get("limits") or {})
    limits[GPU_RESOURCE] = str(job.spec.gpus_per_worker)
    if job.spec.rdma.count:
        limits[job.spec.rdma.resource_name] = str(job.spec.rdma.count)
    resources["limits"] = limits
    if "requests" in resources:
        requests = dict(resources["requests"])
        requests.pop(GPU_RESOURCE, None)
        requests.pop(job.spec.rdma.resource_name, None)
        resources["requests"] = requests
    return resources


def _with_ipc_lock(container: dict[str, Any]) -> dict[str, Any]:
    security = dict(container.get("securityContext") or {})
    capabilities = dict(security.get("capabilities") or {})
    added = list(capabilities.get("add") or [])
    if "IPC_LOCK" not in added:
        added.append("IPC_LOCK")  # RDMA registers (pins) memory
    capabilities["add"] = added
    security["capabilities"] = capabilities
    return {**container, "securityContext": security}


def _init_container(job: TensorParallelJob, image: str) -> dict[str, Any]:
    rdma = job.spec.rdma
    args = [
        f"--policy={rdma.gpu_direct if rdma.count else 'disabled'}",
        f"--shared-dir={SHARED_MOUNT}",
        f"--annotations-file={PODINFO_MOUNT}/annotations",
    ]
    if job.spec.nccl:
        args.append(f"--nccl-overrides={json.dumps(job.spec.nccl, sort_keys=True)}")
    limits = {job.spec.rdma.resource_name: str(rdma.count)} if rdma.count else {}
    return {
        "name": INIT_CONTAINER,
        "image": image,
        "args": args,
        "resources": {"limits": limits} if limits else {},
        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
        "volumeMounts": [
            {"name": "tpfabric-shared", "mountPath": SHARED_MOUNT},
            {"name": "tpfabric-podinfo", "mountPath": PODINFO_MOUNT, "readOnly": True},
        ],
    }


def worker_pod(
    job: TensorParallelJob, name: str, namespace: str, index: int, init_image: str
) -> dict[str, Any]:
    """Return the gated pod of worker ``index``: the template plus rank env, RDMA wiring, gate."""
    template = job.spec.template
    pod_spec = json.loads(json.dumps(template.spec))  # deep copy of plain JSON
    meta = template.metadata or {}
    labels = {**(meta.get("labels") or {}), JOB_LABEL: name, WORKER_INDEX_LABEL: str(index)}
    containers = []
    for container in pod_spec.get("containers") or []:
        mounts = [
            *container.get("volumeMounts", []),
            {"name": "tpfabric-shared", "mountPath": SHARED_MOUNT},
        ]
        containers.append(
            _with_ipc_lock(
                {
                    **container,
                    "env": _merge_env(
                        container.get("env") or [], _env(job, name, namespace, index)
                    ),
                    "resources": _resources(container, job),
                    "volumeMounts": mounts,
                }
            )
        )
    pod_spec["containers"] = containers
    pod_spec["initContainers"] = [
        _init_container(job, init_image),
        *(pod_spec.get("initContainers") or []),
    ]
    pod_spec["volumes"] = [
        *(pod_spec.get("volumes") or []),
        {"name": "tpfabric-shared", "emptyDir": {}},
        {
            "name": "tpfabric-podinfo",
            "downwardAPI": {
                "items": [
                    {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
                ]
            },
        },
    ]
    pod_spec["schedulerName"] = SCHEDULER_NAME
    pod_spec["hostname"] = worker_name(name, index)
    pod_spec["subdomain"] = service_name(name)
    pod_spec["restartPolicy"] = "Never"  # a failed worker is replaced whole, by the operator
    pod_spec["schedulingGates"] = [*(pod_spec.get("schedulingGates") or []), {"name": GANG_GATE}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": worker_name(name, index),
            "namespace": namespace,
            "labels": labels,
            "annotations": dict(meta.get("annotations") or {}),
        },
        "spec": pod_spec,
    }
