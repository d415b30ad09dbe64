"""Fake GPU nodes from a fabric description, managed by kwok.

Each node reports ``nvidia.com/gpu``, the fabric's RDMA extended resource, cpu, memory and pods,
and carries the canonical ``topology.tpfabric.io/`` labels of its place in the fabric. kwok
(``--manage-nodes-with-annotation-selector``) keeps the nodes Ready and plays the kubelet for pods
bound to them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tpfabric_core.fabric_description import FabricDescription, FabricNode
from tpfabric_core.pod_wiring import GPU_RESOURCE
from tpfabric_localcluster.cluster import KWOK_NODE_ANNOTATION

__all__ = ["GPU_RESOURCE", "apply_fake_nodes", "delete_nodes", "fake_node_manifest", "wait_ready"]

FAKE_NODE_LABEL = "tpfabric.io/fake-node"
NOT_READY_TAINTS = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}


def fake_node_manifest(fabric: FabricDescription, node: FabricNode) -> dict[str, Any]:
    """Return the Node object for ``node`` (labels, kwok annotation, capacity)."""
    resources = fabric.node
    capacity = {
        "cpu": resources.cpu,
        "memory": resources.memory,
        "pods": str(resources.pods),
        "ephemeral-storage": "1Ti",
        GPU_RESOURCE: str(resources.gpus),
        fabric.rdma_resource: str(resources.rdma),
    }
    key, value = KWOK_NODE_ANNOTATION
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "annotations": {key: value},
            "labels": {
                "kubernetes.io/hostname": node.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                FAKE_NODE_LABEL: "true",
                **fabric.node_labels(node),
            },
        },
        "spec": {},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def apply_fake_nodes(api: client.ApiClient, fabric: FabricDescription) -> list[str]:
    """Create (or update the labels and capacity of) every node of ``fabric``; return names."""
    core = client.CoreV1Api(api)
    names = []
    for node in fabric.nodes:
        manifest = fake_node_manifest(fabric, node)
        try:
            core.create_node(manifest)
        except ApiException as err:
            if err.status != 409:
                raise
            core.patch_node(node.name, {"metadata": {"labels": manifest["metadata"]["labels"]}})
            core.patch_node_status(node.name, {"status": manifest["status"]})
        names.append(node.name)
    return names


def delete_nodes(api: client.ApiClient, names: Iterable[str]) -> None:
    """Delete the named nodes (missing ones are fine)."""
    core = client.CoreV1Api(api)
    for name in names:
        try:
            core.delete_node(name)
        except ApiException as err:
            if err.status != 404:
                raise


def wait_ready(api: client.ApiClient, names: Iterable[str], timeout: float = 60.0) -> None:
    """Wait until every named node is Ready and schedulable; TimeoutError names the others.

    The node lifecycle controller taints new nodes ``node.kubernetes.io/not-ready`` until it has
    seen them Ready; a node still carrying that taint is not usable yet.
    """
    core = client.CoreV1Api(api)
    pending = set(names)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for node in core.list_node(label_selector=f"{FAKE_NODE_LABEL}=true").items:
            conditions = {c.type: c.status for c in (node.status.conditions or [])}
            taints = {t.key for t in node.spec.taints or []}
            if conditions.get("Ready") == "True" and not taints & NOT_READY_TAINTS:
                pending.discard(node.metadata.name)
        if pending:
            time.sleep(0.5)
    if pending:
        sample = ", ".join(sorted(pending)[:5])
        raise TimeoutError(f"{len(pending)} fake nodes not Ready after {timeout:.0f}s: {sample}")
