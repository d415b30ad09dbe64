"""GPU gangs on nodes that offer no RDMA devices: planned from what their pods ask, run over
TCP, and say so (the job's or Gang record's ``RDMA`` condition, the pod's ``tpfabric.io/rdma``).

A gang's demand is what its pods ask: an older Gang CRD defaulted a record's ``spec.rdma.count``
to 8 and the placer added 8 ``rdma/ib`` to pods that asked only GPUs, so such a gang waited for
ever on a TCP-only GPU pool; a TensorParallelJob without ``spec.rdma`` asked for 8 and failed
(``CannotBeHonoured``). Real kube-apiserver, kube-scheduler with tpfabric's profile, the
placer/extender, the operator and the gang webhook, on kwok nodes that advertise ``rdma/ib: 0``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from control_plane_fixtures import FabricFactory, clear_jobs_and_pods, gang_pod, opt_in, wait_for
from tpfabric_core.api import GROUP, PLURAL, VERSION
from tpfabric_core.api.gang import GANG_PLURAL
from tpfabric_core.gangs import GANG_LABEL, GANG_NAME_LABEL, GANG_SIZE_LABEL
from tpfabric_core.rdma_default import RDMA_ANNOTATION, parse_decision
from tpfabric_localcluster.cluster import LocalCluster
from tpfabric_localcluster.gang_webhook import GangWebhook, start_gang_webhook
from tpfabric_localcluster.tpfabric import OPERATOR, start_operator

pytestmark = pytest.mark.integration

FABRIC = """
name: tcp-only
rails: 8
railOptimized: true
rdmaResource: rdma/ib
node: {gpus: 8, rdma: 0, cpu: "128", memory: 2Ti, pods: 110}
blocks:
- name: tcp
  spines:
  - name: tcp-su
    leaves:
    - {name: tcp-leaf1, nodes: ["tcp-l1-[01-02]"]}
    - {name: tcp-leaf2, nodes: ["tcp-l2-[01-02]"]}
"""


@pytest.fixture(scope="module")
def components(tpfabric_scheduling: LocalCluster, api: client.ApiClient) -> Iterator[GangWebhook]:
    """The webhook (configured) and the operator, beside the placer and the scheduler."""
    start_operator(tpfabric_scheduling)
    hook = start_gang_webhook(tpfabric_scheduling)
    registrations = client.AdmissionregistrationV1Api(api)
    config = hook.configuration()
    registrations.create_mutating_webhook_configuration(config)
    yield hook
    registrations.delete_mutating_webhook_configuration(config["metadata"]["name"])
    hook.stop()
    tpfabric_scheduling.stop_component(OPERATOR)


@pytest.fixture
def tcp_only(
    components: GangWebhook, api: client.ApiClient, namespace: str, fake_nodes: FabricFactory
) -> Iterator[str]:
    """The test's namespace, opted in; the cluster's GPU nodes offer no RDMA device."""
    fake_nodes(FABRIC)
    yield opt_in(api, namespace)
    clear_jobs_and_pods(api, namespace)


def running_pods(
    core: client.CoreV1Api, namespace: str, selector: str, count: int, explain: Any
) -> list[client.V1Pod]:
    def running() -> list[client.V1Pod] | None:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        ok = len(pods) == count and all(p.status.phase == "Running" for p in pods)
        return list(pods) if ok else None

    pods: list[client.V1Pod] = wait_for(
        running, 90, what=f"{count} pods Running ({selector})", explain=explain
    )
    return pods


def custom_object(api: client.ApiClient, namespace: str, plural: str, name: str) -> dict[str, Any]:
    try:
        return dict(
            client.CustomObjectsApi(api).get_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, name
            )
        )
    except ApiException as err:
        if err.status == 404:
            return {}
        raise


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next(
        (c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind),
        None,
    )


def test_a_gpu_gang_that_asks_no_rdma_is_placed_on_nodes_without_any(
    api: client.ApiClient, tcp_only: str
) -> None:
    core = client.CoreV1Api(api)
    labels = {GANG_NAME_LABEL: "tcp", GANG_SIZE_LABEL: "2"}
    for index in range(2):
        core.create_namespaced_pod(tcp_only, gang_pod(f"tcp-{index}", labels, cpu="1"))
    running_pods(
        core,
        tcp_only,
        f"{GANG_LABEL}=tcp",
        2,
        lambda: f"record: {custom_object(api, tcp_only, GANG_PLURAL, 'tcp').get('status')}",
    )


def test_a_gang_without_rdma_says_so_on_its_pods_and_its_record(
    api: client.ApiClient, tcp_only: str
) -> None:
    core = client.CoreV1Api(api)
    labels = {GANG_NAME_LABEL: "why", GANG_SIZE_LABEL: "2"}
    for index in range(2):
        core.create_namespaced_pod(tcp_only, gang_pod(f"why-{index}", labels, cpu="1"))
    pods = running_pods(core, tcp_only, f"{GANG_LABEL}=why", 2, lambda: "")
    for pod in pods:
        assert "rdma/ib" not in (pod.spec.containers[0].resources.limits or {})
        assert "--policy=disabled" in pod.spec.init_containers[0].args
        decision = parse_decision(pod.metadata.annotations[RDMA_ANNOTATION])
        assert decision is not None
        assert (decision.count, decision.reason) == (0, "NodesOfferNone")

    def said() -> dict[str, Any] | None:
        return condition(custom_object(api, tcp_only, GANG_PLURAL, "why"), "RDMA")

    rdma = wait_for(said, 30, what="the Gang record's RDMA condition")
    assert (rdma["status"], rdma["reason"]) == ("False", "NodesOfferNone")
    assert "offers rdma/ib" in rdma["message"]
    assert "rdma.resourceName" in rdma["message"]


def test_a_job_that_names_no_rdma_runs_over_tcp_and_says_why(
    api: client.ApiClient, tcp_only: str
) -> None:
    job = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TensorParallelJob",
        "metadata": {"name": "tcp-job"},
        "spec": {
            "workers": 2,
            "tensorParallelSize": 8,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "w", "image": "busybox", "resources": {"limits": {"cpu": "1"}}}
                    ]
                }
            },
        },
    }
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, tcp_only, PLURAL, job
    )

    def running() -> dict[str, Any] | None:
        obj = custom_object(api, tcp_only, PLURAL, "tcp-job")
        return obj if (obj.get("status") or {}).get("phase") == "Running" else None

    obj = wait_for(
        running,
        90,
        what="the job Running",
        explain=lambda: str(custom_object(api, tcp_only, PLURAL, "tcp-job").get("status")),
    )
    rdma = condition(obj, "RDMA")
    assert rdma is not None
    assert (rdma["status"], rdma["reason"]) == ("False", "NodesOfferNone")
