"""Gangs made by another controller next to the rest of the cluster, on the local
control plane: real kube-apiserver, kube-controller-manager and kube-scheduler (tpfabric's
profile with the extender), kwok nodes and the real placer/extender process. No operator runs in
this module: the tests make each TensorParallelJob's worker pods themselves, as another
controller would, and nothing else may make them.

- a head-of-line gang that can never fit holds no domain (a small gang behind it runs);
- several ranks of a gang on one node each hold their share until they bind;
- kube-scheduler's own preemption never evicts a running gang's member for a waiting worker.

The gangs the operator makes are in test_operator_boundaries.py; the fence of a deposed placer's
plan writes in test_leader_election.py, where no operator acts on the job. Each test brings its
own eight nodes (two leaves of four, ``bnd-*``) and removes them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from control_plane_fixtures import (
    FabricFactory,
    Jobs,
    clear_jobs_and_pods,
    run_kubectl,
    two_leaves_of_four,
    wait_for,
    worker_pod,
)
from tpfabric_core import labels
from tpfabric_core.api import GANG_GATE, GROUP, PLURAL, VERSION
from tpfabric_localcluster.cluster import LocalCluster

FABRIC = two_leaves_of_four("boundaries", "bnd", rails=8)
HOLD_GATE = "example.com/hold"


@pytest.fixture
def nodes(
    api: client.ApiClient,
    tpfabric_scheduling: LocalCluster,
    fake_nodes: FabricFactory,
    namespace: str,
) -> Iterator[list[str]]:
    """Return the eight ``bnd-*`` nodes (Ready); the test's jobs and pods go before they do."""
    yield fake_nodes(FABRIC)
    clear_jobs_and_pods(api, namespace)


def tenant_pod(
    name: str, node: str, gpus: int = 8, priority_class: str | None = None, **meta: Any
) -> dict[str, Any]:
    """A pod of another tenant, bound by ``nodeName`` (kwok runs it)."""
    return {
        "metadata": {"name": name, **meta},
        "spec": {
            "nodeName": node,
            **({"priorityClassName": priority_class} if priority_class else {}),
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
    }


def fill_with_tenants(
    api: client.ApiClient, namespace: str, *nodes: str, priority_class: str | None = None
) -> None:
    core = client.CoreV1Api(api)
    for node in nodes:
        pod = tenant_pod(f"tenant-{node}", node, priority_class=priority_class)
        core.create_namespaced_pod(namespace, pod)
    wait_for(
        lambda: all(
            core.read_namespaced_pod(f"tenant-{n}", namespace).status.phase == "Running"
            for n in nodes
        ),
        what="the other tenant's pods Running",
    )


def _job(custom: client.CustomObjectsApi, namespace: str, name: str, **spec: Any) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TensorParallelJob",
        "metadata": {"name": name},
        "spec": {
            "tensorParallelSize": 8,
            "topology": {"mode": "required", "level": "leaf"},
            "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
            **spec,
        },
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def test_a_head_of_line_gang_that_can_never_fit_holds_no_domain(
    api: client.ApiClient, namespace: str, nodes: list[str], local_cluster: LocalCluster
) -> None:
    jobs = Jobs(api, namespace)
    fill_with_tenants(api, namespace, "bnd-l2-01", "bnd-l2-02", "bnd-l2-03")  # leaf2: room for 1
    long_ago = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
    # 5 workers, required leaf, leaves of 4 nodes: never; waiting 10 min, past the head-of-line
    # bound (60 s on the local control plane)
    jobs.create("never", 5, status={"placement": {"state": "Waiting", "waitingSince": long_ago}})
    wait_for(
        lambda: "holds no domain" in jobs.placement("never").get("message", ""),
        what="the never-fitting gang at the head of the line, holding nothing",
        explain=lambda: str(jobs.placement("never")),
    )
    jobs.create("small", 2)  # only leaf1, the never-fitting gang's best candidate, has room
    running = jobs.wait_running("small", timeout=30)
    assert all(p.spec.node_name.startswith("bnd-l1") for p in running)
    # kubectl describe pod says why a gated worker waits, naming its job
    described = run_kubectl(local_cluster, "describe", "pod", "-n", namespace, "never-worker-0")
    assert described.returncode == 0, described.stderr
    assert "GangWaiting" in described.stdout
    assert "TensorParallelJob never" in described.stdout


def test_two_ranks_planned_onto_one_node_each_hold_their_share_until_they_bind(
    api: client.ApiClient, namespace: str, nodes: list[str]
) -> None:
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    jobs = Jobs(api, namespace)
    fill_with_tenants(api, namespace, "bnd-l1-01", "bnd-l1-02", "bnd-l1-03", *nodes[4:7])
    # a gang of two 4-GPU workers whose pods another controller still holds with a gate of
    # its own after the placer releases them: planned, not bound
    _job(custom, namespace, "pair", workers=2, gpusPerWorker=4, tensorParallelSize=4)
    for index in range(2):
        core.create_namespaced_pod(
            namespace, worker_pod("pair", index, gpus=4, gates=(GANG_GATE, HOLD_GATE))
        )
    planned = wait_for(
        lambda: jobs.placement("pair").get("state") == "Planned" and jobs.placement("pair"),
        what="the pair planned",
    )
    pair = planned["nodes"]
    assert pair[0] == pair[1], f"both halves on one node: {pair}"
    _job(custom, namespace, "single", workers=1, gpusPerWorker=4, tensorParallelSize=4)
    core.create_namespaced_pod(namespace, worker_pod("single", 0, gpus=4))
    single = wait_for(
        lambda: jobs.placement("single").get("state") == "Planned" and jobs.placement("single"),
        what="the single planned",
    )
    assert single["nodes"][0] != pair[0], "the pair's node holds both its ranks"
    ungate = [{"op": "replace", "path": "/spec/schedulingGates", "value": []}]
    for index in range(2):  # the other controller lets the pair go
        core.patch_namespaced_pod(f"pair-worker-{index}", namespace, ungate)
    bound = jobs.wait_running("pair", timeout=30)
    assert [p.spec.node_name for p in bound] == pair
    assert jobs.wait_running("single", timeout=30)[0].spec.node_name == single["nodes"][0]


@pytest.fixture
def priorities(api: client.ApiClient) -> Iterator[tuple[str, str]]:
    scheduling = client.SchedulingV1Api(api)
    names = ("tpfabric-test-low", "tpfabric-test-high")
    for name, value in zip(names, (100, 1_000_000), strict=True):
        try:
            scheduling.create_priority_class({"metadata": {"name": name}, "value": value})
        except ApiException as err:
            if err.status != 409:
                raise
    yield names
    for name in names:
        scheduling.delete_priority_class(name)


def test_a_waiting_worker_never_preempts_a_running_gangs_member(
    api: client.ApiClient,
    namespace: str,
    nodes: list[str],
    priorities: tuple[str, str],
) -> None:
    low, high = priorities
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    jobs = Jobs(api, namespace)
    # only bnd-l1-01 and bnd-l1-02 are free; the other tenant's pods outrank every worker, so
    # the running gang's are the only pods a preemption could pick
    fill_with_tenants(api, namespace, *nodes[2:], priority_class=high)
    _job(custom, namespace, "running", workers=2)
    for index in range(2):
        core.create_namespaced_pod(
            namespace,
            worker_pod("running", index, priorityClassName=low),
        )
    running = jobs.wait_running("running", timeout=30)
    # a high-priority worker released onto bnd-l1-01 as if planned there a moment before the
    # running gang took it: kube-scheduler finds no node with room for it
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    leaf = {labels.BLOCK: "bnd", labels.SPINE: "bnd-su", labels.LEAF: "bnd-leaf1"}
    _job(custom, namespace, "urgent", workers=1)
    custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        "urgent",
        {
            "status": {
                "placement": {
                    "state": "Planned",
                    "level": "leaf",
                    "domain": "bnd-leaf1",
                    "domainLabels": leaf,
                    "nodes": ["bnd-l1-01"],
                    "plannedAt": now,
                    "releasedAt": now,
                }
            }
        },
    )
    terms = [{"key": k, "operator": "In", "values": [v]} for k, v in leaf.items()]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": terms}]
            }
        }
    }
    core.create_namespaced_pod(
        namespace,
        worker_pod("urgent", 0, gates=(), priorityClassName=high, affinity=affinity),
    )
    wait_for(
        lambda: any(
            c.type == "PodScheduled" and c.status == "False"
            for c in core.read_namespaced_pod("urgent-worker-0", namespace).status.conditions or []
        ),
        what="kube-scheduler to try the urgent worker",
    )
    time.sleep(3)  # DefaultPreemption acts within the same scheduling attempt
    preempted = [
        e.message for e in core.list_namespaced_event(namespace).items if e.reason == "Preempted"
    ]
    assert preempted == []
    for pod in running:
        now_pod = core.read_namespaced_pod(pod.metadata.name, namespace)
        assert now_pod.metadata.deletion_timestamp is None, f"{pod.metadata.name} was preempted"
        assert now_pod.status.phase == "Running"
    urgent = core.read_namespaced_pod("urgent-worker-0", namespace)
    assert not urgent.status.nominated_node_name
