"""The README's main command: tpfabric end to end on the local control plane.

Brings up a cluster of fake 8-GPU nodes from a fabric description (labelled with its topology),
starts tpfabric's gang placer/extender, its own kube-scheduler and the operator, applies the
example TensorParallelJobs, shows where each rank landed and why, contrasts that with what the
default scheduler does with the same workers, writes a picture of the fabric, and cleans up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from rich.console import Console
from rich.table import Table

from tpfabric_core import labels
from tpfabric_core.api import GROUP, PLURAL, VERSION
from tpfabric_core.fabric_description import FabricDescription
from tpfabric_localcluster.cluster import LocalCluster, api_client
from tpfabric_localcluster.nodes import GPU_RESOURCE, apply_fake_nodes, wait_ready
from tpfabric_localcluster.tpfabric import start_operator, start_scheduling

__all__ = ["run_demo"]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"
SPREAD_PODS = 4


def _plain_gpu_pod(name: str, gpus: int) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "default-scheduler-contrast"}},
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
    fabric: FabricDescription,
    *,
    keep: bool,
    console: Console,
    log: Callable[[str], None],
    picture: Path | None = None,
) -> None:
    """Run the demo on a fresh local cluster; print placements; clean up unless ``keep``."""
    cluster = LocalCluster("tpfabric-demo", log=log)
    cluster.up()
    try:
        with api_client(cluster.kubeconfig) as api:
            names = apply_fake_nodes(api, fabric)
            wait_ready(api, names)
            console.print(
                f"[bold]{len(names)} fake 8-GPU nodes[/] Ready from fabric {fabric.name!r}, "
                "labelled with their block, spine, leaf and rail switches"
            )
            start_scheduling(cluster)
            start_operator(cluster)
            console.print("tpfabric placer/extender, its kube-scheduler and the operator are up")
            core = client.CoreV1Api(api)
            _wait_default_service_account(core)
            node_labels = {n.metadata.name: n.metadata.labels for n in core.list_node().items}
            _contrast_with_default_scheduler(core, fabric.node.gpus, node_labels, console)
            jobs = _apply_examples(api)
            for name in jobs:
                _show_job(api, name, node_labels, console)
            if picture is not None:
                _draw(cluster, picture, console)
    finally:
        if keep:
            console.print(f"cluster left up: export KUBECONFIG={cluster.kubeconfig}")
        else:
            cluster.down()


def _apply_examples(api: client.ApiClient) -> list[str]:
    custom = client.CustomObjectsApi(api)
    names = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        manifest: dict[str, Any] = yaml.safe_load(path.read_text())
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, manifest)
        names.append(str(manifest["metadata"]["name"]))
    return names


def _show_job(
    api: client.ApiClient,
    name: str,
    node_labels: dict[str, dict[str, str]],
    console: Console,
    timeout: float = 120.0,
) -> None:
    custom = client.CustomObjectsApi(api)
    deadline = time.monotonic() + timeout
    status: dict[str, Any] = {}
    told_waiting = False
    while time.monotonic() < deadline:
        job = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name)
        status = job.get("status") or {}
        if status.get("phase") in {"Running", "Failed"}:
            break
        if status.get("phase") == "Waiting" and not told_waiting:
            waiting = status.get("placement") or {}
            console.print(f"[yellow]{name} waits[/]: {waiting.get('message')}")
            told_waiting = True
        time.sleep(0.5)
    placement = status.get("placement") or {}
    console.rule(f"TensorParallelJob {name}: {status.get('phase', '?')} {status.get('ready', '')}")
    console.print(placement.get("message") or "no placement yet")
    for reason in placement.get("reasons") or []:
        console.print(f"  - {reason.get('reason')}")
    table = Table("rank", "node", "leaf", "spine", "rail-0 switch")
    for rank, node in enumerate(placement.get("nodes") or []):
        these = node_labels.get(node, {})
        table.add_row(
            str(rank),
            node,
            these.get(labels.LEAF, "?"),
            these.get(labels.SPINE, "?"),
            these.get(labels.rail_key(0), "?"),
        )
    console.print(table)


def _contrast_with_default_scheduler(
    core: client.CoreV1Api,
    gpus: int,
    node_labels: dict[str, dict[str, str]],
    console: Console,
    timeout: float = 60.0,
) -> None:
    """Show where the default scheduler puts 4 plain 8-GPU pods, then remove them."""
    for i in range(SPREAD_PODS):
        core.create_namespaced_pod("default", _plain_gpu_pod(f"plain-worker-{i}", gpus))
    deadline = time.monotonic() + timeout
    nodes: list[str] = []
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod(
            "default", label_selector="app=default-scheduler-contrast"
        ).items
        nodes = [p.spec.node_name for p in pods if p.spec.node_name]
        if len(nodes) == SPREAD_PODS:
            break
        time.sleep(0.5)
    leaves = {node_labels.get(n, {}).get(labels.LEAF) for n in nodes}
    console.rule("first, 4 workers as plain pods under the default kube-scheduler")
    console.print(
        f"{len(nodes)} workers on {len(leaves)} leaf domain(s): "
        + ", ".join(f"{n} ({node_labels.get(n, {}).get(labels.LEAF)})" for n in sorted(nodes))
    )
    selector = "app=default-scheduler-contrast"
    core.delete_collection_namespaced_pod("default", label_selector=selector)
    while core.list_namespaced_pod("default", label_selector=selector).items:
        time.sleep(0.5)


def _draw(cluster: LocalCluster, picture: Path, console: Console) -> None:
    from tpfabric_cli.fabric_picture import draw_fabric  # noqa: PLC0415 - matplotlib is slow
    from tpfabric_cli.topology import Sources, discover, domain_tree  # noqa: PLC0415

    tree = domain_tree(discover(Sources(cluster=True, kubeconfig=cluster.kubeconfig)))
    picture.parent.mkdir(parents=True, exist_ok=True)
    draw_fabric(tree, picture, picture.suffix.lstrip(".") or "png")
    console.print(f"fabric picture: {picture}")


def _wait_default_service_account(core: client.CoreV1Api, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        accounts = core.list_namespaced_service_account("default").items
        if any(sa.metadata.name == "default" for sa in accounts):
            return
        time.sleep(0.25)
    raise TimeoutError("the default service account was not created (kube-controller-manager)")
