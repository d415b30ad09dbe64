"""Gangs the operator makes next to the rest of the cluster, on the local control plane: real
kube-apiserver, kube-controller-manager, kube-scheduler (tpfabric's profile with the extender), kwok
nodes, the real placer/extender and the operator process.

- a node deleted under a running gang: the gang's next attempt is planned again at once;
- a node kube-scheduler's own filters refuse (pod anti-affinity against another tenant's pod) is
  left out of the next plan, and the status names it;
- a gang on a degraded node moves only where it would run faster: across an oversubscribed
  block uplink is not, off a link the agent measured at half rate; it is off one at a quarter.

Each test brings its own nodes (``nodes`` of test_gang_boundaries.py, or ``two_spines``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from test_gang_boundaries import fill_with_tenants, nodes, tenant_pod
from test_operator import Tpj, operator, small_job

from control_plane_fixtures import FabricFactory, clear_jobs_and_pods, wait_for
from tpfabric_core import labels
from tpfabric_core.fabric.link_publish import DETAIL_ANNOTATION
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


TWO_SPINES = """
name: two-spines
rails: 8
railOptimized: true
rdmaResource: rdma/ib
node: {gpus: 8, rdma: 8, cpu: "128", memory: 2Ti, pods: 110}
blocks:
- name: mv
  spines:
  - name: mv-su1
    leaves:
    - {name: mv-leaf1, nodes: ["mv-a-[01-02]"]}
  - name: mv-su2
    leaves:
    - {name: mv-leaf2, nodes: ["mv-b-01"]}
"""


@pytest.fixture
def two_spines(
    api: client.ApiClient, operator: LocalCluster, fake_nodes: FabricFactory, namespace: str
) -> Iterator[list[str]]:
    """Return three nodes: two under one leaf of spine 1, one under spine 2 (one block)."""
    yield fake_nodes(TWO_SPINES)
    clear_jobs_and_pods(api, namespace)


def slow_rail(core: client.CoreV1Api, node: str, bandwidth: float) -> None:
    """Label ``node`` degraded with one rail keeping ``bandwidth``, as the fabric agent does."""
    rate = round(400 * bandwidth)
    rail = {
        "hca": "mlx5_2",
        "state": "degraded",
        "bandwidth": bandwidth,
        "reasons": [f"rate {rate} Gb/s, expected 400, on mlx5_2 port 1"],
    }
    detail = json.dumps({"state": "degraded", "rails": {"2": rail}}, separators=(",", ":"))
    meta = {"labels": {labels.HEALTH: "degraded"}, "annotations": {DETAIL_ANNOTATION: detail}}
    core.patch_node(node, {"metadata": meta})


def test_a_gang_moves_off_a_degraded_node_only_where_it_would_run_faster(
    api: client.ApiClient, operator: LocalCluster, namespace: str, two_spines: list[str]
) -> None:
    """The only healthy room for a two-worker gang on ``mv-a-01`` spans the two spines: the
    cost model's 2:1 block uplink with a quarter of it taken keeps 0.375 of a link, less than
    the 0.5 a rail retrained to half rate keeps, so the placer offers no room and the job keeps
    running; once the rail keeps a quarter, the same room is faster and the job moves there."""
    tpj = Tpj(api, operator, namespace)
    core = client.CoreV1Api(api)
    ours = {"key": "kubernetes.io/hostname", "operator": "In", "values": two_spines}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [ours]}]
            }
        }
    }
    manifest = small_job(
        "mover",
        2,
        topology={"mode": "preferred", "level": "leaf", "onDegradedLink": "restart-elsewhere"},
        failurePolicy={"backoffSeconds": 1},
    )
    manifest["spec"]["template"]["spec"]["affinity"] = affinity
    tpj.apply(manifest)
    first = tpj.wait_phase("mover", "Running", timeout=60)["placement"]["nodes"]
    assert sorted(first) == ["mv-a-01", "mv-a-02"]
    sick = "mv-a-01"
    slow_rail(core, sick, 0.5)

    def answer(found: bool) -> dict[str, Any] | None:
        room = tpj.status("mover")["placement"].get("healthyRoom") or {}
        return room if room.get("found") is found and room.get("degradedNodes") == [sick] else None

    room = wait_for(
        lambda: answer(False),
        timeout=30,
        what="the placer's answer: no faster room",
        explain=lambda: str(tpj.status("mover")["placement"].get("healthyRoom")),
    )
    assert room["message"].startswith(
        f"no faster room for the whole gang: block 'mv' has room off {sick}, but modelled "
        "all-reduce "
    ), room
    assert room["message"].endswith(
        "where it runs, its degraded links keeping 0.5 of their rate"
    ), room
    words = wait_for(
        lambda: (
            "no faster room" in (m := tpj.condition("mover", "Degraded").get("message", "")) and m
        ),
        timeout=20,
        what="the Degraded condition saying the job keeps running",
    )
    assert "; kept running: no faster room for the whole gang: " in words
    status = tpj.status("mover")
    assert (status.get("attempt", 0), status["placement"]["nodes"]) == (0, first)

    slow_rail(core, sick, 0.25)  # worse: the room across the spines is faster now
    wait_for(
        lambda: answer(True),
        timeout=30,
        what="the placer's answer: room found",
        explain=lambda: str(tpj.status("mover")["placement"].get("healthyRoom")),
    )

    def moved() -> list[str] | None:
        pods = tpj.pods("mover")
        running = [p.spec.node_name for p in pods if p.status.phase == "Running"]
        return running if len(running) == 2 and sick not in running else None

    after = wait_for(moved, timeout=60, what="the gang running off the degraded node")
    assert sorted(after) == ["mv-a-02", "mv-b-01"]
    status = tpj.status("mover")
    assert (status["attempt"], status["restarts"], status["movedOffNodes"]) == (1, 0, [sick])
