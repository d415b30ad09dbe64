"""A fake API server for the memory benchmarks: a cluster's objects shaped as the API server returns
them, served in pages.

The fake API server (:class:`FakeList`) serves deterministic objects shaped the way the API server
returns them (managedFields, env, volumes, status: pods of 5-10 KB of JSON, 6.7 KB on average;
nodes of 11 KB with their image lists), honours ``limit`` and ``_continue`` (opaque tokens) and
builds a page's body only when it is asked for it, so a client reading it holds what a real client
holds: one response body at a time. The time spent building pages is counted apart
(``FakeList.serve_s``), so a measurement can keep it out of the informer's list time.
:meth:`FakeList.prebuild` builds every page beforehand and hands out copies (for a traced run,
where tracing the fake server's own work would only take minutes).

The cluster (:class:`ClusterShape`): ``nodes`` 8-GPU nodes of ``uniform_fabric``. 40% of the pods
are workers of 8-worker TensorParallelJobs: the *probe* job, planned on the first leaf, its
workers released and pending (the memory benchmark times the decisions for its rank 3); one
running job on each other full leaf; the remaining jobs waiting for a plan (gated workers) or
finished (succeeded workers). 60% are other pods: two DaemonSet pods per node, Deployment pods,
finished batch pods.

Used by :mod:`tpfabric_bench._memory`, :mod:`tpfabric_bench._relist` and
:mod:`tpfabric_bench._sizing`. It must never be imported by the product or open a network
connection.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import orjson

from tpfabric_core import labels
from tpfabric_core.api import (
    GANG_GATE,
    GROUP,
    JOB_LABEL,
    SCHEDULER_NAME,
    VERSION,
    WORKER_INDEX_LABEL,
    DomainReason,
    Placement,
)
from tpfabric_core.api.placement import PLANNED, WAITING, stored_status
from tpfabric_core.fabric_description import FabricDescription, uniform_fabric

__all__ = [
    "JOB_WORKERS",
    "KINDS",
    "ClusterShape",
    "FakeList",
    "Page",
    "api_job",
    "api_node",
    "api_pod",
    "as_submitted",
    "fake_lists",
]

JOB_WORKERS = 8
WORKER_SHARE = 0.4  # of the pods: TensorParallelJob workers; the rest are other pods
PROBE_RANK = 3
KINDS = ("nodes", "tensorparalleljobs", "pods")  # the order the child lists them in
_EPOCH = 1_767_225_600  # 2026-01-01T00:00:00Z
_IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"


def _time(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(_EPOCH + seconds))


def _suffix(k: int, length: int = 5) -> str:
    """Return a unique-per-``k`` suffix like the API server's generated names (``x7k2q``)."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    value = (k * 7_919 + 12_345) % len(alphabet) ** length  # 7919 is coprime to 27: one-to-one
    chars = []
    for _ in range(length):
        value, digit = divmod(value, len(alphabet))
        chars.append(alphabet[digit])
    return "".join(chars)


def _uid(kind: str, key: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"tpfabric-bench/{kind}/{key}"))


def _fields(value: Any) -> Any:
    """Return the ``fieldsV1`` tree of ``value`` (keys ``f:name``, list items ``k:{...}``)."""
    if isinstance(value, dict):
        return {f"f:{key}": _fields(item) for key, item in value.items()}
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        keyed = {}
        for item in value:
            key = next((k for k in ("name", "type", "key", "containerPort") if k in item), None)
            if key is None:
                return {}
            keyed[f'k:{{"{key}":{json.dumps(item[key])}}}'] = {".": {}, **_fields(item)}
        return keyed
    return {}


def _managed(manager: str, when: str, fields: dict[str, Any], subresource: str = "") -> Any:
    entry = {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": when,
        "fieldsType": "FieldsV1",
        "fieldsV1": _fields(fields),
    }
    return {**entry, "subresource": subresource} if subresource else entry


# -- the cluster ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterShape:
    """What the fake API server holds: ``pods`` pods, ``nodes`` nodes and the pods' jobs."""

    pods: int
    nodes: int

    @cached_property
    def fabric(self) -> FabricDescription:
        """Return the nodes' fabric (leaves of 8 nodes)."""
        return uniform_fabric(self.nodes)

    @cached_property
    def leaves(self) -> list[list[str]]:
        """Return the node names of each leaf, in order."""
        leaves: dict[str, list[str]] = {}
        for node in self.fabric.nodes:
            leaves.setdefault(node.leaf, []).append(node.name)
        return list(leaves.values())

    @cached_property
    def node_names(self) -> list[str]:
        """Return the node names, in order."""
        return [node.name for node in self.fabric.nodes]

    @cached_property
    def leaf_labels(self) -> list[str]:
        """Return the leaf label value of each leaf, in the order of :attr:`leaves`."""
        seen: dict[str, str] = {}
        for node in self.fabric.nodes:
            seen.setdefault(node.leaf, self.fabric.node_labels(node)[labels.LEAF])
        return list(seen.values())

    @cached_property
    def full_leaves(self) -> list[int]:
        """Return the indexes of the leaves with ``JOB_WORKERS`` nodes."""
        return [k for k, leaf in enumerate(self.leaves) if len(leaf) == JOB_WORKERS]

    @property
    def jobs(self) -> int:
        """Return how many TensorParallelJobs the workers belong to."""
        return int(self.pods * WORKER_SHARE) // JOB_WORKERS

    @property
    def workers(self) -> int:
        """Return how many of the pods are workers (the first ones listed)."""
        return self.jobs * JOB_WORKERS

    def job_name(self, job: int) -> tuple[str, str]:
        """Return (namespace, name) of job ``job``."""
        return f"team-{job % 16:02d}", f"train-{job:05d}"

    def job_state(self, job: int) -> str:
        """Return ``probe``, ``running``, ``waiting`` or ``finished``."""
        if job == 0:
            return "probe"
        if job < len(self.leaves) and len(self.leaves[job]) == JOB_WORKERS:
            return "running"
        return "waiting" if job % 5 == 0 else "finished"

    def job_leaf(self, job: int) -> int:
        """Return the leaf a job is (or was) planned on."""
        if job < len(self.leaves):
            return job
        return self.full_leaves[job % len(self.full_leaves)]

    def probe_pod(self) -> dict[str, Any]:
        """Return the probe job's worker (rank ``PROBE_RANK``) as kube-scheduler sends it."""
        pod = api_pod(self, PROBE_RANK)
        pod["metadata"].pop("managedFields", None)  # kube-scheduler's informer strips them
        return pod


def _domain_affinity(leaf: str) -> dict[str, Any]:
    """Return the node affinity the placer narrows a released worker to."""
    term = {"matchExpressions": [{"key": labels.LEAF, "operator": "In", "values": [leaf]}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def _tolerations() -> list[dict[str, Any]]:
    return [
        {
            "key": f"node.kubernetes.io/{t}",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        }
        for t in ("not-ready", "unreachable")
    ] + [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def _api_access_volume(k: int) -> dict[str, Any]:
    return {
        "name": f"kube-api-access-{_suffix(k)}",
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                            }
                        ]
                    }
                },
            ],
        },
    }


def _container_status(name: str, image: str, phase: str, k: int, when: str) -> dict[str, Any]:
    if phase == "Running":
        state: dict[str, Any] = {"running": {"startedAt": when}}
    else:
        state = {
            "terminated": {
                "exitCode": 0,
                "reason": "Completed",
                "startedAt": when,
                "finishedAt": when,
                "containerID": f"containerd://{k:064x}",
            }
        }
    return {
        "name": name,
        "state": state,
        "lastState": {},
        "ready": phase == "Running",
        "restartCount": 0,
        "image": image,
        "imageID": f"{image.split(':', 1)[0]}@sha256:{k * 31:064x}",
        "containerID": f"containerd://{k:064x}",
        "started": phase == "Running",
    }


def _pod_status(phase: str, node: str | None, k: int, containers: list[str]) -> dict[str, Any]:
    when = _time(60 + k)
    if node is None:
        scheduled = {
            "type": "PodScheduled",
            "status": "False",
            "lastProbeTime": None,
            "lastTransitionTime": when,
            "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates",
        }
        return {"phase": "Pending", "conditions": [scheduled], "qosClass": "Burstable"}
    done = phase != "Running"
    conditions = [
        {
            "type": t,
            "status": "False" if done and t in ("Ready", "ContainersReady") else "True",
            "lastProbeTime": None,
            "lastTransitionTime": when,
            **({"reason": "PodCompleted"} if done and t != "PodScheduled" else {}),
        }
        for t in (
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
        )
    ]
    ip = f"10.{64 + k // 65_536 % 64}.{k // 256 % 256}.{k % 256}"
    host = f"10.0.{k // 256 % 256}.{k % 256}"
    return {
        "phase": phase,
        "conditions": conditions,
        "hostIP": host,
        "hostIPs": [{"ip": host}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": when,
        "containerStatuses": [_container_status(c, _IMAGE, phase, k, when) for c in containers],
        "qosClass": "Burstable",
    }


def _worker_pod(shape: ClusterShape, k: int) -> dict[str, Any]:
    job, rank = divmod(k, JOB_WORKERS)
    namespace, name = shape.job_name(job)
    state = shape.job_state(job)
    leaf = shape.leaves[shape.job_leaf(job)]
    node = None if state in ("probe", "waiting") else leaf[rank % len(leaf)]
    phase = {"running": "Running", "finished": "Succeeded"}.get(state, "Pending")
    master = f"{name}-worker-0.{name}-workers.{namespace}.svc"
    env = {
        "RANK": rank,
        "NODE_RANK": rank,
        "WORLD_SIZE": JOB_WORKERS,
        "NNODES": JOB_WORKERS,
        "NPROC_PER_NODE": 8,
        "MASTER_ADDR": master,
        "MASTER_PORT": 29500,
        "TENSOR_PARALLEL_SIZE": 8,
        "PIPELINE_PARALLEL_SIZE": 1,
        "TPFABRIC_JOB": name,
        "NCCL_CONF_FILE": "/tpfabric/nccl.conf",
        "NCCL_DEBUG": "WARN",
    }
    gpus = {"nvidia.com/gpu": "8", "rdma/ib": "8"}
    spec: dict[str, Any] = {
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
            {"name": "tpfabric-shared", "emptyDir": {}},
            {
                "name": "tpfabric-podinfo",
                "downwardAPI": {
                    "defaultMode": 420,
                    "items": [
                        {
                            "path": "annotations",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.annotations"},
                        }
                    ],
                },
            },
            _api_access_volume(k),
        ],
        "initContainers": [
            {
                "name": "rdma-init",
                "image": "ghcr.io/tpfabric/rdma-init:0.4.0",
                "args": [
                    "--policy=preferred",
                    "--shared-dir=/tpfabric",
                    "--annotations-file=/etc/podinfo/annotations",
                ],
                "resources": {"limits": {"rdma/ib": "8"}, "requests": {"rdma/ib": "8"}},
                "volumeMounts": [
                    {"name": "tpfabric-shared", "mountPath": "/tpfabric"},
                    {"name": "tpfabric-podinfo", "mountPath": "/etc/podinfo", "readOnly": True},
                ],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
                "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
            }
        ],
        "containers": [
            {
                "name": "trainer",
                "image": _IMAGE,
                "command": ["torchrun"],
                "args": ["--nproc-per-node=8", "train.py"],
                "env": [{"name": key, "value": str(value)} for key, value in env.items()],
                "resources": {
                    "limits": {**gpus, "cpu": "96", "memory": "1600Gi"},
                    "requests": {**gpus, "cpu": "96", "memory": "1600Gi"},
                },
                "volumeMounts": [
                    {"name": "dshm", "mountPath": "/dev/shm"},  # noqa: S108 - in a pod
                    {"name": "tpfabric-shared", "mountPath": "/tpfabric"},
                    {
                        "name": f"kube-api-access-{_suffix(k)}",
                        "readOnly": True,
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                    },
                ],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
                "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
            }
        ],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "hostname": f"{name}-worker-{rank}",
        "subdomain": f"{name}-workers",
        "schedulerName": SCHEDULER_NAME,
        "tolerations": _tolerations(),
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    if state == "waiting":
        spec["schedulingGates"] = [{"name": GANG_GATE}]
    else:
        spec["affinity"] = _domain_affinity(shape.leaf_labels[shape.job_leaf(job)])
    if node is not None:
        spec["nodeName"] = node
    meta = {
        "name": f"{name}-worker-{rank}",
        "namespace": namespace,
        "labels": {
            JOB_LABEL: name,
            WORKER_INDEX_LABEL: str(rank),
            "app.kubernetes.io/name": "llm-train",
            "team": namespace,
        },
        "ownerReferences": [
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "TensorParallelJob",
                "name": name,
                "uid": _uid("job", f"{namespace}/{name}"),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    status = _pod_status(phase, node, k, ["trainer"])
    return _finish_pod(meta, spec, status, k, "tpfabric-operator", placed=state != "waiting")


def _other_pod(shape: ClusterShape, k: int) -> dict[str, Any]:
    """Return pod ``k`` that is not a worker: a DaemonSet, Deployment or finished batch pod."""
    p = k - shape.workers
    owner_kind, phase = "ReplicaSet", "Running"
    env: tuple[str, ...] = ("DB_HOST", "LOG_LEVEL", "REGION")
    affinity: dict[str, Any] = {}
    if p < 2 * shape.nodes:  # two DaemonSet pods per node
        node = shape.node_names[p % shape.nodes]
        app, namespace = (
            ("node-exporter", "monitoring")
            if p < shape.nodes
            else ("dcgm-exporter", "gpu-operator")
        )
        owner_kind, owner, name, env = "DaemonSet", app, f"{app}-{_suffix(k)}", ()
        pod_labels = {"app.kubernetes.io/name": app, "controller-revision-hash": "5d8f7c9b6d"}
        pinned = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        affinity = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [pinned]}
            }
        }
    else:
        q = p - 2 * shape.nodes
        node = shape.node_names[q % shape.nodes]
        if q % 4 == 3:  # a finished batch job's pod
            app, namespace, phase, owner_kind = f"etl-{q:06d}", "data", "Succeeded", "Job"
            owner, name = app, f"{app}-{_suffix(k)}"
            pod_labels = {"batch.kubernetes.io/job-name": app, "job-name": app}
        else:  # a Deployment's pod
            app, namespace = f"api-{q % 40:02d}", f"serving-{q % 8}"
            owner, name = f"{app}-7c9d5b8f4", f"{app}-7c9d5b8f4-{_suffix(k)}"
            pod_labels = {"app.kubernetes.io/name": app, "pod-template-hash": "7c9d5b8f4"}
    container = {
        "name": "main",
        "image": f"registry.example.com/{namespace}/{app}:1.{k % 50}.0",
        "args": [f"--name={app}", "--port=8080"],
        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
        "env": [{"name": key, "value": f"{key.lower()}-{k % 97}"} for key in env],
        "resources": {
            "limits": {"cpu": "2", "memory": "4Gi"},
            "requests": {"cpu": "500m", "memory": "1Gi"},
        },
        "volumeMounts": [
            {
                "name": f"kube-api-access-{_suffix(k)}",
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            }
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    spec: dict[str, Any] = {
        "volumes": [_api_access_volume(k)],
        "containers": [container],
        "restartPolicy": "Never" if phase == "Succeeded" else "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "nodeName": node,
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": _tolerations()[:2],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        **({"affinity": affinity} if affinity else {}),
    }
    reference = {
        "apiVersion": "batch/v1" if owner_kind == "Job" else "apps/v1",
        "kind": owner_kind,
        "name": owner,
        "uid": _uid("owner", f"{namespace}/{owner}"),
        "controller": True,
        "blockOwnerDeletion": True,
    }
    meta = {
        "name": name,
        "generateName": name[:-5],
        "namespace": namespace,
        "labels": pod_labels,
        "ownerReferences": [reference],
    }
    status = _pod_status(phase, node, k, ["main"])
    return _finish_pod(meta, spec, status, k, "kube-controller-manager", placed=True)


#: what the API server's defaulting and admission add to a pod: never in its creator's fields
_DEFAULTED_POD = frozenset(
    {
        "dnsPolicy",
        "enableServiceLinks",
        "preemptionPolicy",
        "priority",
        "schedulerName",
        "nodeName",  # the binding's, not the creator's
        "securityContext",
        "serviceAccount",
        "serviceAccountName",
        "terminationGracePeriodSeconds",
        "tolerations",
    }
)
_DEFAULTED_CONTAINER = frozenset(
    {"imagePullPolicy", "terminationMessagePath", "terminationMessagePolicy"}
)


def as_submitted(spec: dict[str, Any]) -> dict[str, Any]:
    """Return ``spec`` without what defaulting and the service-account admission added."""
    submitted = {k: v for k, v in spec.items() if k not in _DEFAULTED_POD}
    if spec.get("schedulerName") == SCHEDULER_NAME:
        submitted.pop("affinity", None)  # a worker's affinity is the placer's (its own entry)
    submitted["volumes"] = [v for v in spec.get("volumes", []) if "projected" not in v]
    for key in ("containers", "initContainers"):
        if key in spec:
            submitted[key] = [
                {
                    **{k: v for k, v in c.items() if k not in _DEFAULTED_CONTAINER},
                    "volumeMounts": [
                        m for m in c.get("volumeMounts", []) if "kube-api" not in m["name"]
                    ],
                }
                for c in spec[key]
            ]
    return submitted


def _finish_pod(
    meta: dict[str, Any],
    spec: dict[str, Any],
    status: dict[str, Any],
    k: int,
    creator: str,
    *,
    placed: bool,
) -> dict[str, Any]:
    """Return the pod with the fields the API server adds: uid, version, managedFields."""
    created = _time(k)
    submitted_meta = {key: v for key, v in meta.items() if key not in {"name", "namespace"}}
    submitted = {"metadata": submitted_meta, "spec": as_submitted(spec)}
    managed = [_managed(creator, created, submitted)]
    if placed and creator == "tpfabric-operator":
        released: dict[str, Any] = {
            "spec": {"affinity": spec.get("affinity"), "schedulingGates": {}}
        }
        managed.append(_managed("tpfabric-scheduler", _time(30 + k), released))
    if status.get("podIP"):
        managed.append(_managed("kubelet", _time(60 + k), {"status": status}, "status"))
    full_meta = {
        **meta,
        "uid": _uid("pod", f"{meta['namespace']}/{meta['name']}"),
        "resourceVersion": str(1_000_000 + k),
        "creationTimestamp": created,
        "managedFields": managed,
    }
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": full_meta,
        "spec": spec,
        "status": status,
    }


def api_pod(shape: ClusterShape, k: int) -> dict[str, Any]:
    """Return pod ``k`` of ``shape`` as the API server lists it (the workers come first)."""
    return _worker_pod(shape, k) if k < shape.workers else _other_pod(shape, k)


def api_node(shape: ClusterShape, k: int) -> dict[str, Any]:
    """Return node ``k`` of ``shape`` as the API server lists it (8 GPUs, labelled, images)."""
    node = shape.fabric.nodes[k]
    created = _time(k % 600)
    node_labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "dgx-h100",
        "topology.kubernetes.io/zone": f"zone-{k % 3}",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/mig.capable": "false",
        "feature.node.kubernetes.io/rdma.available": "true",
        **shape.fabric.node_labels(node),
    }
    annotations = {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "nfd.node.kubernetes.io/feature-labels": "rdma.available,pci-10de.present",
        "csi.volume.kubernetes.io/nodeid": json.dumps({"nfs.csi.k8s.io": node.name}),
    }
    quantities = {
        "cpu": "224",
        "memory": "2113407348Ki",
        "ephemeral-storage": "3748826740Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "nvidia.com/gpu": "8",
        "rdma/ib": "8",
        "pods": "110",
    }
    beat = _time(3_600 + k % 40)
    conditions = [
        {
            "type": t,
            "status": "False",
            "lastHeartbeatTime": beat,
            "lastTransitionTime": created,
            "reason": f"KubeletHas{r}",
            "message": f"kubelet has {m}",
        }
        for t, r, m in (
            ("MemoryPressure", "SufficientMemory", "sufficient memory available"),
            ("DiskPressure", "NoDiskPressure", "no disk pressure"),
            ("PIDPressure", "SufficientPID", "sufficient PID available"),
        )
    ] + [
        {
            "type": "Ready",
            "status": "True",
            "lastHeartbeatTime": beat,
            "lastTransitionTime": created,
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
        }
    ]
    images = [
        {
            "names": [
                f"registry.example.com/img-{i}@sha256:{(k * 7 + i):064x}",
                f"registry.example.com/img-{i}:v{i}",
            ],
            "sizeBytes": 10_000_000 * (i + 1),
        }
        for i in range(24)
    ]
    spec = {
        "podCIDR": f"10.{64 + k // 256 % 64}.{k % 256}.0/24",
        "podCIDRs": [f"10.{64 + k // 256 % 64}.{k % 256}.0/24"],
        "providerID": f"baremetal://{node.name}",
    }
    status = {
        "capacity": quantities,
        "allocatable": {**quantities, "cpu": "220"},
        "conditions": conditions,
        "addresses": [
            {"type": "InternalIP", "address": f"10.0.{k // 256}.{k % 256}"},
            {"type": "Hostname", "address": node.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": f"{k:032x}",
            "systemUUID": _uid("node", node.name),
            "bootID": _uid("boot", node.name),
            "kernelVersion": "6.8.0-45-generic",
            "osImage": "Ubuntu 24.04.1 LTS",
            "containerRuntimeVersion": "containerd://1.7.22",
            "kubeletVersion": "v1.37.0",
            "kubeProxyVersion": "v1.37.0",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "images": images,
    }
    meta = {"name": node.name, "labels": node_labels, "annotations": annotations}
    managed = [
        _managed("kubelet", created, {"metadata": meta, "spec": spec}),
        _managed("kubelet", beat, {"status": status}, "status"),
        _managed(
            "tpfabric-labeller", created, {"metadata": {"labels": shape.fabric.node_labels(node)}}
        ),
    ]
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            **meta,
            "uid": _uid("node", node.name),
            "resourceVersion": str(500_000 + k),
            "creationTimestamp": created,
            "managedFields": managed,
        },
        "spec": spec,
        "status": status,
    }


def api_job(shape: ClusterShape, job: int) -> dict[str, Any]:
    """Return TensorParallelJob ``job`` of ``shape`` as the API server lists it."""
    namespace, name = shape.job_name(job)
    state = shape.job_state(job)
    leaf = shape.leaves[shape.job_leaf(job)]
    spec = {
        "workers": JOB_WORKERS,
        "gpusPerWorker": 8,
        "tensorParallelSize": 8,
        "pipelineParallelSize": 1,
        "topology": {"mode": "required", "level": "leaf"},
        "rdma": {"resourceName": "rdma/ib", "count": 8, "gpuDirect": "preferred"},
        "template": {
            "metadata": {"labels": {"app.kubernetes.io/name": "llm-train", "team": namespace}},
            "spec": {
                "containers": [
                    {
                        "name": "trainer",
                        "image": _IMAGE,
                        "command": ["torchrun"],
                        "args": ["train.py"],
                    }
                ]
            },
        },
    }
    created = _time(job)
    if state == "waiting":
        placement = Placement(
            state=WAITING,
            message="no leaf has 8 free nodes with 8 GPUs",
            waiting_since=created,
            reasons=[
                DomainReason(level="leaf", domain="", reason=f"0 of {len(shape.leaves)} leaves fit")
            ],
        )
        phase = "Pending"
    else:
        leaf_label = shape.leaf_labels[shape.job_leaf(job)]
        placement = Placement(
            state=PLANNED,
            message=f"planned on leaf {leaf_label}",
            level="leaf",
            domain=leaf_label,
            domain_labels={labels.LEAF: leaf_label},
            nodes=leaf,
            hops=1,
            modelled_allreduce_us=812.5,
            planned_at=created,
            released_at=created,
        )
        phase = {"probe": "Pending", "running": "Running"}.get(state, "Succeeded")
    status = {"phase": phase, **stored_status(placement), "observedGeneration": 1}
    meta = {
        "name": name,
        "namespace": namespace,
        "uid": _uid("job", f"{namespace}/{name}"),
        "generation": 1,
        "resourceVersion": str(2_000_000 + job),
        "creationTimestamp": created,
    }
    managed = [
        {
            "manager": "kubectl",
            "operation": "Apply",
            "apiVersion": f"{GROUP}/{VERSION}",
            "time": created,
            "fieldsType": "FieldsV1",
            "fieldsV1": _fields({"spec": spec}),
        },
        {
            "manager": "tpfabric-scheduler",
            "operation": "Update",
            "apiVersion": f"{GROUP}/{VERSION}",
            "time": created,
            "fieldsType": "FieldsV1",
            "fieldsV1": _fields({"status": status}),
            "subresource": "status",
        },
    ]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TensorParallelJob",
        "metadata": {**meta, "managedFields": managed},
        "spec": spec,
        "status": status,
    }


# -- the fake API server ------------------------------------------------------------------------


class Page:
    """A list response as ``_preload_content=False`` returns it: the body in ``data``."""

    def __init__(self, data: bytes) -> None:
        self.data = data


@dataclass
class FakeList:
    """A list call of one kind serving ``count`` objects made by ``make(k)``, in pages.

    Honours ``limit`` (none or 0: everything in one page) and ``_continue`` like the API server:
    a page's ``metadata.continue`` is an opaque token for the next one, absent on the last; every
    page carries the snapshot's ``resourceVersion``. A page's body is built when it is asked for
    (never the whole list at once) unless :meth:`prebuild` built them all beforehand; then each
    call returns a fresh copy, as a client reads a fresh body off the wire. ``serve_s`` is the
    time spent making bodies, ``served`` the index range of each page, ``body_bytes`` the bytes
    of every body.
    """

    make: Callable[[int], dict[str, Any]]
    count: int
    version: str = "7777777"
    served: list[range] = field(default_factory=list)
    body_bytes: int = 0
    serve_s: float = 0.0
    _bodies: dict[tuple[int, int], bytes] = field(default_factory=dict, repr=False)

    def __call__(self, *, limit: int | None = None, _continue: str | None = None, **_: Any) -> Page:
        """Return the page that starts at ``_continue`` (the first without one)."""
        started = time.perf_counter()
        start = self._start(_continue) if _continue else 0
        end = min(self.count, start + limit) if limit else self.count
        built = self._bodies.get((start, end))
        body = bytes(memoryview(built)) if built is not None else self._body(start, end)
        self.served.append(range(start, end))
        self.body_bytes += len(body)
        self.serve_s += time.perf_counter() - started
        return Page(body)

    def prebuild(self, limit: int) -> None:
        """Build the body of every page of ``limit`` objects now (outside any measurement)."""
        for start in range(0, self.count, limit):
            end = min(self.count, start + limit)
            self._bodies[start, end] = self._body(start, end)

    def _body(self, start: int, end: int) -> bytes:
        meta = {"resourceVersion": self.version}
        if end < self.count:
            meta["continue"] = self._token(end)
        return b"".join(
            (
                b'{"kind":"List","apiVersion":"v1","metadata":',
                orjson.dumps(meta),
                b',"items":[',
                b",".join(orjson.dumps(self.make(k)) for k in range(start, end)),
                b"]}",
            )
        )

    def _token(self, start: int) -> str:
        text = json.dumps({"rv": self.version, "start": start})
        return base64.urlsafe_b64encode(text.encode()).decode()

    def _start(self, token: str) -> int:
        decoded = json.loads(base64.urlsafe_b64decode(token))
        if decoded.get("rv") != self.version:
            raise ValueError(f"continue token {token!r} is not of this list")
        return int(decoded["start"])


def fake_lists(shape: ClusterShape) -> dict[str, FakeList]:
    """Return the fake list calls of ``shape``'s nodes, TensorParallelJobs and pods, by kind."""
    return {
        "nodes": FakeList(lambda k: api_node(shape, k), shape.nodes),
        "tensorparalleljobs": FakeList(lambda k: api_job(shape, k), shape.jobs),
        "pods": FakeList(lambda k: api_pod(shape, k), shape.pods),
    }
