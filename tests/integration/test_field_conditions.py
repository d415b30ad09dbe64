"""The gang path under the conditions of a real GPU cluster, on the local control plane.

One fabric of kwok nodes that a real cluster would have: two spine groups whose leaves share
names (``l1``/``l2`` under both ``su1`` and ``su2``), nodes without topology labels (autoscaled,
a new rack), a dedicated pool behind a node label and a taint, and a leaf of small-CPU nodes.
Each test holds the placer to one rule of such a cluster.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from control_plane_fixtures import clear_jobs_and_pods, wait_for
from tpfabric_core import labels
from tpfabric_core.api import GANG_GATE, GROUP, JOB_LABEL, PLURAL, VERSION, WORKER_INDEX_LABEL
from tpfabric_core.fabric_description import uniform_fabric
from tpfabric_localcluster.cluster import LocalCluster
from tpfabric_localcluster.nodes import delete_nodes, fake_node_manifest, wait_ready
from tpfabric_localcluster.tpfabric import EXTENDER, SCHEDULER_NAME, start_extender

_TEMPLATE = uniform_fabric(1, nodes_per_leaf=1, leaves_per_spine=1, spines_per_block=1)
POOL = "dedicated"


def _node(name: str, node_labels: dict[str, str], *, cpu: str = "128") -> dict[str, Any]:
    manifest = fake_node_manifest(_TEMPLATE, _TEMPLATE.nodes[0])
    manifest["metadata"]["name"] = name
    kept = {k: v for k, v in manifest["metadata"]["labels"].items() if "topology" not in k}
    manifest["metadata"]["labels"] = {**kept, "kubernetes.io/hostname": name, **node_labels}
    for part in ("capacity", "allocatable"):
        manifest["status"][part]["cpu"] = cpu
    return manifest


def _topology(spine: str, leaf: str) -> dict[str, str]:
    return {labels.BLOCK: "pod1", labels.SPINE: spine, labels.LEAF: leaf, labels.HEALTH: "ok"}


@pytest.fixture(scope="module")
def field(api: client.ApiClient) -> Iterator[dict[str, dict[str, str]]]:
    """Return ``{node: labels}``: 16 labelled nodes in 4 leaves, 4 unlabelled nodes."""
    core = client.CoreV1Api(api)
    manifests = []
    for spine in ("su1", "su2"):
        for leaf in ("l1", "l2"):
            for i in range(4):
                extra: dict[str, str] = {}
                cpu = "128"
                if (spine, leaf) == ("su1", "l2"):
                    cpu = "16"  # a leaf of small-CPU nodes
                if (spine, leaf) == ("su2", "l2"):
                    extra = {"pool": POOL}
                manifest = _node(
                    f"f-{spine}-{leaf}-{i}", {**_topology(spine, leaf), **extra}, cpu=cpu
                )
                if extra:
                    manifest["spec"]["taints"] = [
                        {"key": "dedicated", "value": POOL, "effect": "NoSchedule"}
                    ]
                manifests.append(manifest)
    manifests += [_node(f"f-bare-{i}", {}) for i in range(4)]
    for manifest in manifests:
        core.create_node(manifest)
    names = [m["metadata"]["name"] for m in manifests]
    wait_ready(api, names)
    yield {m["metadata"]["name"]: m["metadata"]["labels"] for m in manifests}
    delete_nodes(api, names)


class Gangs:
    """TensorParallelJobs and their gated worker pods, made the way the operator makes them."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace

    def create(
        self,
        name: str,
        workers: int,
        *,
        topology: dict[str, Any] | None = None,
        gpus: int = 8,
        pod_spec: dict[str, Any] | None = None,
        cpu: str | None = None,
        scheduler: str = SCHEDULER_NAME,
        status: dict[str, Any] | None = None,
    ) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TensorParallelJob",
            "metadata": {"name": name},
            "spec": {
                "workers": workers,
                "gpusPerWorker": gpus,
                "tensorParallelSize": gpus,
                "topology": topology or {"mode": "required", "level": "leaf"},
                "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
            },
        }
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body)
        if status is not None:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, PLURAL, name, {"status": status}
            )
        for index in range(workers):
            self.add_worker(name, index, gpus=gpus, pod_spec=pod_spec, cpu=cpu, scheduler=scheduler)

    def add_worker(
        self,
        name: str,
        index: int,
        *,
        gpus: int = 8,
        pod_spec: dict[str, Any] | None = None,
        cpu: str | None = None,
        scheduler: str = SCHEDULER_NAME,
    ) -> None:
        limits = {"nvidia.com/gpu": str(gpus), "rdma/ib": "8"}
        requests = {"cpu": cpu} if cpu else {}
        pod = {
            "metadata": {
                "name": f"{name}-worker-{index}",
                "labels": {JOB_LABEL: name, WORKER_INDEX_LABEL: str(index)},
            },
            "spec": {
                "schedulerName": scheduler,
                "schedulingGates": [{"name": GANG_GATE}],
                "containers": [
                    {
                        "name": "w",
                        "image": "registry.invalid/w:1",
                        "resources": {"limits": limits, "requests": {**limits, **requests}},
                    }
                ],
                **(pod_spec or {}),
            },
        }
        self.core.create_namespaced_pod(self.namespace, pod)

    def pods(self, name: str) -> list[client.V1Pod]:
        pods = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{JOB_LABEL}={name}"
        ).items
        return sorted(pods, key=lambda p: int(p.metadata.labels[WORKER_INDEX_LABEL]))

    def job(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name
        )
        return result

    def placement(self, name: str) -> dict[str, Any]:
        return dict((self.job(name).get("status") or {}).get("placement") or {})

    def wait_running(self, name: str, timeout: float = 60) -> list[str]:
        def running() -> list[str] | None:
            pods = self.pods(name)
            ok = pods and all(p.status.phase == "Running" for p in pods)
            return [p.spec.node_name for p in pods] if ok else None

        nodes: list[str] = wait_for(running, timeout, what=f"job {name} Running")
        return nodes

    def fill(self, node: str, gpus: int = 8) -> None:
        """Bind a plain pod straight to ``node`` (what another scheduler's pod does)."""
        self.core.create_namespaced_pod(
            self.namespace,
            {
                "metadata": {"name": f"fill-{node}", "labels": {"role": "filler"}},
                "spec": {
                    "nodeName": node,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "f",
                            "image": "x",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                },
            },
        )


@pytest.fixture
def gangs(
    api: client.ApiClient,
    namespace: str,
    tpfabric_scheduling: LocalCluster,
    field: dict[str, dict[str, str]],
) -> Iterator[Gangs]:
    yield Gangs(api, namespace)
    clear_jobs_and_pods(api, namespace)


def _spine_leaf(field: dict[str, dict[str, str]], node: str) -> tuple[str, str]:
    return field[node][labels.SPINE], field[node][labels.LEAF]


def test_nodes_without_topology_labels_are_never_a_domain_of_their_own(
    gangs: Gangs, field: dict[str, dict[str, str]]
) -> None:
    # best fit used to prefer an unlabelled node (a one-node "leaf" with nothing left over) and
    # narrowed the worker's affinity to a leaf named after it, which no node carries
    gangs.create("one", 1)
    (node,) = gangs.wait_running("one")
    assert labels.LEAF in field[node]
    placement = gangs.placement("one")
    assert placement["domain"] in {"l1", "l2"}


def test_a_domain_is_matched_on_every_level_so_same_named_leaves_stay_apart(
    gangs: Gangs, field: dict[str, dict[str, str]]
) -> None:
    gangs.create("pair", 4)
    nodes = gangs.wait_running("pair")
    assert len({_spine_leaf(field, n) for n in nodes}) == 1
    placement = gangs.placement("pair")
    assert set(placement["domainLabels"]) == {labels.BLOCK, labels.SPINE, labels.LEAF}
    affinity = gangs.pods("pair")[0].spec.affinity.node_affinity
    terms = affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    assert {e.key for e in terms[0].match_expressions} >= {labels.SPINE, labels.LEAF}


def test_a_plan_respects_the_pods_cpu_request(
    gangs: Gangs, field: dict[str, dict[str, str]]
) -> None:
    # su1/l1 keeps 3 free nodes; the next leaf in order (su1/l2) has 4 but only 16 CPUs each:
    # a plan that ignores CPU picks it and the workers stay Pending forever
    gangs.fill("f-su1-l1-3")
    gangs.create("hungry", 4, cpu="32")
    nodes = gangs.wait_running("hungry")
    assert {_spine_leaf(field, n) for n in nodes} == {("su2", "l1")}


def test_a_plan_respects_the_pods_node_selector_and_tolerations(
    gangs: Gangs, field: dict[str, dict[str, str]]
) -> None:
    spec = {
        "nodeSelector": {"pool": POOL},
        "tolerations": [{"key": "dedicated", "value": POOL, "effect": "NoSchedule"}],
    }
    gangs.create("pooled", 2, pod_spec=spec)
    nodes = gangs.wait_running("pooled")
    assert all(field[n].get("pool") == POOL for n in nodes)
    # and without the toleration the tainted pool is never planned
    gangs.create("untolerated", 2, pod_spec={"nodeSelector": {"pool": POOL}})
    placement = wait_for(
        lambda: (p := gangs.placement("untolerated")).get("state") == "Waiting" and p,
        what="a Waiting placement naming the taint",
    )
    assert "taint" in json.dumps(placement["reasons"]) or "selector" in placement["message"]
    assert all(p.spec.node_name is None for p in gangs.pods("untolerated"))


def test_reservations_cover_rdma_devices_so_two_gangs_never_share_one_nodes(
    gangs: Gangs,
) -> None:
    # 4-GPU workers that each take all 8 RDMA devices of a node: GPU arithmetic alone would
    # put two of them on one node. The first gang never binds (no scheduler serves it), so its
    # reservation is all that keeps the second off its node.
    gangs.create("first", 1, gpus=4, scheduler="nobody")
    wait_for(lambda: gangs.placement("first").get("state") == "Planned", what="first planned")
    gangs.create("second", 1, gpus=4)
    (node,) = gangs.wait_running("second")
    assert node not in gangs.placement("first")["nodes"]


def test_the_extender_rejects_nodes_reserved_by_another_gang_as_unresolvable(
    gangs: Gangs, tpfabric_scheduling: LocalCluster
) -> None:
    gangs.create("holder", 2, scheduler="nobody")
    held = wait_for(
        lambda: (p := gangs.placement("holder")).get("state") == "Planned" and p["nodes"],
        what="holder planned",
    )
    gangs.create("other", 2)
    gangs.wait_running("other")
    pod = gangs.core.read_namespaced_pod("other-worker-0", gangs.namespace)
    state = tpfabric_scheduling.state()
    assert state is not None
    port = state.components[EXTENDER].port()
    # what kube-scheduler sends when its own filters rejected the worker's planned node (rank
    # 0's, first in the plan): with the planned node among them filter keeps it alone and
    # words no reasons for the rest
    body = {
        "Pod": gangs.core.api_client.sanitize_for_serialization(pod),
        "NodeNames": [*held, *gangs.placement("other")["nodes"][1:]],
    }
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/filter", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        answer = json.loads(response.read())
    assert set(answer["FailedAndUnresolvableNodes"]) >= set(held)
    assert not set(answer["NodeNames"] or []) & set(held)
    assert not answer.get("FailedNodes")


def test_a_replacement_worker_is_replanned_off_its_old_node_inside_the_domain(
    gangs: Gangs, field: dict[str, dict[str, str]]
) -> None:
    gangs.create("steady", 2)
    first = gangs.wait_running("steady")
    gangs.core.delete_namespaced_pod("steady-worker-1", gangs.namespace, grace_period_seconds=0)
    wait_for(
        lambda: len(gangs.pods("steady")) == 1, what="the lost worker gone (as the operator sees)"
    )
    time.sleep(1.1)  # a replacement is created after the plan, as after any backoff
    gangs.add_worker("steady", 1)
    nodes = gangs.wait_running("steady")
    assert nodes[0] == first[0], "the healthy rank stays"
    assert nodes[1] != first[1], "never back onto the node it was lost on"
    assert _spine_leaf(field, nodes[1]) == _spine_leaf(field, first[0])
    placement = gangs.placement("steady")
    assert placement["nodes"] == nodes
    assert list(placement["replacedRanks"]) == ["1"]


def test_a_persisted_plan_is_checked_again_before_its_pods_are_released(
    gangs: Gangs, tpfabric_scheduling: LocalCluster, field: dict[str, dict[str, str]]
) -> None:
    planned = ["f-su2-l1-0", "f-su2-l1-1"]
    status = {
        "placement": {
            "state": "Planned",
            "level": "leaf",
            "domain": "l1",
            "domainLabels": {labels.BLOCK: "pod1", labels.SPINE: "su2", labels.LEAF: "l1"},
            "nodes": planned,
            "hops": 1,
            "message": "planned before a long outage",
        }
    }
    tpfabric_scheduling.stop_component(EXTENDER)
    try:
        # while the placer is down, other pods take the planned node and the rest of the leaf
        for node in ("f-su2-l1-0", "f-su2-l1-2", "f-su2-l1-3"):
            gangs.fill(node)
        gangs.create("stale", 2, status=status)
    finally:
        start_extender(tpfabric_scheduling)
    nodes = gangs.wait_running("stale")
    assert "f-su2-l1-0" not in nodes
    assert len({_spine_leaf(field, n) for n in nodes}) == 1


def test_released_pods_that_cannot_bind_drop_the_plan_within_the_bound(gangs: Gangs) -> None:
    gangs.create("orphan", 2, scheduler="nobody")  # nothing ever binds these pods
    wait_for(lambda: gangs.placement("orphan").get("state") == "Planned", what="planned")
    placement = wait_for(
        lambda: (p := gangs.placement("orphan")).get("state") == "Replanning" and p,
        timeout=60,
        what="the plan dropped after the bind bound (30 s on the local cluster)",
    )
    assert "not bound" in placement["message"]
    wait_for(lambda: not gangs.pods("orphan"), what="the released pods deleted")


def test_a_waiting_job_costs_no_status_writes_while_nothing_changes(gangs: Gangs) -> None:
    for spine in ("su1", "su2"):
        for leaf in ("l1", "l2"):
            gangs.fill(f"f-{spine}-{leaf}-3")  # 3 free nodes per leaf
    topology = {"mode": "preferred", "level": "leaf", "maxWaitSeconds": 600}
    gangs.create("patient", 4, topology=topology)
    wait_for(lambda: gangs.placement("patient").get("state") == "Waiting", what="Waiting")
    before = gangs.job("patient")["metadata"]["resourceVersion"]
    time.sleep(7)  # longer than the placer's 5 s resync: a countdown would have been written
    after = gangs.job("patient")
    assert after["metadata"]["resourceVersion"] == before, after["status"]["placement"]
    assert len(after["status"]["placement"]["reasons"]) <= 5


def test_a_gang_bigger_than_any_leaf_does_not_wait_for_one(gangs: Gangs) -> None:
    topology = {"mode": "preferred", "level": "leaf", "maxWaitSeconds": 600}
    gangs.create("wide", 6, topology=topology)  # leaves hold 4 nodes
    gangs.wait_running("wide", timeout=30)
    assert gangs.placement("wide")["level"] == "spine"
