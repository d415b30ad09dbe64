"""The objects a TensorParallelJob owns: one headless Service and one gated pod per worker
(born released instead when the gang's plan exists already: :func:`born_released`).

Pure: a job in, manifests out. Every name is deterministic (``<job>-worker-<index>``, with
``-a<attempt>`` after a restart), so creating them again after an operator restart is a no-op
(409) rather than a second set; the hostname stays ``<job>-worker-<index>`` in every attempt, so
DNS does not change. Worker ``index`` is the job's node rank: the gang placer steers worker ``i``
to the node its plan gives rank ``i``, so ``NODE_RANK`` follows the placement's topology-aware
rank order without changing after creation.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from tpfabric_core.api import (
    ATTEMPT_LABEL,
    GANG_GATE,
    JOB_LABEL,
    SCHEDULER_NAME,
    WORKER_INDEX_LABEL,
    TensorParallelJob,
)
from tpfabric_core.placement.steering import narrow_affinity, plan_expressions, remaining_gates

__all__ = [
    "ATTEMPT_LABEL",
    "FAILED_WORKER_LABEL",
    "GANG_GATE",
    "JOB_LABEL",
    "MASTER_PORT",
    "SCHEDULER_NAME",
    "SHARED_MOUNT",
    "WORKER_INDEX_LABEL",
    "born_released",
    "headless_service",
    "rendezvous_id",
    "service_name",
    "worker_hostname",
    "worker_name",
    "worker_pod",
]

MASTER_PORT = 29500
SHARED_MOUNT = "/tpfabric"
PODINFO_MOUNT = "/etc/podinfo"
GPU_RESOURCE = "nvidia.com/gpu"
INIT_CONTAINER = "rdma-init"
NCCL_LIBRARY_ANNOTATION = "tpfabric.io/nccl-library"
CUDA_MAJOR_ANNOTATION = "tpfabric.io/cuda-major"
#: Where NCCL < 2.23 finds a user's config (``$HOME/.nccl.conf``, root's home): the one file that
#: ``NCCL_CONF_FILE`` replaces in NCCL >= 2.23.4. The image's ``/etc/nccl.conf`` is never covered:
#: NCCL reads it after ours for the keys still unset (a cloud image's net-plugin settings).
USER_NCCL_CONF = "/root/.nccl.conf"
NCCL_ENV_FACTS = ("NCCL_NET", "NCCL_NET_PLUGIN")
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


def _library_mode(job: TensorParallelJob) -> str:
    annotations = (job.spec.template.metadata or {}).get("annotations") or {}
    return "shipped" if annotations.get(NCCL_LIBRARY_ANNOTATION) == "shipped" else "image"


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
        "NCCL_CONF_FILE": f"{SHARED_MOUNT}/nccl.conf",
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


def _merge_env(existing: list[dict[str, Any]], ours: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return ``ours`` followed by the user's variables (the user's win on a name clash)."""
    names = {item.get("name") for item in existing}
    return [item for item in ours if item["name"] not in names] + existing


def _with_library_path(env: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return ``env`` with the shipped NCCL first on ``LD_LIBRARY_PATH`` (the user's path after).

    The pod spec's value replaces the image's ``ENV LD_LIBRARY_PATH``, which Kubernetes cannot
    reference: a template relying on the image's value must repeat it in its env.
    """
    path = f"{SHARED_MOUNT}/lib"
    for item in env:
        if item.get("name") == "LD_LIBRARY_PATH" and "value" in item:
            item["value"] = f"{path}:{item['value']}" if item["value"] else path
            return env
    return [*env, {"name": "LD_LIBRARY_PATH", "value": path}]


def _main_container_facts(
    container: dict[str, Any], pod_spec: dict[str, Any], job: TensorParallelJob
) -> dict[str, Any]:
    """Return what the init container needs to judge pinning and NCCL for the main container."""
    pod_security = pod_spec.get("securityContext") or {}
    security = container.get("securityContext") or {}
    facts: dict[str, Any] = {
        "container": container.get("name"),
        "runAsUser": security.get("runAsUser", pod_security.get("runAsUser")),
        "runAsNonRoot": bool(security.get("runAsNonRoot", pod_security.get("runAsNonRoot"))),
        "privileged": bool(security.get("privileged")),
        "capabilitiesAdd": list((security.get("capabilities") or {}).get("add") or []),
    }
    annotations = (job.spec.template.metadata or {}).get("annotations") or {}
    cuda = str(annotations.get(CUDA_MAJOR_ANNOTATION, ""))
    if not cuda.isdigit():
        cuda_version = next(
            (
                e.get("value", "")
                for e in container.get("env") or []
                if e.get("name") == "CUDA_VERSION"
            ),
            "",
        )
        cuda = str(cuda_version).split(".")[0]
    if cuda.isdigit():
        facts["cudaMajor"] = int(cuda)
    nccl_env = {
        str(e["name"]): str(e["value"])
        for e in container.get("env") or []
        if e.get("name") in NCCL_ENV_FACTS and isinstance(e.get("value"), str)
    }
    if nccl_env:  # a net plugin (EFA, TCPX/TCPXO, gIB): the init container writes no NCCL_NET
        facts["ncclEnv"] = nccl_env
    return facts


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


def _init_container(
    job: TensorParallelJob, image: str, main_facts: dict[str, Any]
) -> dict[str, Any]:
    rdma = job.spec.rdma
    args = [
        f"--policy={rdma.gpu_direct if rdma.count else 'disabled'}",
        f"--shared-dir={SHARED_MOUNT}",
        f"--annotations-file={PODINFO_MOUNT}/annotations",
        f"--nccl-library={_library_mode(job)}",
    ]
    if job.spec.nccl:
        args.append(f"--nccl-overrides={json.dumps(job.spec.nccl, sort_keys=True)}")
    # The same devices as the main container: the kubelet hands them on to it.
    limits = {GPU_RESOURCE: str(job.spec.gpus_per_worker)}
    if rdma.count:
        limits[rdma.resource_name] = str(rdma.count)
    return {
        "name": INIT_CONTAINER,
        "image": image,
        "args": args,
        "env": [
            {"name": "TPFABRIC_MAIN_CONTAINER", "value": json.dumps(main_facts, sort_keys=True)}
        ],
        "resources": {"limits": limits},
        "volumeMounts": [
            {"name": "tpfabric-shared", "mountPath": SHARED_MOUNT},
            {"name": "tpfabric-podinfo", "mountPath": PODINFO_MOUNT, "readOnly": True},
        ],
    }


def worker_pod(
    job: TensorParallelJob,
    name: str,
    namespace: str,
    index: int,
    init_image: str,
    *,
    attempt: int = 0,
) -> dict[str, Any]:
    """Return the gated pod of worker ``index``: the template plus rank env, RDMA wiring, gate."""
    template = job.spec.template
    pod_spec = json.loads(json.dumps(template.spec))  # deep copy of plain JSON
    meta = template.metadata or {}
    labels = {
        **(meta.get("labels") or {}),
        JOB_LABEL: name,
        WORKER_INDEX_LABEL: str(index),
        ATTEMPT_LABEL: str(attempt),
    }
    containers = []
    shipped = _library_mode(job) == "shipped"
    for container in pod_spec.get("containers") or []:
        mounts = [
            *container.get("volumeMounts", []),
            {"name": "tpfabric-shared", "mountPath": SHARED_MOUNT},
            {
                "name": "tpfabric-shared",
                "mountPath": USER_NCCL_CONF,
                "subPath": "nccl.conf",
                "readOnly": True,
            },
        ]
        env = _merge_env(container.get("env") or [], _env(job, name, namespace, index, attempt))
        containers.append(
            _with_ipc_lock(
                {
                    **container,
                    "env": _with_library_path(env) if shipped else env,
                    "resources": _resources(container, job),
                    "volumeMounts": mounts,
                }
            )
        )
    pod_spec["containers"] = containers
    main_facts = _main_container_facts(containers[0], pod_spec, job) if containers else {}
    pod_spec["initContainers"] = [
        _init_container(job, init_image, main_facts),
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
            "annotations": dict(meta.get("annotations") or {}),
        },
        "spec": pod_spec,
    }


def born_released(
    manifest: dict[str, Any], placement: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """Return ``manifest`` released onto the gang's plan, or None when no plan covers it.

    The placer plans a gang once its first worker exists; a worker created after that, for the
    attempt the plan was made for, is created as the placer would release it (its required node
    affinity narrowed to the planned domain, without our gate): one write instead of a create and
    a release patch. The extender still steers it to its rank's planned node.
    """
    if not placement or placement.get("state") != "Planned":
        return None
    labels = manifest["metadata"].get("labels") or {}
    attempt = placement.get("attempt")
    if not isinstance(attempt, int) or labels.get(ATTEMPT_LABEL) != str(attempt):
        return None
    index = str(labels.get(WORKER_INDEX_LABEL, ""))
    if not index.isdigit() or int(index) >= len(placement.get("nodes") or []):
        return None
    expressions = plan_expressions(placement)
    if expressions is None:  # a plan without its domain's labels (an older placer)
        return None
    released = copy.deepcopy(manifest)
    spec = released["spec"]
    if expressions:  # a cluster-wide plan narrows nothing
        spec["affinity"] = narrow_affinity(spec.get("affinity"), expressions)
    gates = remaining_gates(spec.get("schedulingGates"))
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)
    return released
