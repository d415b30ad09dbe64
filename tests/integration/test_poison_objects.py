"""One object never stops anyone else's work: poison objects of the watched kinds, made on the
real API server, beside a normal TensorParallelJob and a normal labelled pod group, which are
placed end to end while each poison is reported with its name where its owner looks.

The same components as ``test_gangs_placed`` (kube-apiserver, kube-scheduler with tpfabric's
profile, the placer/extender, the operator and the gang webhook, kwok nodes).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from test_gangs_placed import FABRIC, components, member, record, wait_running  # noqa: F401
from test_operator import Tpj, small_job

from control_plane_fixtures import FabricFactory, clear_jobs_and_pods, gang_pod, opt_in, wait_for
from tpfabric_core.api import GANG_GATE, GROUP, PLURAL, VERSION
from tpfabric_core.api.gang import GANG_PLURAL
from tpfabric_core.gangs import GANG_LABEL, GANG_NAME_LABEL, GANG_SIZE_LABEL
from tpfabric_core.labels import HEALTH
from tpfabric_localcluster.cluster import LocalCluster
from tpfabric_localcluster.gang_webhook import GangWebhook

pytestmark = pytest.mark.integration

POISON_NODE = "poison-node"
#: about 100 kB of nested JSON: the standard parser recursed into RecursionError on it
NESTED = '{"rails": ' + "[" * 50_000 + "]" * 50_000 + "}"


@pytest.fixture
def world(
    components: GangWebhook,  # noqa: F811 - the module fixture imported above
    tpfabric_scheduling: LocalCluster,
    api: client.ApiClient,
    namespace: str,
    fake_nodes: FabricFactory,
) -> Iterator[tuple[client.CoreV1Api, client.CustomObjectsApi, Tpj]]:
    fake_nodes(FABRIC)
    opt_in(api, namespace)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    yield core, custom, Tpj(api, tpfabric_scheduling, namespace)
    for job in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]:
        custom.delete_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, job["metadata"]["name"]
        )
    clear_jobs_and_pods(api, namespace)
    try:
        core.delete_node(POISON_NODE)
    except ApiException as err:
        if err.status != 404:
            raise


def hand_made_gang(name: str) -> dict[str, Any]:
    """A Gang record of two 8-GPU pods, as someone with the right to create one writes it."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Gang",
        "metadata": {"name": name},
        "spec": {
            "owner": {"kind": "PodGroup", "name": name},
            "workers": 2,
            "gpusPerWorker": 8,
            "tensorParallelSize": 8,
            "topology": {"level": "leaf", "mode": "preferred"},
        },
    }


def warnings(
    core: client.CoreV1Api, namespace: str, name: str, reason: str
) -> list[client.CoreV1Event]:
    """Return the Warning Events ``reason`` on the object ``name`` (Events in ``namespace``)."""
    return [
        e
        for e in core.list_namespaced_event(namespace).items
        if e.involved_object.name == name and e.type == "Warning" and e.reason == reason
    ]


def test_poison_objects_of_each_watched_kind_leave_the_cluster_placing_and_are_reported(
    world: tuple[client.CoreV1Api, client.CustomObjectsApi, Tpj], namespace: str
) -> None:
    core, custom, tpj = world
    # a node whose kubelet wrote a degraded label and 100 kB of nested brackets as its detail
    core.create_node(
        {
            "metadata": {
                "name": POISON_NODE,
                "labels": {HEALTH: "degraded"},
                "annotations": {"topology.tpfabric.io/fabric-health": NESTED},
            }
        }
    )
    # a pod labelled into a gang by hand, its size "²" (isdigit() is true, int() raises)
    poison_pod = gang_pod("poison-0", {GANG_NAME_LABEL: "poison", GANG_LABEL: "poison"}, cpu="1")
    poison_pod["metadata"]["annotations"] = {GANG_SIZE_LABEL: "²"}
    poison_pod["spec"]["schedulingGates"] = [{"name": GANG_GATE}]  # never released by anyone
    core.create_namespaced_pod(namespace, poison_pod)
    # a pod labelled into a gang of 100,000 pods: no Gang record can hold it (at most 1024)
    huge_pod = gang_pod("huge-0", {GANG_NAME_LABEL: "huge", GANG_LABEL: "huge"}, cpu="1")
    huge_pod["metadata"]["annotations"] = {GANG_SIZE_LABEL: "100000"}
    huge_pod["spec"]["schedulingGates"] = [{"name": GANG_GATE}]
    core.create_namespaced_pod(namespace, huge_pod)
    # a Gang record made by hand whose status names what no placer wrote
    hand_made: dict[str, Any] = hand_made_gang("hand-made")
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, GANG_PLURAL, hand_made)

    # the normal work goes on: a TensorParallelJob and a labelled pod group, both placed
    job = tpj.apply(small_job("normal"))
    for rank in range(2):
        core.create_namespaced_pod(namespace, member(f"group-{rank}", "group", 2, rank))
    tpj.wait_phase(job, "Running", timeout=120)
    assert all(p.spec.node_name for p in tpj.pods(job))
    pods = wait_running(core, namespace, "group", 2)
    assert len({p.spec.node_name for p in pods}) == 2
    assert (record(custom, namespace, "group") or {})["status"]["placement"]["state"] == "Planned"

    # each poison is reported by name where its owner looks
    said = wait_for(
        lambda: warnings(core, namespace, "poison-0", "NoGangRecord"),
        60,
        what="the poison pod told why it has no Gang record",
    )
    assert f"{GANG_SIZE_LABEL}: '²' is not a whole number" in said[0].message
    huge_said = wait_for(
        lambda: warnings(core, namespace, "huge-0", "NoGangRecord"),
        60,
        what="the pod of a gang too large for a record told why it has none",
    )
    assert f"{GANG_SIZE_LABEL}: 100000 is outside 1..1024" in huge_said[0].message
    node_said = wait_for(
        lambda: warnings(core, "default", POISON_NODE, "MalformedObject"),
        60,
        what="the poison node told its fabric-health detail was ignored",
    )
    assert "topology.tpfabric.io/fabric-health" in node_said[0].message
    assert "characters, more than the 65536 allowed" in node_said[0].message
    # the poison pod was never released, nor a record made for it
    assert core.read_namespaced_pod("poison-0", namespace).spec.scheduling_gates
    assert record(custom, namespace, "poison") is None
    assert record(custom, namespace, "huge") is None


def test_hand_labelled_gang_pods_where_no_one_opted_in_are_neither_managed_nor_planned(
    components: GangWebhook,  # noqa: F811 - the module fixture imported above
    api: client.ApiClient,
    namespace: str,
    fake_nodes: FabricFactory,
) -> None:
    fake_nodes(FABRIC)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    try:
        # the webhook never sees them: the namespace is not labelled tpfabric.io/gangs=enabled
        for rank in range(2):
            pod = member(f"stray-{rank}", "stray", 2, rank)
            pod["metadata"]["labels"][GANG_LABEL] = "stray"
            pod["spec"]["schedulingGates"] = [{"name": GANG_GATE}]
            core.create_namespaced_pod(namespace, pod)
        said = wait_for(
            lambda: warnings(core, namespace, "stray-0", "NamespaceNotOptedIn"),
            60,
            what="the pods told that their namespace has not opted in",
        )
        assert f"kubectl label namespace {namespace} tpfabric.io/gangs=enabled" in said[0].message
        assert record(custom, namespace, "stray") is None  # not managed by the operator
        # a record made by hand is not planned by the placer either
        manifest = hand_made_gang("stray")
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, GANG_PLURAL, manifest)
        time.sleep(6)  # the placer plans a record with all its pods within a cycle or two
        status = (record(custom, namespace, "stray") or {}).get("status") or {}
        assert not status.get("placement"), "planned in a namespace that did not opt in"
        assert all(p.spec.scheduling_gates for p in core.list_namespaced_pod(namespace).items)
        # opting in lets the operator and the placer take them
        opt_in(api, namespace)
        wait_running(core, namespace, "stray", 2)
    finally:
        clear_jobs_and_pods(api, namespace)
