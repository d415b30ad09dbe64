"""The extender and gang placer inside a real kube-scheduler, on 64 kwok nodes in 8 leaves.

Every test checks the gang invariant on the way: a job's pods are either all gated or all bound,
never some of each once the job has settled.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from control_plane_fixtures import Jobs, clear_jobs_and_pods, wait_for
from tpfabric_core import labels
from tpfabric_core.api import GANG_GATE, GROUP, PLURAL, VERSION
from tpfabric_localcluster.cluster import KWOK_NODE_ANNOTATION, LocalCluster
from tpfabric_localcluster.nodes import wait_ready
from tpfabric_localcluster.tpfabric import EXTENDER, metrics_url, start_extender

SMALL = Path(__file__).parents[2] / "examples" / "fabrics" / "small.yaml"


def filler_pod(name: str, node: str) -> dict[str, Any]:
    """Return a pod bound straight to ``node`` that takes all its GPUs (fragments a leaf)."""
    return {
        "metadata": {"name": name, "labels": {"role": "filler"}},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "f", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
            ],
        },
    }


def fill_leaves(
    api: client.ApiClient,
    namespace: str,
    fabric_nodes: dict[str, dict[str, str]],
    keep_free: Callable[[str], int],
) -> None:
    """Fill every leaf but its first ``keep_free(leaf)`` nodes (by name) with filler pods."""
    core = client.CoreV1Api(api)
    by_leaf: dict[str, list[str]] = {}
    for node, node_labels in sorted(fabric_nodes.items()):
        by_leaf.setdefault(node_labels[labels.LEAF], []).append(node)
    for leaf, nodes in by_leaf.items():
        for node in nodes[keep_free(leaf) :]:
            core.create_namespaced_pod(namespace, filler_pod(f"fill-{node}", node))
    wait_for(
        lambda: all(
            p.status.phase == "Running"
            for p in core.list_namespaced_pod(namespace, label_selector="role=filler").items
        ),
        what="filler pods Running",
    )


@pytest.fixture
def jobs(api: client.ApiClient, namespace: str, scheduling: LocalCluster) -> Iterator[Jobs]:
    yield Jobs(api, namespace)
    clear_jobs_and_pods(api, namespace)


def leaves_of(nodes: list[str], fabric_nodes: dict[str, dict[str, str]]) -> set[str]:
    return {fabric_nodes[n][labels.LEAF] for n in nodes}


def test_jobs_of_2_4_and_8_workers_each_land_inside_one_leaf(
    jobs: Jobs, fabric_nodes: dict[str, dict[str, str]]
) -> None:
    for name, workers in (("two", 2), ("four", 4), ("eight", 8)):
        jobs.create(name, workers)
    used: list[str] = []
    for name, workers in (("two", 2), ("four", 4), ("eight", 8)):
        jobs.wait_running(name)
        nodes = jobs.nodes(name)
        assert len(leaves_of(nodes, fabric_nodes)) == 1, (name, nodes)
        assert len(set(nodes)) == workers
        placement = jobs.placement(name)
        assert placement["state"] == "Planned"
        assert placement["level"] == "leaf"
        assert nodes == placement["nodes"], "each worker index sits on its planned rank's node"
        assert placement["hops"] == 1
        used += nodes
    assert len(set(used)) == 14


def test_a_gang_without_attempt_labels_is_planned_whole_not_from_its_first_workers(
    jobs: Jobs, fabric_nodes: dict[str, dict[str, str]]
) -> None:
    # another controller's pods carry no tpfabric.io/attempt: a worker created after an early
    # plan could not be told from a replacement (the placer once planned such a gang from its
    # first two workers, moved the rest as replacements and deleted the gang when the last
    # rank found no node in its full leaf)
    jobs.create("slow", 8, made=2)
    time.sleep(3)  # several placer cycles: the gang is not whole, so it is not planned
    assert jobs.placement("slow").get("state") != "Planned", jobs.explain("slow")
    assert all(p.spec.scheduling_gates for p in jobs.pods("slow")), "both workers stay gated"
    jobs.make_workers("slow", range(2, 8))
    jobs.wait_running("slow")
    nodes = jobs.nodes("slow")
    assert len(leaves_of(nodes, fabric_nodes)) == 1, nodes
    placement = jobs.placement("slow")
    assert placement["state"] == "Planned"
    assert nodes == placement["nodes"]
    assert not placement.get("replacedRanks"), placement["message"]


def test_a_16_worker_job_lands_in_the_smallest_domain_that_fits(
    jobs: Jobs, fabric_nodes: dict[str, dict[str, str]]
) -> None:
    jobs.create("big", 16, mode="preferred", level="leaf")
    jobs.wait_running("big")
    nodes = jobs.nodes("big")
    assert len(leaves_of(nodes, fabric_nodes)) == 2  # 8 nodes per leaf: two whole leaves
    assert len({fabric_nodes[n][labels.SPINE] for n in nodes}) == 1
    placement = jobs.placement("big")
    assert placement["level"] == "spine"


def test_with_fragmented_leaves_a_job_goes_to_the_only_leaf_it_fits(
    api: client.ApiClient, jobs: Jobs, namespace: str, fabric_nodes: dict[str, dict[str, str]]
) -> None:
    target = "su2-leaf3"
    # every other leaf keeps only 3 free nodes
    fill_leaves(api, namespace, fabric_nodes, lambda leaf: 4 if leaf == target else 3)
    jobs.create("squeezed", 4)
    jobs.wait_running("squeezed")
    assert leaves_of(jobs.nodes("squeezed"), fabric_nodes) == {target}


def test_a_leaf_is_not_cut_down_to_a_fragment_the_typical_gang_could_not_use(
    api: client.ApiClient, jobs: Jobs, namespace: str, fabric_nodes: dict[str, dict[str, str]]
) -> None:
    custom = client.CustomObjectsApi(api)
    seven, eight = sorted({node_labels[labels.LEAF] for node_labels in fabric_nodes.values()})[:2]
    # every other leaf full
    fill_leaves(api, namespace, fabric_nodes, lambda leaf: {seven: 7, eight: 8}.get(leaf, 0))
    # the jobs this cluster ran before: 2-worker gangs (a TensorParallelJob the placer knows,
    # its pods long gone); created before the new job, so the placer's watch shows them first
    for k in range(3):
        custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "TensorParallelJob",
                "metadata": {"name": f"earlier-{k}"},
                "spec": {
                    "workers": 2,
                    "tensorParallelSize": 8,
                    "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
                },
            },
        )
    jobs.create("six", 6)
    jobs.wait_running("six")
    # best fit alone takes the 7-node leaf and strands 1 node no 2-node gang can use
    assert leaves_of(jobs.nodes("six"), fabric_nodes) == {eight}
    reasons = [r["reason"] for r in jobs.placement("six")["reasons"]]
    assert any(f"kept leaf {seven!r} from becoming a fragment" in r for r in reasons), reasons


def test_the_pods_of_a_plan_dropped_by_a_placer_that_stopped_midway_are_deleted(
    api: client.ApiClient, jobs: Jobs, namespace: str
) -> None:
    jobs.create("dropped", 2)
    jobs.wait_running("dropped")
    # what a placer killed between its two steps leaves: the plan dropped (Replanning written,
    # so the operator charges nothing) but the released pods never deleted
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        "dropped",
        {"status": {"placement": {"state": "Replanning", "nodes": [], "message": "taken"}}},
    )
    wait_for(
        lambda: all(p.metadata.deletion_timestamp for p in jobs.pods("dropped")),
        timeout=30,
        what="the dropped plan's pods deleted",
    )


def test_a_job_that_cannot_fit_waits_gated_with_the_reason_then_runs_when_capacity_frees(
    api: client.ApiClient, jobs: Jobs, namespace: str, fabric_nodes: dict[str, dict[str, str]]
) -> None:
    core = client.CoreV1Api(api)
    by_leaf: dict[str, list[str]] = {}
    for node, node_labels in sorted(fabric_nodes.items()):
        by_leaf.setdefault(node_labels[labels.LEAF], []).append(node)
    for nodes in by_leaf.values():
        for node in nodes[3:]:  # 3 free nodes per leaf: a 4-worker leaf job fits nowhere
            core.create_namespaced_pod(namespace, filler_pod(f"fill-{node}", node))
    jobs.create("waiter", 4)

    placement = wait_for(
        lambda: (p := jobs.placement("waiter")).get("state") == "Waiting" and p,
        what="Waiting placement",
    )
    assert "4" in placement["message"]
    assert len(placement["reasons"]) == 5, "bounded: the best five of the 8 leaves"
    assert "5 of 8 leaf domains" in placement["message"]
    assert all("3/4 workers fit" in r["reason"] for r in placement["reasons"]), placement
    time.sleep(2)  # the scheduler would bind within this time if anything were released
    pods = jobs.pods("waiter")
    assert all(p.spec.node_name is None for p in pods), "no worker may bind while the gang waits"
    assert all(any(g.name == GANG_GATE for g in p.spec.scheduling_gates or []) for p in pods)

    freed = by_leaf["su1-leaf2"][3]
    core.delete_namespaced_pod(f"fill-{freed}", namespace, grace_period_seconds=0)
    jobs.wait_running("waiter")
    assert leaves_of(jobs.nodes("waiter"), fabric_nodes) == {"su1-leaf2"}


def _persisted_plan(nodes: list[str], leaf: str) -> dict[str, Any]:
    return {
        "placement": {
            "state": "Planned",
            "level": "leaf",
            "domain": leaf,
            "nodes": nodes,
            "hops": 1,
            "message": "planned before a crash",
        }
    }


def test_a_restarted_placer_finishes_the_persisted_plan_without_planning_again(
    scheduling: LocalCluster, jobs: Jobs, fabric_nodes: dict[str, dict[str, str]]
) -> None:
    # the placer "crashed" after persisting the plan (step 2) and before releasing the pods
    planned = ["dgx-su2-l4-05", "dgx-su2-l4-02", "dgx-su2-l4-07"]
    scheduling.stop_component(EXTENDER)
    try:
        jobs.create("resumed", 3, status=_persisted_plan(planned, "su2-leaf4"))
    finally:
        start_extender(scheduling)
    jobs.wait_running("resumed")
    assert jobs.nodes("resumed") == planned
    assert jobs.placement("resumed")["message"] == "planned before a crash"

    # and a restart after the job runs changes nothing: no second plan, no second pod set
    scheduling.stop_component(EXTENDER)
    start_extender(scheduling)
    time.sleep(2)
    assert jobs.nodes("resumed") == planned
    assert len(jobs.pods("resumed")) == 3
    assert jobs.placement("resumed")["message"] == "planned before a crash"


def make_not_ready(core: client.CoreV1Api, node: str) -> None:
    """Report ``node`` NotReady (kwok must not manage it) and wait for the not-ready taint."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": "Ready",
        "status": "False",
        "reason": "KubeletNotReady",
        "message": "test: kubelet stopped",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    core.patch_node_status(node, {"status": {"conditions": [condition]}})

    def tainted() -> bool:
        taints = core.read_node(node).spec.taints or []
        return any(t.key == "node.kubernetes.io/not-ready" for t in taints)

    wait_for(tainted, what=f"the node lifecycle controller to taint {node} not-ready")


def test_a_planned_node_that_goes_not_ready_before_binding_is_replaced_inside_the_domain(
    api: client.ApiClient,
    scheduling: LocalCluster,
    jobs: Jobs,
    fabric_nodes: dict[str, dict[str, str]],
) -> None:
    core = client.CoreV1Api(api)
    planned = ["dgx-su1-l4-01", "dgx-su1-l4-02"]
    lost = planned[0]
    key, value = KWOK_NODE_ANNOTATION
    scheduling.stop_component(EXTENDER)
    # the lost node is taken out of kwok's hands (as the soak does), so nothing re-marks it
    # Ready; kwok keeps playing every other node. (Stopping kwok instead left pods bound while
    # it was down unplayed by the restarted kwok: twice in CI, never within 180 s.)
    core.patch_node(lost, {"metadata": {"annotations": {key: None}}})
    try:
        jobs.create("survivor", 2, status=_persisted_plan(planned, "su1-leaf4"))
        make_not_ready(core, lost)
        start_extender(scheduling)

        def bound() -> list[str] | None:
            nodes = jobs.nodes("survivor")
            return nodes if all(nodes) else None

        nodes = wait_for(bound, what="both workers bound")
        assert lost not in nodes
        assert nodes[1] == planned[1], nodes
        assert leaves_of(nodes, fabric_nodes) == {"su1-leaf4"}
        jobs.wait_running("survivor")
    finally:
        core.patch_node(lost, {"metadata": {"annotations": {key: value}}})
        wait_ready(api, [lost])


def test_the_extender_refuses_a_malformed_request_with_400(scheduling: LocalCluster) -> None:
    import urllib.error  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    state = scheduling.state()
    assert state is not None
    port = state.components[EXTENDER].port()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/filter", data=b"{oops", method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=5)
    assert caught.value.code == 400
    assert b"not JSON" in caught.value.read()
    health = metrics_url(state.components[EXTENDER].argv, "/healthz")  # its own port
    with urllib.request.urlopen(health, timeout=5) as ok:
        assert ok.status == 200
