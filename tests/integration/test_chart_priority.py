"""The chart's critical priority classes install into a normal namespace, also where the API
server limits them.

The scheduler and the gang webhook run `system-cluster-critical`, the fabric agent
`system-node-critical`, by default. An upstream API server admits those classes in any namespace
(checked here too); a managed one may limit them to kube-system by ResourceQuota admission's
`limitedResources` (GKE does): there a pod of those classes is admitted only in a namespace with
a ResourceQuota of that scope, which the chart makes (`criticalPodsQuota`). A control plane of its
own for this module, its API server configured as such a platform's.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from control_plane_fixtures import LOGS, wait_for
from tpfabric_core.fabric_description import parse_fabric_description
from tpfabric_localcluster.cluster import LocalCluster, api_client
from tpfabric_localcluster.nodes import apply_fake_nodes, wait_ready
from tpfabric_localcluster.toolchain import find_toolchain

pytestmark = pytest.mark.integration

CHART = Path(__file__).resolve().parents[2] / "charts" / "tpfabric"
CRITICAL = ["system-cluster-critical", "system-node-critical"]
#: ResourceQuota admission as managed clusters configure it: the critical classes only where a
#: quota of their scope exists
LIMITED = {
    "apiVersion": "apiserver.config.k8s.io/v1",
    "kind": "AdmissionConfiguration",
    "plugins": [
        {
            "name": "ResourceQuota",
            "configuration": {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "ResourceQuotaConfiguration",
                "limitedResources": [
                    {
                        "resource": "pods",
                        "matchScopes": [
                            {"scopeName": "PriorityClass", "operator": "In", "values": CRITICAL}
                        ],
                    }
                ],
            },
        }
    ],
}
ONE_NODE = """
name: one
rails: 1
node: {gpus: 8, rdma: 8, cpu: "128", memory: 2Ti, pods: 110}
blocks:
- name: one
  spines:
  - name: one-su
    leaves:
    - {name: one-leaf1, nodes: ["one-01"]}
"""


@pytest.fixture(scope="module")
def limiting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A control plane whose API server limits the critical classes, with one kwok node."""
    cluster = LocalCluster(
        f"prio-{uuid.uuid4().hex[:6]}",
        state_root=tmp_path_factory.mktemp("clusters-prio"),
        admission_config=LIMITED,
    )
    cluster.up()
    with api_client(cluster.kubeconfig) as api:
        names = apply_fake_nodes(api, parse_fabric_description(ONE_NODE))
        wait_ready(api, names)
    yield cluster
    cluster.down(keep_logs=LOGS / cluster.name)


def helm(cluster: LocalCluster, home: Path, *args: str, values: dict[str, Any]) -> None:
    env = {**os.environ, **{f"HELM_{k}_HOME": str(home / k) for k in ("CACHE", "CONFIG", "DATA")}}
    done = subprocess.run(
        [str(find_toolchain(("helm",)).path("helm")), *args, f"--kubeconfig={cluster.kubeconfig}",
         "--values", "-"],
        input=yaml.safe_dump(values), capture_output=True, text=True, timeout=180, check=False,
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def install(cluster: LocalCluster, home: Path, release: str, **values: Any) -> tuple[str, str]:
    """Install the chart as ``release`` into a namespace of its own, the agent in another;
    return both namespaces."""
    namespace, agents = release, f"{release}-agents"
    with api_client(cluster.kubeconfig) as api:
        for name in (namespace, agents):
            client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    helm(
        cluster, home, "install", release, str(CHART), "-n", namespace,
        values={
            "crds": {"enabled": release == "tpf"},
            "gangWebhook": {"enabled": True},
            "fabricAgent": {"enabled": True, "namespace": agents},
            **values,
        },
    )  # fmt: skip
    return namespace, agents


def pods(api: client.ApiClient, namespace: str) -> dict[str, int]:
    """Return the priority of each pod of ``namespace`` by component."""
    return {
        p.metadata.labels.get("app.kubernetes.io/component", ""): p.spec.priority
        for p in client.CoreV1Api(api).list_namespaced_pod(namespace).items
    }


def test_the_critical_pods_are_admitted_in_normal_namespaces_by_the_charts_quota(
    limiting: LocalCluster, tmp_path: Path
) -> None:
    namespace, agents = install(limiting, tmp_path, "tpf")
    with api_client(limiting.kubeconfig) as api:
        critical = wait_for(
            lambda: (
                (found := pods(api, namespace)).keys() >= {"scheduler", "gang-webhook"} and found
            ),
            60,
            what="the scheduler's and the gang webhook's pods admitted",
        )
        assert critical["scheduler"] == critical["gang-webhook"] == 2_000_000_000
        agent = wait_for(lambda: pods(api, agents), 60, what="the fabric agent's pod admitted")
        assert agent == {"fabric-agent": 2_000_001_000}


def test_without_the_quota_such_a_platform_refuses_them(
    limiting: LocalCluster, tmp_path: Path
) -> None:
    namespace, _ = install(limiting, tmp_path, "noquota", criticalPodsQuota={"enabled": False})
    with api_client(limiting.kubeconfig) as api:

        def refused() -> list[str]:
            events = client.CoreV1Api(api).list_namespaced_event(
                namespace, field_selector="reason=FailedCreate"
            )
            return [e.message for e in events.items if "insufficient quota" in e.message]

        (message, *_) = wait_for(refused, 60, what="the ReplicaSets' FailedCreate events")
        assert "insufficient quota to match these scopes: [{PriorityClass In" in message
        assert "system-cluster-critical" in message
        assert "scheduler" not in pods(api, namespace)
        assert "gang-webhook" not in pods(api, namespace)
