"""Gangs the operator makes next to the rest of the cluster (issue 31), on the local control
plane: real kube-apiserver, kube-controller-manager, kube-scheduler (tpfabric's profile with the
extender), kwok nodes, the real placer/extender and the operator process.

- a node deleted under a running gang: the gang's next attempt is planned again at once;
- a node kube-scheduler's own filters refuse (pod anti-affinity against another tenant's pod) is
  left out of the next plan, and the status names it.

Each test brings its own eight nodes (``nodes`` of test_gang_boundaries.py).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from test_gang_boundaries import fill_with_tenants, nodes, tenant_pod
from test_operator import Tpj, operator, small_job

from control_plane_fixtures import wait_for
from tpfabric_localcluster.cluster import LocalCluster

__all__ = ["nodes", "operator"]  # fixtures: the module's operator process, the test's nodes


def test_a_gang_whose_node_was_deleted_is_planned_again_and_runs(
    api: client.ApiClient, operator: LocalCluster, namespace: str, nodes: list[str]
) -> None:
    tpj = Tpj(api, operator, namespace)
    tpj.apply(small_job("llm", 2, failurePolicy={"backoffSeconds": 1}))
    tpj.wait_phase("llm", "Running", timeout=60)
    first = tpj.status("llm")["placement"]["nodes"]
    gone = first[1]
    core = client.CoreV1Api(api)
    core.delete_node(gone)
    # pod GC force-deletes a deleted node's pods after its 40 s quarantine; do it now
    for pod in tpj.pods("llm"):
        if pod.spec.node_name == gone:
            core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)

    def running_again() -> dict[str, Any] | None:
        status = tpj.status("llm")
        placement = status.get("placement") or {}
        again = (
            status.get("phase") == "Running"
            and status.get("attempt", 0) >= 1
            and gone not in placement.get("nodes", [gone])
        )
        return status if again else None

    status = wait_for(
        running_again,
        timeout=60,
        what="the gang running again without the deleted node",
        explain=lambda: str(tpj.status("llm").get("placement")),
    )
    assert len(status["placement"]["nodes"]) == 2


def test_a_node_kube_scheduler_refuses_is_left_out_of_the_next_plan(
    api: client.ApiClient, operator: LocalCluster, namespace: str, nodes: list[str]
) -> None:
    core = client.CoreV1Api(api)
    tpj = Tpj(api, operator, namespace)
    # leaf1 has exactly two free nodes, one of which runs a pod the workers must avoid: the
    # placer does not model anti-affinity against other tenants' pods, kube-scheduler does
    fill_with_tenants(api, namespace, "bnd-l1-03", "bnd-l1-04")
    core.create_namespaced_pod(
        namespace, tenant_pod("db", "bnd-l1-01", gpus=0, labels={"app": "db"})
    )
    avoid_db = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"app": "db"}},
                }
            ]
        }
    }
    template = {"spec": {"affinity": avoid_db, "containers": [{"name": "w", "image": "x"}]}}
    tpj.apply(small_job("apart", 2, template=template))

    def running_without_db() -> dict[str, Any] | None:
        status = tpj.status("apart")
        placement = status.get("placement") or {}
        ok = status.get("phase") == "Running" and "bnd-l1-01" not in placement.get("nodes", [])
        return placement if ok else None

    placement = wait_for(
        running_without_db,
        timeout=90,  # the bind bound on the local control plane is 30 s
        what="the gang running off the node kube-scheduler refuses",
        explain=lambda: str(tpj.status("apart").get("placement")),
    )
    refused = {r["node"]: r["reason"] for r in placement.get("refusedNodes") or []}
    assert "bnd-l1-01" in refused, placement
    assert "anti-affinity" in refused["bnd-l1-01"]
