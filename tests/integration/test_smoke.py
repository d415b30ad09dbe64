"""The local control plane behaves like Kubernetes: scheduling, kwok, CRDs, garbage collection."""

from __future__ import annotations

from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from control_plane_fixtures import FabricFactory, run_kubectl, wait_for
from tpfabric_core import labels
from tpfabric_core.fabric_description import uniform_fabric
from tpfabric_localcluster.cluster import LocalCluster


def gpu_pod(name: str, gpus: int = 8) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "w",
                    "image": "registry.invalid/w:1",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ]
        },
    }


def test_scheduler_binds_an_8_gpu_pod_to_a_kwok_node_that_runs_it(
    api: client.ApiClient, namespace: str, fake_nodes: FabricFactory
) -> None:
    nodes = fake_nodes(uniform_fabric(2, name="smoke"))
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, gpu_pod("w0"))

    pod = wait_for(
        lambda: (p := core.read_namespaced_pod("w0", namespace)).status.phase == "Running" and p,
        what="pod w0 Running",
    )
    assert pod.spec.node_name in nodes
    node = core.read_node(pod.spec.node_name)
    assert node.metadata.labels[labels.LEAF] == "leaf-001"
    assert node.status.allocatable["nvidia.com/gpu"] == "8"

    core.delete_namespaced_pod("w0", namespace)

    def gone() -> bool:
        try:
            core.read_namespaced_pod("w0", namespace)
        except ApiException as err:
            return err.status == 404
        return False

    wait_for(gone, what="pod w0 deleted")


def test_a_pod_asking_for_more_gpus_than_any_node_has_stays_pending_with_the_reason(
    api: client.ApiClient, namespace: str, fake_nodes: FabricFactory
) -> None:
    fake_nodes(uniform_fabric(1, name="tiny"))
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, gpu_pod("big", gpus=16))

    def unschedulable_message() -> str:
        pod = core.read_namespaced_pod("big", namespace)
        for condition in pod.status.conditions or []:
            if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
                return str(condition.message)
        return ""

    message = wait_for(unschedulable_message, what="PodScheduled=False/Unschedulable")
    assert "Insufficient nvidia.com/gpu" in message


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.smoke.tpfabric.io"},
    "spec": {
        "group": "smoke.tpfabric.io",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"size": {"type": "integer", "minimum": 1}},
                            }
                        },
                    }
                },
            }
        ],
    },
}


def kubectl(cluster: LocalCluster, *args: str, stdin: str | None = None) -> str:
    done = run_kubectl(cluster, *args, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_crd_applied_with_kubectl_is_served(local_cluster: LocalCluster, namespace: str) -> None:
    kubectl(local_cluster, "apply", "-f", "-", stdin=yaml.safe_dump(CRD))
    kubectl(local_cluster, "wait", "--for=condition=Established", "crd/widgets.smoke.tpfabric.io")
    widget = {
        "apiVersion": "smoke.tpfabric.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w1", "namespace": namespace},
        "spec": {"size": 3},
    }
    kubectl(local_cluster, "apply", "-f", "-", stdin=yaml.safe_dump(widget))
    out = kubectl(local_cluster, "get", "widgets", "-n", namespace, "-o", "yaml")
    items = yaml.safe_load(out)["items"]
    assert [(w["metadata"]["name"], w["spec"]["size"]) for w in items] == [("w1", 3)]


def test_the_api_server_validates_a_crd_schema(local_cluster: LocalCluster, namespace: str) -> None:
    kubectl(local_cluster, "apply", "-f", "-", stdin=yaml.safe_dump(CRD))
    kubectl(local_cluster, "wait", "--for=condition=Established", "crd/widgets.smoke.tpfabric.io")
    bad = {
        "apiVersion": "smoke.tpfabric.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w2", "namespace": namespace},
        "spec": {"size": 0},
    }
    done = run_kubectl(local_cluster, "apply", "-f", "-", stdin=yaml.safe_dump(bad))
    assert done.returncode != 0
    assert "spec.size" in done.stderr


def test_controller_manager_garbage_collects_owned_objects(
    api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(
        namespace,
        {
            "metadata": {
                "name": "owned",
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": "owner",
                        "uid": owner.metadata.uid,
                    }
                ],
            }
        },
    )
    core.delete_namespaced_config_map("owner", namespace)

    def owned_gone() -> bool:
        names = [c.metadata.name for c in core.list_namespaced_config_map(namespace).items]
        return "owned" not in names

    wait_for(owned_gone, timeout=60, what="garbage collection of the owned ConfigMap")


def test_the_state_folder_holds_every_component_log(local_cluster: LocalCluster) -> None:
    logs = {p.stem for p in (local_cluster.folder / "logs").iterdir()}
    assert logs >= {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
    assert Path(local_cluster.kubeconfig).stat().st_mode & 0o077 == 0
