"""Builders of Node, Pod and TensorParallelJob objects (dicts as the API returns them)."""

from __future__ import annotations

from typing import Any

from tpfabric_core import labels
from tpfabric_core.api import ATTEMPT_LABEL, GANG_GATE, JOB_LABEL, WORKER_INDEX_LABEL


def a_node(
    name: str,
    leaf: str,
    spine: str = "su1",
    *,
    gpus: int = 8,
    ready: bool = True,
    health: str = "ok",
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {
                labels.LEAF: leaf,
                labels.SPINE: spine,
                labels.BLOCK: "b1",
                labels.HEALTH: health,
            },
        },
        "spec": {},
        "status": {
            "allocatable": {
                "nvidia.com/gpu": str(gpus),
                "rdma/ib": "8",
                "cpu": "128",
                "pods": "110",
            },
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def a_worker(
    job: str,
    index: int,
    *,
    namespace: str = "ns",
    node: str | None = None,
    gated: bool = True,
    gpus: int = 8,
    attempt: int | None = 0,
) -> dict[str, Any]:
    labels = {JOB_LABEL: job, WORKER_INDEX_LABEL: str(index)}
    if attempt is not None:  # the operator labels every worker with its attempt
        labels[ATTEMPT_LABEL] = str(attempt)
    return {
        "metadata": {
            "name": f"{job}-worker-{index}",
            "namespace": namespace,
            "uid": f"uid-{job}-{index}",
            "labels": labels,
        },
        "spec": {
            "nodeName": node,
            "schedulingGates": [{"name": GANG_GATE}] if gated else [],
            "containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


def a_job(
    name: str,
    workers: int,
    *,
    namespace: str = "ns",
    plan: tuple[str, str, list[str]] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if plan is not None:
        level, domain, nodes = plan
        status["placement"] = {"state": "Planned", "level": level, "domain": domain, "nodes": nodes}
    return {
        "apiVersion": "tpfabric.io/v1alpha1",
        "kind": "TensorParallelJob",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "generation": 1},
        "spec": {
            "workers": workers,
            "tensorParallelSize": 8,
            "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
        },
        "status": status,
    }


def extender_args(pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    return {"Pod": pod, "Nodes": None, "NodeNames": nodes}
