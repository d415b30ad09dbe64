"""Each account of the chart can do its job and nothing more, on the oldest Kubernetes the chart
supports (Chart.yaml ``kubeVersion``; the ``kubernetes-minimum`` control plane).

The chart's RBAC and its ValidatingAdmissionPolicies (exactly what ``helm template`` renders,
with the fabric agent in a namespace of its own, the gang webhook and discovery on) are applied to
a v1.30 control plane; then each account's own token -- the fabric agent's bound to an agent pod
on one node, as the kubelet projects it -- makes the writes its component makes, which pass, and
hostile ones (another node, a taint, a pod's image, another object's field), which the API server
refuses with 403 and the policy's message. ``test_chart_identities.py`` runs the components
themselves under the same policies on the pinned version.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from control_plane_fixtures import (
    CHART_NAMESPACE,
    agent_pod,
    apply_confinement,
    chart_account,
    render_chart,
    run_kubectl,
    wait_for,
)
from tpfabric_localcluster.cluster import LocalCluster, api_client
from tpfabric_localcluster.tpfabric import service_account_kubeconfig

AGENT_NAMESPACE = "tpfabric-agents"
NODE_A, NODE_B = "gpu-node-a", "gpu-node-b"
HEALTH = "topology.tpfabric.io/health"
DETAIL = "topology.tpfabric.io/fabric-health"
TIMELINE = "topology.tpfabric.io/link-timeline"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
CONFIGURATION = "tpfabric-gangs"  # the gang webhook's MutatingWebhookConfiguration


@dataclass
class Chart:
    """The chart's confinement on the oldest control plane: its objects and who its accounts are."""

    cluster: LocalCluster
    objects: list[dict[str, Any]]
    folder: Path

    def account(self, component: str) -> str:
        return chart_account(self.objects, component)

    def as_account(self, component: str, *, pod: str | None = None) -> client.ApiClient:
        """Return a client with a token of ``component``'s ServiceAccount (bound to ``pod``)."""
        namespace = AGENT_NAMESPACE if component == "fabric-agent" else CHART_NAMESPACE
        path = self.folder / f"{component}-{pod or 'unbound'}.kubeconfig"
        kubeconfig = service_account_kubeconfig(
            self.cluster, namespace, self.account(component), path, 3600, pod=pod
        )
        return api_client(kubeconfig)

    @property
    def admin(self) -> client.ApiClient:
        return api_client(self.cluster.kubeconfig)


@pytest.fixture(scope="module")
def chart(oldest_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Chart:
    objects = render_chart(
        tmp_path_factory,
        "fabricAgent.enabled=true",
        f"fabricAgent.namespace={AGENT_NAMESPACE}",
        "gangWebhook.enabled=true",
        "discovery.enabled=true",
        "discovery.source.data=# ibnetdiscover dump",
    )
    apply_confinement(oldest_cluster, objects, [CHART_NAMESPACE, AGENT_NAMESPACE])
    configuration = [d for d in objects if d["kind"] == "MutatingWebhookConfiguration"]
    applied = run_kubectl(oldest_cluster, "apply", "-f", "-", stdin=json.dumps(configuration[0]))
    assert applied.returncode == 0, applied.stderr
    found = Chart(oldest_cluster, objects, tmp_path_factory.mktemp("tokens"))
    core = client.CoreV1Api(found.admin)
    for name in (NODE_A, NODE_B):
        core.create_node({"metadata": {"name": name, "labels": {HEALTH: "ok"}}})
    steer = {"metadata": {"labels": {"example.com/steer": "here"}}}
    probe = a_pod(found.admin, "policy-probe", scheduler="default-scheduler")
    by_uid = {"preconditions": {"uid": probe.metadata.uid}}
    widen = [{"op": "replace", "path": "/webhooks/0/namespaceSelector", "value": {}}]
    agent, discovery, scheduler, operator, webhook = (
        found.as_account(c)
        for c in ("fabric-agent", "discovery", "scheduler", "operator", "gang-webhook")
    )
    for component, write in {
        "fabric-agent": lambda: client.CoreV1Api(agent).patch_node(
            NODE_B, steer, dry_run="All", _content_type=MERGE
        ),
        "discovery": lambda: client.CoreV1Api(discovery).patch_node(
            NODE_B, steer, dry_run="All", _content_type=MERGE
        ),
        "scheduler": lambda: client.CoreV1Api(scheduler).delete_namespaced_pod(
            "policy-probe", CHART_NAMESPACE, body=by_uid, dry_run="All"
        ),
        "operator": lambda: client.CoreV1Api(operator).delete_namespaced_pod(
            "policy-probe", CHART_NAMESPACE, body=by_uid, dry_run="All"
        ),
        "gang-webhook": lambda: client.AdmissionregistrationV1Api(
            webhook
        ).patch_mutating_webhook_configuration(
            CONFIGURATION, widen, dry_run="All", _content_type=JSON_PATCH
        ),
    }.items():
        enforced(write, component)
    return found


def refusal(write: Callable[[], object]) -> tuple[int, str]:
    """Return the status and message of the API server's refusal of ``write`` ((0, "") if it
    passed)."""
    try:
        write()
    except ApiException as err:
        return err.status, str(json.loads(err.body).get("message", err.body))
    return 0, ""


def refused(write: Callable[[], object], words: str) -> None:
    """Assert that the API server refuses ``write`` with 403 and a message holding ``words``."""
    status, message = refusal(write)
    assert status == 403, (status, message)
    assert words in message, message


def enforced(write: Callable[[], object], what: str) -> None:
    """Wait until the API server refuses the dry run ``write`` with a policy's 403: a policy is
    enforced a moment after it is created (its informer), and a write let through meanwhile
    would change what the tests look at."""
    wait_for(
        lambda: (answer := refusal(write))[0] == 403 and "ValidatingAdmissionPolicy" in answer[1],
        timeout=30,
        what=f"the policy of {what} enforced",
        explain=lambda: f"the API server's answer: {refusal(write)}",
    )


# -- the fabric agent ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def agent_on_a(chart: Chart) -> client.CoreV1Api:
    """Return the API as the fabric agent of node A: its token bound to its pod on node A."""
    name = f"fabric-agent-{NODE_A}"
    agent_pod(chart.cluster, AGENT_NAMESPACE, chart.account("fabric-agent"), NODE_A, name)
    return client.CoreV1Api(chart.as_account("fabric-agent", pod=name))


def test_the_agent_of_node_a_cannot_write_node_b(
    chart: Chart, agent_on_a: client.CoreV1Api
) -> None:
    degraded = {"metadata": {"labels": {HEALTH: "degraded"}}}
    refused(
        lambda: agent_on_a.patch_node(NODE_B, degraded, _content_type=MERGE),
        f"the agent of node {NODE_A} may write only its own node, not node {NODE_B}",
    )
    condition = {"status": {"conditions": [fabric_condition("False")]}}
    refused(
        lambda: agent_on_a.patch_node_status(NODE_B, condition, _content_type=STRATEGIC),
        f"may write only its own node, not node {NODE_B}",
    )
    labels = client.CoreV1Api(chart.admin).read_node(NODE_B).metadata.labels
    assert labels[HEALTH] == "ok"


def fabric_condition(status: str) -> dict[str, str]:
    return {"type": "FabricHealthy", "status": status, "reason": "LinkDown", "message": "m"}


def test_the_agent_of_node_a_publishes_node_a_health(agent_on_a: client.CoreV1Api) -> None:
    annotations = {DETAIL: "{}", TIMELINE: '{"v":1}'}
    published = {"metadata": {"labels": {HEALTH: "degraded"}, "annotations": annotations}}
    agent_on_a.patch_node(NODE_A, published, _content_type=MERGE)
    contract = {
        "type": "FabricContractMet",
        "status": "False",
        "reason": "SettingsMismatch",
        "message": "PFC off on priority 3 on ens1f0np0",
    }
    condition = {"status": {"conditions": [fabric_condition("False"), contract]}}
    agent_on_a.patch_node_status(NODE_A, condition, _content_type=STRATEGIC)
    node = agent_on_a.read_node(NODE_A)
    assert node.metadata.labels[HEALTH] == "degraded"
    assert node.metadata.annotations[TIMELINE] == '{"v":1}'
    mine = {c.type: c.status for c in node.status.conditions if c.type.startswith("Fabric")}
    assert mine == {"FabricHealthy": "False", "FabricContractMet": "False"}


@pytest.mark.parametrize(
    ("write", "words"),
    [
        (
            {"spec": {"taints": [{"key": "evil", "effect": "NoSchedule"}]}},
            "spec (taints, unschedulable, podCIDR, providerID) must stay as it is",
        ),
        ({"spec": {"unschedulable": True}}, "spec (taints"),
        (
            {"metadata": {"labels": {"topology.tpfabric.io/leaf": "elsewhere"}}},
            "only the label topology.tpfabric.io/health may change, not topology.tpfabric.io/leaf",
        ),
        (
            {"metadata": {"annotations": {"example.com/steer": "here"}}},
            (
                "only the annotations topology.tpfabric.io/fabric-health and "
                "topology.tpfabric.io/link-timeline may change, not example.com/steer"
            ),
        ),
        (
            {"metadata": {"annotations": {DETAIL: "x" * 40_000}}},
            "holds 40000 characters, more than the 32768 of fabricAgent.maxDetailCharacters",
        ),
        (
            {"metadata": {"annotations": {TIMELINE: "x" * 20_000}}},
            (
                "link-timeline holds 20000 characters, more than the 16384 of "
                "fabricAgent.maxTimelineCharacters"
            ),
        ),
    ],
    ids=[
        "taint",
        "cordon",
        "other-label",
        "other-annotation",
        "oversized-detail",
        "oversized-timeline",
    ],
)
def test_the_agent_cannot_change_the_rest_of_its_own_node(
    agent_on_a: client.CoreV1Api, write: dict[str, Any], words: str
) -> None:
    refused(lambda: agent_on_a.patch_node(NODE_A, write, _content_type=MERGE), words)


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (
            {"conditions": [{"type": "Ready", "status": "False", "reason": "x", "message": "x"}]},
            "only the FabricHealthy and FabricContractMet conditions may change",
        ),
        ({"capacity": {"nvidia.com/gpu": "64"}}, "its status (capacity, allocatable"),
        ({"addresses": [{"type": "InternalIP", "address": "10.6.6.6"}]}, "addresses"),
    ],
    ids=["ready-condition", "capacity", "addresses"],
)
def test_the_agent_cannot_change_its_nodes_status_beyond_its_condition(
    agent_on_a: client.CoreV1Api, status: dict[str, Any], words: str
) -> None:
    write = {"status": status}
    refused(lambda: agent_on_a.patch_node_status(NODE_A, write, _content_type=STRATEGIC), words)


def test_an_agent_token_bound_to_no_pod_writes_no_node(chart: Chart) -> None:
    unbound = client.CoreV1Api(chart.as_account("fabric-agent"))
    write = {"metadata": {"labels": {HEALTH: "ok"}}}
    refused(
        lambda: unbound.patch_node(NODE_A, write, _content_type=MERGE),
        "its token names no node; it must be the projected token of an agent pod",
    )


def heartbeat(node: str, uid: str, *, holder: str | None = None) -> dict[str, Any]:
    """Return the heartbeat Lease of ``node``'s agent as the agent creates it."""
    return {
        "metadata": {
            "name": f"fabric-agent-{node}",
            "labels": {"tpfabric.io/heartbeat": "fabric-agent"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}],
        },
        # no time: the client's typed Lease would rewrite it (the agent renews by a patch)
        "spec": {"holderIdentity": holder or node, "leaseDurationSeconds": 40},
    }


def test_the_agent_of_node_a_creates_and_renews_its_own_heartbeat(
    chart: Chart, agent_on_a: client.CoreV1Api
) -> None:
    leases = client.CoordinationV1Api(agent_on_a.api_client)
    uid = client.CoreV1Api(chart.admin).read_node(NODE_A).metadata.uid
    leases.create_namespaced_lease(AGENT_NAMESPACE, heartbeat(NODE_A, uid))
    renewal = {"spec": {"renewTime": "2026-01-01T00:00:10.000000Z", "holderIdentity": NODE_A}}
    leases.patch_namespaced_lease(
        f"fabric-agent-{NODE_A}", AGENT_NAMESPACE, renewal, _content_type=MERGE
    )
    placer = client.CoordinationV1Api(chart.as_account("scheduler"))
    (read,) = placer.list_namespaced_lease(
        AGENT_NAMESPACE, label_selector="tpfabric.io/heartbeat"
    ).items
    assert read.spec.holder_identity == NODE_A


def test_the_agent_of_node_a_cannot_write_another_nodes_heartbeat_or_another_lease(
    chart: Chart, agent_on_a: client.CoreV1Api
) -> None:
    leases = client.CoordinationV1Api(agent_on_a.api_client)
    uid_b = client.CoreV1Api(chart.admin).read_node(NODE_B).metadata.uid
    enforced(
        lambda: leases.create_namespaced_lease(
            AGENT_NAMESPACE, heartbeat(NODE_B, uid_b), dry_run="All"
        ),
        "the agent's heartbeat",
    )
    refused(
        lambda: leases.create_namespaced_lease(AGENT_NAMESPACE, heartbeat(NODE_B, uid_b)),
        f"the agent of node {NODE_A} may write only the Lease fabric-agent-{NODE_A}, not "
        f"fabric-agent-{NODE_B}",
    )
    other = heartbeat(NODE_A, uid_b)
    other["metadata"]["name"] = "tpfabric-placer"
    refused(
        lambda: leases.create_namespaced_lease(AGENT_NAMESPACE, other),
        "may write only the Lease fabric-agent-",
    )
    uid_a = client.CoreV1Api(chart.admin).read_node(NODE_A).metadata.uid
    refused(
        lambda: leases.create_namespaced_lease(
            AGENT_NAMESPACE, heartbeat(NODE_A, uid_a, holder=NODE_B), dry_run="All"
        ),
        "is held by node " + NODE_A,
    )
    owned_by_b = heartbeat(NODE_A, uid_a)
    owned_by_b["metadata"]["ownerReferences"] = heartbeat(NODE_B, uid_b)["metadata"][
        "ownerReferences"
    ]
    refused(
        lambda: leases.create_namespaced_lease(AGENT_NAMESPACE, owned_by_b, dry_run="All"),
        f"may be owned by node {NODE_A} only",
    )
    status, _ = refusal(
        lambda: leases.delete_namespaced_lease(f"fabric-agent-{NODE_A}", AGENT_NAMESPACE)
    )
    assert status == 403, "the agent never deletes a Lease (its Role has no delete)"


def test_the_placer_marks_a_silent_agents_node_unknown_and_nothing_else(chart: Chart) -> None:
    placer = client.CoreV1Api(chart.as_account("scheduler"))
    silent = {
        "type": "FabricHealthy",
        "status": "Unknown",
        "reason": "AgentSilent",
        "message": "the fabric agent of node gpu-node-b has not renewed its heartbeat",
    }
    healthy = {**silent, "status": "True", "reason": "LinksHealthy"}
    enforced(
        lambda: placer.patch_node_status(
            NODE_B, {"status": {"conditions": [healthy]}}, dry_run="All", _content_type=STRATEGIC
        ),
        "the placer's node writes",
    )
    refused(
        lambda: placer.patch_node_status(
            NODE_B, {"status": {"conditions": [healthy]}}, _content_type=STRATEGIC
        ),
        "it may only mark FabricHealthy Unknown with reason AgentSilent",
    )
    ready = {"type": "Ready", "status": "False", "reason": "x", "message": "x"}
    refused(
        lambda: placer.patch_node_status(
            NODE_B, {"status": {"conditions": [ready]}}, _content_type=STRATEGIC
        ),
        "only the FabricHealthy condition may change",
    )
    refused(
        lambda: placer.patch_node_status(
            NODE_B, {"status": {"capacity": {"nvidia.com/gpu": "64"}}}, _content_type=STRATEGIC
        ),
        "its status (capacity, allocatable",
    )
    placer.patch_node_status(NODE_B, {"status": {"conditions": [silent]}}, _content_type=STRATEGIC)
    node = placer.read_node(NODE_B)
    assert [(c.status, c.reason) for c in node.status.conditions if c.type == "FabricHealthy"] == [
        ("Unknown", "AgentSilent")
    ]
    status, _ = refusal(
        lambda: placer.patch_node(
            NODE_B, {"metadata": {"labels": {HEALTH: "ok"}}}, _content_type=MERGE
        )
    )
    assert status == 403, "the placer writes no node's labels (RBAC: nodes/status only)"


# -- topology discovery --------------------------------------------------------------------------


def test_discovery_writes_only_topology_labels(chart: Chart) -> None:
    discovery = client.CoreV1Api(chart.as_account("discovery"))
    leaf = {"metadata": {"labels": {"topology.tpfabric.io/leaf": "leaf-3"}}}
    discovery.patch_node(NODE_B, leaf, _content_type=MERGE)
    refused(
        lambda: discovery.patch_node(
            NODE_B, {"metadata": {"labels": {"node-role.kubernetes.io/x": ""}}}, _content_type=MERGE
        ),
        "only labels under topology.tpfabric.io/ may change, not node-role.kubernetes.io/x",
    )
    taint = {"spec": {"taints": [{"key": "evil", "effect": "NoExecute"}]}}
    refused(
        lambda: discovery.patch_node(NODE_B, taint, _content_type=MERGE),
        "annotations, spec and taints stay as they are",
    )


# -- pods: the operator and the scheduler --------------------------------------------------------


def a_pod(api: client.ApiClient, name: str, scheduler: str = "tpfabric-scheduler") -> client.V1Pod:
    """Create a gated worker pod (what the operator or the webhook makes) in the chart's
    namespace; return it."""
    gates = [{"name": "tpfabric.io/gang"}, {"name": "example.com/quota"}]
    return client.CoreV1Api(api).create_namespaced_pod(
        CHART_NAMESPACE,
        {
            "metadata": {
                "name": name,
                "labels": {"app": "trainer", "tpfabric.io/job-name": "llama"},
            },
            "spec": {
                "schedulerName": scheduler,
                "schedulingGates": gates if scheduler == "tpfabric-scheduler" else [],
                "containers": [{"name": "trainer", "image": "registry.example/train:1"}],
            },
        },
    )


NARROWED = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "topology.tpfabric.io/leaf", "operator": "In", "values": ["l1"]}
                    ]
                }
            ]
        }
    }
}


@pytest.mark.parametrize("component", ["scheduler", "operator"])
def test_a_pods_image_labels_tolerations_and_gates_are_not_tpfabrics_to_change(
    chart: Chart, component: str
) -> None:
    name = f"hostile-{component}"
    a_pod(chart.admin, name)
    core = client.CoreV1Api(chart.as_account(component))
    who = f"tpfabric {component}: pod {CHART_NAMESPACE}/{name}"
    image = [{"op": "replace", "path": "/spec/containers/0/image", "value": "evil:1"}]
    refused(
        lambda: core.patch_namespaced_pod(name, CHART_NAMESPACE, image, _content_type=JSON_PATCH),
        f"{who}: only its node affinity and a tpfabric.io/ scheduling gate may change",
    )
    # the API server lets anyone with patch add a toleration; the policy does not
    toleration = [{"op": "add", "path": "/spec/tolerations/-", "value": {"operator": "Exists"}}]
    refused(
        lambda: core.patch_namespaced_pod(
            name, CHART_NAMESPACE, toleration, _content_type=JSON_PATCH
        ),
        "tolerations, node selector and pod affinity stay as they are",
    )
    relabel = {"metadata": {"labels": {"app": "miner"}}}
    refused(
        lambda: core.patch_namespaced_pod(name, CHART_NAMESPACE, relabel),
        f"{who}: only labels and annotations under tpfabric.io/ may change, not app",
    )
    others_gate = [
        {"op": "replace", "path": "/spec/schedulingGates", "value": [{"name": "tpfabric.io/gang"}]}
    ]
    refused(
        lambda: core.patch_namespaced_pod(
            name, CHART_NAMESPACE, others_gate, _content_type=JSON_PATCH
        ),
        f"{who}: only tpfabric.io/ scheduling gates may be removed",
    )
    pod = client.CoreV1Api(chart.admin).read_namespaced_pod(name, CHART_NAMESPACE)
    assert pod.spec.containers[0].image == "registry.example/train:1"
    assert pod.metadata.labels["app"] == "trainer"


def test_the_scheduler_releases_a_gang_pod_and_deletes_it_by_uid(chart: Chart) -> None:
    pod = a_pod(chart.admin, "released")
    core = client.CoreV1Api(chart.as_account("scheduler"))
    release = [
        {"op": "test", "path": "/metadata/uid", "value": pod.metadata.uid},
        {"op": "add", "path": "/spec/affinity", "value": NARROWED},
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": "example.com/quota"}]},
    ]
    core.patch_namespaced_pod("released", CHART_NAMESPACE, release, _content_type=JSON_PATCH)
    rails = {"metadata": {"annotations": {"tpfabric.io/rails": "0,1,2,3"}}}
    core.patch_namespaced_pod("released", CHART_NAMESPACE, rails)
    refused(
        lambda: core.delete_namespaced_pod("released", CHART_NAMESPACE),
        f"a delete must name the pod by uid (preconditions.uid {pod.metadata.uid})",
    )
    by_uid = {"preconditions": {"uid": pod.metadata.uid}}
    core.delete_namespaced_pod("released", CHART_NAMESPACE, body=by_uid)


def test_the_operator_ranks_its_pods_and_deletes_them_by_uid(chart: Chart) -> None:
    pod = a_pod(chart.admin, "ranked")
    core = client.CoreV1Api(chart.as_account("operator"))
    rank = {"metadata": {"labels": {"tpfabric.io/rank": "3"}}}
    core.patch_namespaced_pod("ranked", CHART_NAMESPACE, rank)
    annotate = {"metadata": {"annotations": {"tpfabric.io/plan-level": "leaf"}}}
    core.patch_namespaced_pod("ranked", CHART_NAMESPACE, annotate)
    by_uid = {"preconditions": {"uid": pod.metadata.uid}}
    core.delete_namespaced_pod("ranked", CHART_NAMESPACE, body=by_uid)


@pytest.mark.parametrize("component", ["scheduler", "operator"])
def test_pods_another_scheduler_places_are_not_tpfabrics_to_delete(
    chart: Chart, component: str
) -> None:
    pod = a_pod(chart.admin, f"web-{component}", scheduler="default-scheduler")
    core = client.CoreV1Api(chart.as_account(component))
    by_uid = {"preconditions": {"uid": pod.metadata.uid}}
    refused(
        lambda: core.delete_namespaced_pod(f"web-{component}", CHART_NAMESPACE, body=by_uid),
        "is not placed by tpfabric-scheduler; it deletes only pods tpfabric places",
    )


@pytest.mark.parametrize("component", ["scheduler", "operator"])
def test_no_account_deletes_a_collection_of_pods(chart: Chart, component: str) -> None:
    core = client.CoreV1Api(chart.as_account(component))
    status, message = refusal(
        lambda: core.delete_collection_namespaced_pod(CHART_NAMESPACE, label_selector="app")
    )
    assert status == 403
    assert 'cannot deletecollection resource "pods"' in message


def test_the_scheduler_cannot_take_the_default_schedulers_lease(chart: Chart) -> None:
    leases = client.CoordinationV1Api(chart.as_account("scheduler"))
    for write in (
        lambda: leases.read_namespaced_lease("kube-scheduler", "kube-system"),
        lambda: leases.create_namespaced_lease(
            "kube-system", {"metadata": {"name": "kube-scheduler"}, "spec": {}}
        ),
    ):
        status, message = refusal(write)
        assert status == 403, message
        assert "system:serviceaccount:tpfabric-system:tpfabric-scheduler" in message


# -- the gang webhook ----------------------------------------------------------------------------


def test_the_webhook_sets_its_ca_bundle_and_nothing_else(chart: Chart) -> None:
    hooks = client.AdmissionregistrationV1Api(chart.as_account("gang-webhook"))
    bundle = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n...").decode()
    ca = [{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle}]
    hooks.patch_mutating_webhook_configuration(CONFIGURATION, ca, _content_type=JSON_PATCH)
    for path, value in (
        ("/webhooks/0/namespaceSelector", {}),
        ("/webhooks/0/objectSelector", {}),
        ("/webhooks/0/failurePolicy", "Ignore"),
        ("/webhooks/0/clientConfig/service/name", "elsewhere"),
    ):
        widen = [{"op": "replace", "path": path, "value": value}]
        refused(
            lambda widen=widen: hooks.patch_mutating_webhook_configuration(
                CONFIGURATION, widen, _content_type=JSON_PATCH
            ),
            f"tpfabric gang webhook: {CONFIGURATION}: only the caBundle of its webhooks may change",
        )


def test_the_webhook_writes_no_other_configuration_and_makes_no_secret(chart: Chart) -> None:
    account = chart.as_account("gang-webhook")
    other = {"metadata": {"name": "someone-elses"}, "webhooks": []}
    client.AdmissionregistrationV1Api(chart.admin).create_mutating_webhook_configuration(other)
    status, message = refusal(
        lambda: client.AdmissionregistrationV1Api(account).patch_mutating_webhook_configuration(
            "someone-elses", {"metadata": {"labels": {"x": "y"}}}
        )
    )
    assert (status, "cannot patch resource" in message) == (403, True), message
    status, message = refusal(
        lambda: client.CoreV1Api(account).create_namespaced_secret(
            CHART_NAMESPACE, {"metadata": {"name": "stolen"}}
        )
    )
    assert (status, "cannot create resource" in message) == (403, True), message


# -- kube-scheduler's role -----------------------------------------------------------------------

#: what the chart's copy of system:kube-scheduler leaves out: leader election, whose lease
#: ``kube-scheduler`` is the default scheduler's (the chart's Role grants tpfabric's own leases)
LEADER_ELECTION = {("coordination.k8s.io", "leases"), ("coordination.k8s.io", "leasecandidates")}


def grants(rule: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    """Return (group, resource, verb, name) of everything ``rule`` grants (name "" for any)."""
    return {
        (group, resource, verb, name)
        for group in rule.get("apiGroups") or []
        for resource in rule.get("resources") or []
        for verb in rule.get("verbs") or []
        for name in rule.get("resourceNames") or [""]
    }


@pytest.mark.parametrize("version", ["oldest", "pinned"])
def test_the_chart_runs_kube_scheduler_with_its_clusters_role_but_the_default_schedulers_lease(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, version: str
) -> None:
    cluster: LocalCluster = request.getfixturevalue(
        "oldest_cluster" if version == "oldest" else "local_cluster"
    )
    copy = next(
        d
        for d in render_chart(tmp_path_factory)
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "tpfabric-kube-scheduler"
    )
    given = set().union(*(grants(rule) for rule in copy["rules"]))
    with api_client(cluster.kubeconfig) as api:
        live = client.RbacAuthorizationV1Api(api).read_cluster_role("system:kube-scheduler")
        rules = api.sanitize_for_serialization(live.rules)
    wanted = set().union(*(grants(rule) for rule in rules))
    kept = {g for g in wanted if (g[0], g[1]) not in LEADER_ELECTION}
    missing = {g for g in kept if g not in given and (g[0], g[1], g[2], "") not in given}
    assert not missing, f"the chart's copy of system:kube-scheduler lacks {sorted(missing)}"
    assert not {g for g in given if (g[0], g[1]) in LEADER_ELECTION}
    assert ("coordination.k8s.io", "leases", "update", "kube-scheduler") in wanted
