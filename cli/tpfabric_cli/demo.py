"""The README's main command: a local cluster of fake GPU nodes and pods placed on it.

Until the operator and the extender land this is the smoke demo: plain 8-GPU pods scheduled by the
real kube-scheduler onto kwok nodes, with the fabric position of each node shown, so one can see
how a topology-unaware scheduler spreads a job across leaves.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kubernetes import client
from rich.console import Console
from rich.table import Table

from tpfabric_core import labels
from tpfabric_core.fabric_description import FabricDescription
from tpfabric_localcluster.cluster import LocalCluster, api_client
from tpfabric_localcluster.nodes import GPU_RESOURCE, apply_fake_nodes, wait_ready

__all__ = ["run_demo"]

DEMO_PODS = 4


def _gpu_pod(name: str, gpus: int) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "tpfabric-demo"}},
        "spec": {
            "containers": [
                {
                    "name": "worker",
                    "image": "registry.invalid/tp-worker:demo",  # kwok never pulls images
                    "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
                }
            ]
        },
    }


def run_demo(
    fabric: FabricDescription, *, keep: bool, console: Console, log: Callable[[str], None]
) -> None:
    """Run the smoke demo on a fresh local cluster and print where the pods landed."""
    cluster = LocalCluster("tpfabric-demo", log=log)
    cluster.up()
    try:
        with api_client(cluster.kubeconfig) as api:
            names = apply_fake_nodes(api, fabric)
            wait_ready(api, names)
            console.print(f"{len(names)} fake GPU nodes Ready from fabric {fabric.name!r}")
            core = client.CoreV1Api(api)
            _wait_default_service_account(core)
            for i in range(DEMO_PODS):
                core.create_namespaced_pod("default", _gpu_pod(f"worker-{i}", fabric.node.gpus))
            pods = _wait_running(core, DEMO_PODS)
            nodes = {n.metadata.name: n.metadata.labels for n in core.list_node().items}
            table = Table(title="default kube-scheduler: 8-GPU pods on kwok nodes")
            for column in ("pod", "phase", "node", "leaf", "spine", "block"):
                table.add_column(column)
            leaves = set()
            for pod in pods:
                node_labels = nodes.get(pod.spec.node_name, {})
                leaves.add(node_labels.get(labels.LEAF))
                table.add_row(
                    pod.metadata.name,
                    pod.status.phase,
                    pod.spec.node_name,
                    node_labels.get(labels.LEAF, "?"),
                    node_labels.get(labels.SPINE, "?"),
                    node_labels.get(labels.BLOCK, "?"),
                )
            console.print(table)
            console.print(
                f"{DEMO_PODS} workers of one job span {len(leaves)} leaf domain(s) under the "
                "default scheduler."
            )
    finally:
        if keep:
            console.print(f"cluster left up: export KUBECONFIG={cluster.kubeconfig}")
        else:
            cluster.down()


def _wait_default_service_account(core: client.CoreV1Api, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(
            sa.metadata.name == "default"
            for sa in core.list_namespaced_service_account("default").items
        ):
            return
        time.sleep(0.25)
    raise TimeoutError("the default service account was not created (kube-controller-manager)")


def _wait_running(core: client.CoreV1Api, count: int, timeout: float = 90.0) -> list[client.V1Pod]:
    deadline = time.monotonic() + timeout
    pods: list[client.V1Pod] = []
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod("default", label_selector="app=tpfabric-demo").items
        if len(pods) == count and all(p.status.phase == "Running" for p in pods):
            return sorted(pods, key=lambda p: p.metadata.name)
        time.sleep(0.5)
    states = ", ".join(f"{p.metadata.name}={p.status.phase}" for p in pods)
    raise TimeoutError(f"demo pods not Running after {timeout:.0f}s: {states}")
