"""The RDMA wiring of a pod: the ``rdma-init`` init container, its shared volume and the NCCL
config path. Pure: a pod spec in, a new pod spec out.

The wiring adds no privilege: ``rdma-init`` runs as a non-root user with no capability
(:data:`INIT_SECURITY_CONTEXT`, Pod Security ``restricted``), and the main containers keep the
securityContext their template gives. ``IPC_LOCK`` is the template's to add (memory pinning
beyond the runtime's memlock limit, for a root main container only: a non-root user never gets
an added capability in its effective set); ``rdma-init`` judges it either way. A wired pod is
admitted wherever its template would be, ``baseline`` included.

One wiring for every gang: the operator wires the workers of a TensorParallelJob with it, the
gang webhook the pods of gangs other controllers make (LeaderWorkerSet, JobSet, plain pod
groups). What differs between them (rank variables, resources, gates) stays with each.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tpfabric_core.input_limits import whole_number

__all__ = [
    "CUDA_MAJOR_ANNOTATION",
    "FABRIC_ENV",
    "GPU_RESOURCE",
    "INIT_CONTAINER",
    "INIT_SECURITY_CONTEXT",
    "NCCL_CONF_ENV",
    "NCCL_LIBRARY_ANNOTATION",
    "NCCL_VERSION_ANNOTATION",
    "PODINFO_MOUNT",
    "SHARED_MOUNT",
    "TERMINATION_MESSAGE_PATH",
    "USER_NCCL_CONF",
    "RdmaWiring",
    "is_wired",
    "library_mode",
    "wire_rdma",
]

GPU_RESOURCE = "nvidia.com/gpu"
SHARED_MOUNT = "/tpfabric"
PODINFO_MOUNT = "/etc/podinfo"
INIT_CONTAINER = "rdma-init"
#: where ``rdma-init`` writes its pairing summary (the kubelet's default path, named)
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
NCCL_LIBRARY_ANNOTATION = "tpfabric.io/nccl-library"
CUDA_MAJOR_ANNOTATION = "tpfabric.io/cuda-major"
#: The image's NCCL version (``2.27.3``), where the job knows it: rdma-init then writes the keys
#: that NCCL reads and no newer ones (env ``NCCL_VERSION`` in the template says the same).
NCCL_VERSION_ANNOTATION = "tpfabric.io/nccl-version"
#: Where NCCL < 2.23 finds a user's config (``$HOME/.nccl.conf``, root's home): the one file that
#: ``NCCL_CONF_FILE`` replaces in NCCL >= 2.23.4. The image's ``/etc/nccl.conf`` is never covered:
#: NCCL reads it after ours for the keys still unset (a cloud image's net-plugin settings).
USER_NCCL_CONF = "/root/.nccl.conf"
#: the NCCL config the init container writes, for NCCL >= 2.23.4
NCCL_CONF_ENV = {"name": "NCCL_CONF_FILE", "value": f"{SHARED_MOUNT}/nccl.conf"}
NCCL_ENV_FACTS = ("NCCL_NET", "NCCL_NET_PLUGIN")
#: Every container's share of the transports that are not NCCL: ``fabric.env`` (UCX, NVSHMEM,
#: Gloo, TensorPipe, vLLM) sourced by every bash (``BASH_ENV``) and interactive sh (``ENV``),
#: and the pod's IP from the downward API for vLLM's host and NIXL side channel. The
#: container's own values win: they replace these, and fabric.env only fills unset variables.
FABRIC_ENV: tuple[dict[str, Any], ...] = (
    {"name": "BASH_ENV", "value": f"{SHARED_MOUNT}/fabric.env"},
    {"name": "ENV", "value": f"{SHARED_MOUNT}/fabric.env"},
    {"name": "TPFABRIC_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
)
#: the ``rdma-init`` container's: Pod Security ``restricted``. Reading sysfs and the device nodes'
#: names and writing the shared emptyDir (mode 0777) need no privilege; the image's USER is the
#: same 65532 (rdma_init/Dockerfile), named here so that runAsNonRoot can be checked by the kubelet.
INIT_SECURITY_CONTEXT: Mapping[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
_SHARED_VOLUME = "tpfabric-shared"
_PODINFO_VOLUME = "tpfabric-podinfo"


@dataclass(frozen=True, slots=True)
class RdmaWiring:
    """What the init container is told, and the devices it takes (the main container's)."""

    init_image: str
    gpus: int
    rdma_resource: str = "rdma/ib"
    rdma_count: int = 0
    gpu_direct: str = "preferred"  # required | preferred | disabled
    nccl_overrides: Mapping[str, str] = field(default_factory=dict)
    #: the pod template's annotations (the NCCL library mode, the CUDA major version)
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: the fabric's contract as rdma-init reads it (``tpfabric_core.fabric_profile``), or None
    fabric_profile: str | None = None


def library_mode(annotations: Mapping[str, Any]) -> str:
    """Return where NCCL comes from: ``shipped`` (the init container brings it) or ``image``."""
    return "shipped" if annotations.get(NCCL_LIBRARY_ANNOTATION) == "shipped" else "image"


def is_wired(pod_spec: Mapping[str, Any]) -> bool:
    """Return whether ``pod_spec`` has the wiring already (wiring twice would repeat it)."""
    return any(c.get("name") == INIT_CONTAINER for c in pod_spec.get("initContainers") or [])


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
    container: dict[str, Any], pod_spec: Mapping[str, Any], annotations: Mapping[str, Any]
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
    cuda = str(annotations.get(CUDA_MAJOR_ANNOTATION, ""))
    if whole_number(cuda) is None:
        cuda_version = next(
            (
                e.get("value", "")
                for e in container.get("env") or []
                if e.get("name") == "CUDA_VERSION"
            ),
            "",
        )
        cuda = str(cuda_version).split(".")[0]
    if (major := whole_number(cuda)) is not None:
        facts["cudaMajor"] = major
    nccl_env = {
        str(e["name"]): str(e["value"])
        for e in container.get("env") or []
        if e.get("name") in NCCL_ENV_FACTS and isinstance(e.get("value"), str)
    }
    if nccl_env:  # a net plugin (EFA, TCPX/TCPXO, gIB): the init container writes no NCCL_NET
        facts["ncclEnv"] = nccl_env
    version = str(annotations.get(NCCL_VERSION_ANNOTATION) or "") or next(
        (
            str(e.get("value") or "")
            for e in container.get("env") or []
            if e.get("name") == "NCCL_VERSION"
        ),
        "",
    )
    if version:
        facts["ncclVersion"] = version
    return facts


def _init_container(wiring: RdmaWiring, main_facts: dict[str, Any]) -> dict[str, Any]:
    args = [
        f"--policy={wiring.gpu_direct if wiring.rdma_count else 'disabled'}",
        f"--shared-dir={SHARED_MOUNT}",
        f"--annotations-file={PODINFO_MOUNT}/annotations",
        f"--nccl-library={library_mode(wiring.annotations)}",
    ]
    if wiring.nccl_overrides:
        args.append(f"--nccl-overrides={json.dumps(dict(wiring.nccl_overrides), sort_keys=True)}")
    if wiring.fabric_profile:
        args.append(f"--fabric-profile={wiring.fabric_profile}")
    # The same devices as the main container: the kubelet hands them on to it.
    limits = {GPU_RESOURCE: str(wiring.gpus)} if wiring.gpus else {}
    if wiring.rdma_count:
        limits[wiring.rdma_resource] = str(wiring.rdma_count)
    return {
        "name": INIT_CONTAINER,
        "image": wiring.init_image,
        "args": args,
        "env": [
            {"name": "TPFABRIC_MAIN_CONTAINER", "value": json.dumps(main_facts, sort_keys=True)}
        ],
        "resources": {"limits": limits},
        "securityContext": json.loads(json.dumps(INIT_SECURITY_CONTEXT)),
        # the GPU -> HCA pairing, for `tpfabric diagnose` to read through the API (the kubelet
        # keeps 4096 bytes of it); File: never the log's tail, which is not the summary
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            {"name": _SHARED_VOLUME, "mountPath": SHARED_MOUNT},
            {"name": _PODINFO_VOLUME, "mountPath": PODINFO_MOUNT, "readOnly": True},
        ],
    }


def wire_rdma(
    pod_spec: Mapping[str, Any], wiring: RdmaWiring, env: list[dict[str, Any]]
) -> dict[str, Any]:
    """Return ``pod_spec`` (unchanged) wired for RDMA: a new spec.

    Every container gets ``env`` before its own variables (its own win on a clash) and the
    shared volume, and keeps its own securityContext; the ``rdma-init`` init container runs
    first (non-root, no capability), judging the first container, with the same GPUs and RDMA
    devices; the shared and downward-API volumes are added.
    """
    spec: dict[str, Any] = json.loads(json.dumps(pod_spec))  # deep copy of plain JSON
    shipped = library_mode(wiring.annotations) == "shipped"
    containers = []
    for container in spec.get("containers") or []:
        mounts = [
            *container.get("volumeMounts", []),
            {"name": _SHARED_VOLUME, "mountPath": SHARED_MOUNT},
            {
                "name": _SHARED_VOLUME,
                "mountPath": USER_NCCL_CONF,
                "subPath": "nccl.conf",
                "readOnly": True,
            },
        ]
        merged = _merge_env(container.get("env") or [], [*env, *json.loads(json.dumps(FABRIC_ENV))])
        containers.append(
            {
                **container,
                "env": _with_library_path(merged) if shipped else merged,
                "volumeMounts": mounts,
            }
        )
    spec["containers"] = containers
    facts = _main_container_facts(containers[0], spec, wiring.annotations) if containers else {}
    spec["initContainers"] = [_init_container(wiring, facts), *(spec.get("initContainers") or [])]
    spec["volumes"] = [
        *(spec.get("volumes") or []),
        {"name": _SHARED_VOLUME, "emptyDir": {}},
        {
            "name": _PODINFO_VOLUME,
            "downwardAPI": {
                "items": [
                    {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
                ]
            },
        },
    ]
    return spec
