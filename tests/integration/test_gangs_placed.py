"""Gangs other controllers make, placed end to end: the gang webhook wires their pods,
the operator keeps a Gang record per gang (size, ranks, status), the placer plans the record as
it plans a TensorParallelJob and releases the pods into one leaf, kube-scheduler binds them.

Real kube-apiserver, kube-controller-manager (its Job controller makes pods in one test),
kube-scheduler with tpfabric's profile, the placer/extender, the operator and the webhook, on
kwok nodes: two leaves of eight (and, for gangs on a TCP-only GPU pool, two leaves of two nodes
without RDMA devices).
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
    clear_jobs_and_pods,
    gang_pod,
    operator_and_gang_webhook,
    opt_in,
    run_kubectl,
    spec_writes,
    wait_for,
)
from tpfabric_core import labels
from tpfabric_core.api import ATTEMPT_LABEL, GROUP, VERSION
from tpfabric_core.api.gang import GANG_PLURAL
from tpfabric_core.gangs import GANG_LABEL, GANG_NAME_LABEL, GANG_SIZE_LABEL, RANK_LABEL
from tpfabric_core.rail_ports import (
    PLAN_LEVEL_ANNOTATION,
    RAIL_PORTS_ANNOTATION,
    RAILS_ANNOTATION,
    format_rail_ports,
)
from tpfabric_core.rdma_default import RDMA_ANNOTATION, parse_decision
from tpfabric_localcluster.cluster import LocalCluster
from tpfabric_localcluster.gang_webhook import GangWebhook

pytestmark = pytest.mark.integration

FABRIC = """
name: gangs
rails: 8
railOptimized: true
rdmaResource: rdma/ib
node: {gpus: 8, rdma: 8, cpu: "128", memory: 2Ti, pods: 110}
blocks:
- name: gng
  spines:
  - name: gng-su
    leaves:
    - {name: gng-leaf1, nodes: ["gng-l1-[01-08]"]}
    - {name: gng-leaf2, nodes: ["gng-l2-[01-08]"]}
"""


@pytest.fixture(scope="module")
def components(tpfabric_scheduling: LocalCluster, api: client.ApiClient) -> Iterator[GangWebhook]:
    """The webhook (configured) and the operator, beside the placer and the scheduler."""
    with operator_and_gang_webhook(tpfabric_scheduling, api) as hook:
        yield hook


def opted_in_on(
    fabric: str, api: client.ApiClient, namespace: str, fake_nodes: FabricFactory
) -> Iterator[str]:
    """Yield the test's namespace, opted in, with the nodes of ``fabric``; clear it afterwards."""
    fake_nodes(fabric)
    yield opt_in(api, namespace)
    clear_jobs_and_pods(api, namespace)


@pytest.fixture
def enabled(
    components: GangWebhook, api: client.ApiClient, namespace: str, fake_nodes: FabricFactory
) -> Iterator[str]:
    """The test's namespace, opted in, with the sixteen ``gng-*`` nodes."""
    yield from opted_in_on(FABRIC, api, namespace, fake_nodes)


def member(name: str, gang: str, size: int, rank: int | None = None) -> dict[str, Any]:
    labels = {GANG_NAME_LABEL: gang, GANG_SIZE_LABEL: str(size)}
    if rank is not None:
        labels[RANK_LABEL] = str(rank)
    return gang_pod(name, labels, cpu="1")


def gang_pods(core: client.CoreV1Api, namespace: str, gang: str) -> list[client.V1Pod]:
    return list(core.list_namespaced_pod(namespace, label_selector=f"{GANG_LABEL}={gang}").items)


def record(custom: client.CustomObjectsApi, namespace: str, gang: str) -> dict[str, Any] | None:
    try:
        return dict(
            custom.get_namespaced_custom_object(GROUP, VERSION, namespace, GANG_PLURAL, gang)
        )
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def wait_running(
    core: client.CoreV1Api, namespace: str, gang: str, size: int
) -> list[client.V1Pod]:
    def running() -> list[client.V1Pod] | None:
        pods = gang_pods(core, namespace, gang)
        ok = len(pods) == size and all(p.status.phase == "Running" for p in pods)
        return pods if ok else None

    def explain() -> str:
        custom = client.CustomObjectsApi(core.api_client)
        lines = [f"record: {(record(custom, namespace, gang) or {}).get('status')}"]
        lines += [
            f"{p.metadata.name}: rank {p.metadata.labels.get(RANK_LABEL)} "
            f"gates {[g.name for g in p.spec.scheduling_gates or []]} node {p.spec.node_name} "
            f"{p.status.phase}"
            for p in gang_pods(core, namespace, gang)
        ]
        return "\n".join(lines)

    pods: list[client.V1Pod] = wait_for(
        running, 90, what=f"gang {gang}'s {size} pods Running", explain=explain
    )
    return pods


def leaf_of(node: str) -> str:
    return node.split("-")[1]  # gng-l1-03 -> l1


def test_a_plain_pod_group_of_six_lands_whole_in_one_leaf_ranked_and_recorded(
    api: client.ApiClient, enabled: str, tpfabric_scheduling: LocalCluster
) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    for index in range(6):  # no rank labels: the operator ranks them by creation
        core.create_namespaced_pod(enabled, member(f"bert-{index}", "bert", 6))
    pods = wait_running(core, enabled, "bert", 6)
    nodes = {p.metadata.labels[RANK_LABEL]: p.spec.node_name for p in pods}
    assert sorted(nodes) == [str(r) for r in range(6)], "every pod got a rank, none twice"
    assert len({leaf_of(n) for n in nodes.values()}) == 1, f"one leaf: {nodes}"
    assert len(set(nodes.values())) == 6, "one pod per 8-GPU node"
    for pod in pods:
        assert pod.spec.init_containers[0].name == "rdma-init"

    def recorded() -> dict[str, Any] | None:
        gang = record(custom, enabled, "bert")
        status = (gang or {}).get("status") or {}
        return gang if status.get("phase") == "Running" and status.get("ready") == "6/6" else None

    gang: dict[str, Any] = wait_for(recorded, 30, what="the Gang record Running, 6/6 ready")
    assert gang["spec"]["workers"] == 6
    assert gang["spec"]["owner"] == {"kind": "PodGroup", "name": "bert"}
    placement = gang["status"]["placement"]
    assert placement["state"] == "Planned"
    assert placement["level"] == "leaf"
    assert [placement["nodes"][int(r)] for r in sorted(nodes)] == [nodes[r] for r in sorted(nodes)]
    table = run_kubectl(tpfabric_scheduling, "get", "gangs", "-n", enabled)
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()[:2]
    assert header.split()[:6] == ["NAME", "PHASE", "READY", "LEVEL", "DOMAIN", "HOPS"]
    assert row.split()[:2] == ["bert", "Running"]
    assert "leaf" in row.split()


def a_job(name: str, gang: str, size: int, pods: int) -> dict[str, Any]:
    """A Job of ``pods`` pods, each labelled a member of ``gang`` of ``size``."""
    template = member("x", gang, size)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {
                "metadata": {"labels": template["metadata"]["labels"]},
                "spec": {**template["spec"], "restartPolicy": "Never"},
            },
        },
    }


def test_pods_a_job_controller_makes_one_by_one_without_a_rank_are_placed_once_all_exist(
    api: client.ApiClient, enabled: str
) -> None:
    """A Job that is not Indexed gives its pods no rank: they are ranked by creation once all
    exist, carry no attempt and are planned whole (nothing of them is born released)."""
    client.BatchV1Api(api).create_namespaced_job(enabled, a_job("plain", "plain", 4, 4))
    pods = wait_bound(client.CoreV1Api(api), enabled, "plain", 4)
    assert len({leaf_of(p.spec.node_name) for p in pods}) == 1
    assert sorted(p.metadata.labels[RANK_LABEL] for p in pods) == ["0", "1", "2", "3"]
    assert all(ATTEMPT_LABEL not in p.metadata.labels for p in pods), "not numbered"
    writes = {p.metadata.name: spec_writes(p) for p in pods}
    assert all(len(w) == 2 for w in writes.values()), f"created gated, released: {writes}"


COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def wait_bound(core: client.CoreV1Api, namespace: str, gang: str, size: int) -> list[client.V1Pod]:
    """Return the gang's pods once all ``size`` are bound (kwok runs a Job's pods to completion
    at once: bound, not Running)."""

    def bound() -> list[client.V1Pod] | None:
        pods = gang_pods(core, namespace, gang)
        return pods if len(pods) == size and all(p.spec.node_name for p in pods) else None

    pods: list[client.V1Pod] = wait_for(bound, 90, what=f"gang {gang}'s {size} pods bound")
    return pods


def placed_in_two_waves(api: client.ApiClient, namespace: str, gang: str) -> dict[str, Any]:
    """Check an Indexed Job's gang of 4 whose indices 2 and 3 were made after its plan: each
    pod's rank is its completion index, all of the plan's attempt, 0 and 1 created gated and
    released by the placer, 2 and 3 born released (one write each), each on its planned node.
    Return the Gang record."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    by_rank = {int(p.metadata.labels[RANK_LABEL]): p for p in wait_bound(core, namespace, gang, 4)}
    assert sorted(by_rank) == [0, 1, 2, 3]
    assert all(p.metadata.labels[COMPLETION_INDEX] == str(r) for r, p in by_rank.items())
    assert {p.metadata.labels[ATTEMPT_LABEL] for p in by_rank.values()} == {"0"}
    writes = {rank: spec_writes(pod) for rank, pod in by_rank.items()}
    assert [len(writes[r]) for r in range(4)] == [2, 2, 1, 1], (
        f"ranks 0 and 1 created gated and released by the placer, 2 and 3 born released: {writes}"
    )
    gang_record = record(custom, namespace, gang) or {}
    plan = gang_record["status"]["placement"]
    assert (plan["state"], plan["attempt"]) == ("Planned", 0)
    assert [by_rank[r].spec.node_name for r in range(4)] == plan["nodes"], "each on its node"
    assert len({leaf_of(p.spec.node_name) for p in by_rank.values()}) == 1
    return gang_record


def test_an_indexed_jobs_pod_group_is_planned_from_its_first_pods_and_the_rest_born_released(
    api: client.ApiClient, enabled: str
) -> None:
    """An Indexed Job of 4 completions, 2 at a time, its pods labelled one pod group of 4:
    each pod's rank is its completion index, known at admission, and the Job makes a deleted
    pod again, so the gang is numbered and planned from its first two pods. The Job makes
    indices 2 and 3 only once 0 and 1 have run (kwok runs them to completion at once), so after
    the plan: the gang webhook creates each released onto the plan, on its rank's planned
    node in the same leaf, one write each and none by the placer."""
    job = a_job("waves", "waves", 4, 4)
    job["spec"].update(completionMode="Indexed", parallelism=2)
    client.BatchV1Api(api).create_namespaced_job(enabled, job)
    placed_in_two_waves(api, enabled, "waves")


HOLD = "example.com/hold"


def test_an_indexed_jobs_pod_deleted_is_made_again_as_a_later_attempt_checked_by_the_placer(
    api: client.ApiClient, enabled: str
) -> None:
    """The Job's pods carry a gate of the test's own, so that they stay unbound (kwok would run
    a Job's bound pod to completion at once, and a completed index is not made again): the
    gang is planned, its pods released of tpfabric's gate or born released. Index 1 deleted,
    the Job makes it again with the same completion index: the gang webhook numbers it attempt
    1, gated; the placer checks its planned node and releases it (its creation and the
    placer's patch); once the test lifts its gate, all four bind on their planned nodes."""
    job = a_job("mend", "mend", 4, 4)
    job["spec"]["completionMode"] = "Indexed"
    job["spec"]["template"]["spec"]["schedulingGates"] = [{"name": HOLD}]
    client.BatchV1Api(api).create_namespaced_job(enabled, job)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)

    def released() -> list[client.V1Pod] | None:
        pods = gang_pods(core, enabled, "mend")
        ours = [g for p in pods for g in p.spec.scheduling_gates or [] if g.name != HOLD]
        return pods if len(pods) == 4 and not ours else None

    pods = wait_for(released, 60, what="the Job's four pods released of tpfabric's gate")
    plan = (record(custom, enabled, "mend") or {})["status"]["placement"]
    gone = next(p for p in pods if p.metadata.labels[RANK_LABEL] == "1")
    core.delete_namespaced_pod(gone.metadata.name, enabled, grace_period_seconds=0)

    def made_again() -> client.V1Pod | None:
        for pod in gang_pods(core, enabled, "mend"):
            fresh = pod.metadata.uid != gone.metadata.uid and not pod.metadata.deletion_timestamp
            if fresh and pod.metadata.labels[RANK_LABEL] == "1":
                ours = [g for g in pod.spec.scheduling_gates or [] if g.name != HOLD]
                return pod if not ours else None
        return None

    again = wait_for(made_again, 60, what="index 1 made again and released by the placer")
    assert again.metadata.labels[ATTEMPT_LABEL] == "1", "a later attempt than the plan's"
    assert len(spec_writes(again)) == 2, f"created gated, released: {spec_writes(again)}"
    for pod in gang_pods(core, enabled, "mend"):
        if not pod.metadata.deletion_timestamp:
            core.patch_namespaced_pod(
                pod.metadata.name, enabled, {"spec": {"schedulingGates": None}}
            )

    def bound() -> dict[int, str] | None:
        live = [p for p in gang_pods(core, enabled, "mend") if not p.metadata.deletion_timestamp]
        nodes = {int(p.metadata.labels[RANK_LABEL]): p.spec.node_name for p in live}
        return nodes if len(live) == 4 and all(nodes.values()) else None

    nodes = wait_for(bound, 60, what="the four pods bound once the test's gate is lifted")
    assert [nodes[r] for r in range(4)] == plan["nodes"], "each on its planned node, rank 1 too"


def test_a_gang_whose_pods_come_slowly_waits_for_the_last_and_its_record_goes_with_them(
    api: client.ApiClient, enabled: str
) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    for rank in range(3):
        core.create_namespaced_pod(enabled, member(f"slow-{rank}", "slow", 4, rank))
        time.sleep(1)
    gang = wait_for(lambda: record(custom, enabled, "slow"), 20, what="the Gang record")
    time.sleep(3)  # a plan would come within a cycle; none may come for 3 of 4 pods
    gang = record(custom, enabled, "slow") or gang
    assert ((gang.get("status") or {}).get("placement") or {}).get("state") != "Planned"
    assert all(not p.spec.node_name for p in gang_pods(core, enabled, "slow"))
    assert (gang.get("status") or {}).get("phase") == "Pending"
    core.create_namespaced_pod(enabled, member("slow-3", "slow", 4, 3))
    pods = wait_running(core, enabled, "slow", 4)
    assert len({leaf_of(p.spec.node_name) for p in pods}) == 1
    for pod in pods:
        core.delete_namespaced_pod(pod.metadata.name, enabled, grace_period_seconds=0)
    wait_for(lambda: record(custom, enabled, "slow") is None, 30, what="the record deleted")


def _problems(custom: client.CustomObjectsApi, namespace: str, gang: str) -> list[str] | None:
    status = (record(custom, namespace, gang) or {}).get("status") or {}
    return list(status["problems"]) if status.get("problems") else None


def test_two_owners_claiming_one_gang_name_get_an_invalid_record_and_no_plan(
    api: client.ApiClient, enabled: str
) -> None:
    """Two Jobs whose pods both say ``tpfabric.io/gang-name: shared`` (size 4, two pods each):
    the record names the label and both owners; nothing of the 'gang' is planned or bound."""
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    for name in ("first", "second"):
        batch.create_namespaced_job(enabled, a_job(name, "shared", 4, 2))
    problems = wait_for(
        lambda: _problems(custom, enabled, "shared"), 60, what="the record naming its problem"
    )
    assert any(
        p.startswith("tpfabric.io/gang-name: 'shared' is claimed by pods of 2 owners")
        and "Job/first" in p
        and "Job/second" in p
        for p in problems
    ), problems
    gang = record(custom, enabled, "shared") or {}
    assert gang["status"]["phase"] == "Invalid"
    time.sleep(3)  # a plan would come within a cycle
    gang = record(custom, enabled, "shared") or {}
    assert (gang["status"].get("placement") or {}).get("state") != "Planned"
    assert all(not p.spec.node_name for p in gang_pods(core, enabled, "shared"))
    for name in ("first", "second"):
        batch.delete_namespaced_job(name, enabled, propagation_policy="Background")


def test_a_gang_split_across_two_namespaces_says_so_in_both_records_naming_neither_other(
    api: client.ApiClient, enabled: str
) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    other = f"{enabled[:50]}-b"
    core.create_namespace({"metadata": {"name": other}})
    try:
        opt_in(api, other)
        wait_for(lambda: core.list_namespaced_service_account(other).items, what="its account")
        for namespace in (enabled, other):
            for rank in range(2):
                core.create_namespaced_pod(namespace, member(f"split-{rank}", "split", 4, rank))
        for namespace, elsewhere in ((enabled, other), (other, enabled)):
            problems = wait_for(
                lambda ns=namespace: _problems(custom, ns, "split"), 60, what=f"{namespace}'s"
            )
            expected = (
                f"tpfabric.io/gang-name: 2 of 4 pods of 'split' are in namespace '{namespace}', "
                "and another namespace has a gang of that name too: a gang's pods must all be in "
                "one namespace"
            )
            assert problems == [expected]
            record_text = str(record(custom, namespace, "split"))
            assert elsewhere not in record_text.replace(namespace, "")  # the other is not named
    finally:
        clear_jobs_and_pods(api, other)
        core.delete_namespace(other)


def test_a_record_deleted_while_its_gang_runs_comes_back_with_its_placement(
    api: client.ApiClient, enabled: str
) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    for rank in range(2):
        core.create_namespaced_pod(enabled, member(f"kept-{rank}", "kept", 2, rank))
    pods = wait_running(core, enabled, "kept", 2)
    (leaf,) = {leaf_of(p.spec.node_name) for p in pods}
    first = record(custom, enabled, "kept") or {}
    custom.delete_namespaced_custom_object(GROUP, VERSION, enabled, GANG_PLURAL, "kept")

    def recovered() -> dict[str, Any] | None:
        again = record(custom, enabled, "kept") or {}
        if again.get("metadata", {}).get("uid") in (None, first["metadata"]["uid"]):
            return None
        placement = (again.get("status") or {}).get("placement") or {}
        return placement if placement.get("state") == "Planned" else None

    placement = wait_for(recovered, 60, what="the record made again, its placement read back")
    assert placement["nodes"] == [
        p.spec.node_name for p in sorted(pods, key=lambda p: p.metadata.labels[RANK_LABEL])
    ]
    assert leaf_of(placement["nodes"][0]) == leaf
    assert placement["level"] == "leaf"
    assert "read back from the 2 running pods" in placement["reasons"][0]["reason"]
    assert {p.metadata.uid for p in gang_pods(core, enabled, "kept")} == {
        p.metadata.uid for p in pods
    }, "nothing moved"


PODGROUPS = ("scheduling.k8s.io", "v1beta1", "podgroups")


def create_pod_group(
    custom: client.CustomObjectsApi, namespace: str, name: str, spec: dict[str, Any]
) -> dict[str, Any]:
    """Create a Workload API PodGroup; return it as created."""
    group, version, plural = PODGROUPS
    body = {"apiVersion": f"{group}/{version}", "kind": "PodGroup", "metadata": {"name": name}}
    created: dict[str, Any] = custom.create_namespaced_custom_object(
        group, version, namespace, plural, {**body, "spec": spec}
    )
    return created


def test_pods_naming_a_workload_api_pod_group_are_placed_as_one_gang_of_its_size(
    api: client.ApiClient, enabled: str
) -> None:
    """The upstream Workload API (``GenericWorkload``, beta in v1.37): a PodGroup with a gang
    policy of 3 and a topology constraint on the leaf label; three pods name it in
    ``spec.schedulingGroup``, nothing of tpfabric in them. The webhook takes them in (a CEL match
    condition: they carry no label to select), the record is owned by the PodGroup, of its size
    and level, the gang lands in one leaf, with kube-scheduler's own gang plugins running too;
    the PodGroup and its pods deleted, the record goes with them."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    group, version, plural = PODGROUPS
    created = create_pod_group(
        custom,
        enabled,
        "llama-pg",
        {
            "schedulingPolicy": {"gang": {"minCount": 3}},
            "schedulingConstraints": {"topology": [{"key": "topology.tpfabric.io/leaf"}]},
        },
    )
    for index in range(3):
        body = gang_pod(f"llama-{index}", {})
        body["spec"]["schedulingGroup"] = {"podGroupName": "llama-pg"}
        core.create_namespaced_pod(enabled, body)
    pods = wait_running(core, enabled, "llama-pg", 3)
    assert len({leaf_of(p.spec.node_name) for p in pods}) == 1
    assert sorted(p.metadata.labels[RANK_LABEL] for p in pods) == ["0", "1", "2"]
    assert all(p.spec.init_containers[0].name == "rdma-init" for p in pods)
    gang = record(custom, enabled, "llama-pg") or {}
    assert gang["spec"]["owner"] == {"kind": "WorkloadPodGroup", "name": "llama-pg"}
    assert gang["spec"]["workers"] == 3
    assert gang["spec"]["topology"]["level"] == "leaf"
    assert gang["spec"]["topology"]["mode"] == "required"
    (owner,) = gang["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("PodGroup", created["metadata"]["uid"])
    leaf = leaf_of(pods[0].spec.node_name)  # gng-l1-03 -> l1: leaf gng-leaf1
    assert gang["status"]["placement"]["domain"] == f"gng-leaf{leaf[1:]}"
    # kube-controller-manager's podgroup-protection finalizer keeps a PodGroup while its pods
    # exist, and the record with it; once they are gone, garbage collection takes the record
    custom.delete_namespaced_custom_object(group, version, enabled, plural, "llama-pg")
    for pod in pods:
        core.delete_namespaced_pod(pod.metadata.name, enabled, grace_period_seconds=0)
    wait_for(lambda: record(custom, enabled, "llama-pg") is None, 60, what="the record collected")


def test_an_indexed_jobs_pods_naming_a_workload_api_pod_group_after_its_plan_are_born_released(
    api: client.ApiClient, enabled: str
) -> None:
    """A PodGroup of 4 (``minCount``) and an Indexed Job of 4 completions naming it, run 2 at
    a time at first: the record's size comes from the PodGroup, each pod's rank is its
    completion index, so the gang is planned from its first two pods (kube-scheduler's own gang
    plugin holds them unbound until 4 exist). The test then lets the Job run all 4: indices 2
    and 3, created after the plan, are born released onto it, one write each."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    create_pod_group(custom, enabled, "wl-pg", {"schedulingPolicy": {"gang": {"minCount": 4}}})
    job = a_job("wl", "unused", 4, 4)
    job["spec"].update(completionMode="Indexed", parallelism=2)
    job["spec"]["template"]["metadata"]["labels"] = {}  # nothing of tpfabric: the PodGroup only
    job["spec"]["template"]["spec"]["schedulingGroup"] = {"podGroupName": "wl-pg"}
    batch = client.BatchV1Api(api)
    batch.create_namespaced_job(enabled, job)

    def planned() -> dict[str, Any] | None:
        placement = ((record(custom, enabled, "wl-pg") or {}).get("status") or {}).get("placement")
        return placement if (placement or {}).get("state") == "Planned" else None

    plan = wait_for(planned, 60, what="the gang planned from its first two pods")
    assert plan["attempt"] == 0
    assert len(gang_pods(core, enabled, "wl-pg")) == 2
    batch.patch_namespaced_job("wl", enabled, {"spec": {"parallelism": 4}})
    gang = placed_in_two_waves(api, enabled, "wl-pg")
    assert gang["spec"]["workers"] == 4, "the PodGroup's minCount"
    assert gang["status"]["placement"]["nodes"] == plan["nodes"], "the plan of the first two"


def rail_map(node: str) -> dict[int, str]:
    """A port GUID per rail of ``node`` (as a dump would give its eight compute ports)."""
    base = 0xE09D730300000000 + (int(node.rsplit("-", 1)[1]) << 8) + (int(node[5]) << 16)
    return {rail: f"{base + rail:016x}" for rail in range(8)}


def test_released_pods_and_workers_born_released_are_told_their_rails_by_port_guid(
    api: client.ApiClient, enabled: str
) -> None:
    """The placer writes each pod's rails (``tpfabric.io/rails``, its node's ports by GUID) and
    its plan's level when it releases it; the operator writes the same on workers it creates
    onto an existing plan. rdma-init reads them through the downward API."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    for node in core.list_node(label_selector=f"{labels.LEAF}").items:
        name = node.metadata.name
        if name.startswith("gng-"):
            text = format_rail_ports(rail_map(name))
            core.patch_node(name, {"metadata": {"annotations": {RAIL_PORTS_ANNOTATION: text}}})
    for index in range(2):
        core.create_namespaced_pod(enabled, member(f"rails-{index}", "rails", 2, index))
    job = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TensorParallelJob",
        "metadata": {"name": "railed"},
        "spec": {
            "workers": 3,
            "tensorParallelSize": 8,
            "topology": {"mode": "required", "level": "leaf"},
            "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
        },
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, enabled, "tensorparalleljobs", job)

    def told(selector: str, count: int) -> list[client.V1Pod] | None:
        pods = core.list_namespaced_pod(enabled, label_selector=selector).items
        done = [
            p
            for p in pods
            if p.spec.node_name and RAILS_ANNOTATION in (p.metadata.annotations or {})
        ]
        return done if len(done) == count else None

    for selector, count in ((f"{GANG_LABEL}=rails", 2), ("tpfabric.io/job-name=railed", 3)):
        pods = wait_for(
            lambda s=selector, n=count: told(s, n), 90, what=f"{selector}: rails written"
        )
        for pod in pods:
            annotations = pod.metadata.annotations
            expected = ",".join(f"{r}=0x{g}" for r, g in rail_map(pod.spec.node_name).items())
            assert annotations[RAILS_ANNOTATION] == expected, pod.metadata.name
            assert annotations[PLAN_LEVEL_ANNOTATION] == "leaf", pod.metadata.name


# -- GPU gangs on nodes without RDMA devices -------------------------------------------------------
# A gang's demand is what its pods ask: an older Gang CRD defaulted a record's spec.rdma.count to
# 8 and the placer added 8 rdma/ib to pods that asked only GPUs, so such a gang waited for ever on
# a TCP-only GPU pool; a TensorParallelJob without spec.rdma asked for 8 and failed
# (CannotBeHonoured). Now both run over TCP and say why.

TCP_FABRIC = """
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


@pytest.fixture
def tcp_only(
    components: GangWebhook, api: client.ApiClient, namespace: str, fake_nodes: FabricFactory
) -> Iterator[str]:
    """The test's namespace, opted in; the cluster's GPU nodes offer no RDMA device."""
    yield from opted_in_on(TCP_FABRIC, api, namespace, fake_nodes)


def condition_of(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), None)


def test_a_gpu_gang_that_asks_no_rdma_is_placed_on_nodes_without_any(
    api: client.ApiClient, tcp_only: str
) -> None:
    core = client.CoreV1Api(api)
    for index in range(2):
        core.create_namespaced_pod(tcp_only, member(f"tcp-{index}", "tcp", 2))
    wait_running(core, tcp_only, "tcp", 2)


def test_a_gang_without_rdma_says_so_on_its_pods_and_its_record(
    api: client.ApiClient, tcp_only: str
) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    for index in range(2):
        core.create_namespaced_pod(tcp_only, member(f"why-{index}", "why", 2))
    for pod in wait_running(core, tcp_only, "why", 2):
        assert "rdma/ib" not in (pod.spec.containers[0].resources.limits or {})
        assert "--policy=disabled" in pod.spec.init_containers[0].args
        decision = parse_decision(pod.metadata.annotations[RDMA_ANNOTATION])
        assert decision is not None
        assert (decision.count, decision.reason) == (0, "NodesOfferNone")
    rdma = wait_for(
        lambda: condition_of(record(custom, tcp_only, "why"), "RDMA"),
        30,
        what="the Gang record's RDMA condition",
    )
    assert (rdma["status"], rdma["reason"]) == ("False", "NodesOfferNone")
    assert "offers rdma/ib" in rdma["message"]
    assert "rdma.resourceName" in rdma["message"]


def test_a_job_that_names_no_rdma_runs_over_tcp_and_says_why(
    api: client.ApiClient, tcp_only: str
) -> None:
    custom = client.CustomObjectsApi(api)
    container = {"name": "w", "image": "busybox", "resources": {"limits": {"cpu": "1"}}}
    job = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TensorParallelJob",
        "metadata": {"name": "tcp-job"},
        "spec": {
            "workers": 2,
            "tensorParallelSize": 8,
            "template": {"spec": {"containers": [container]}},
        },
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, tcp_only, "tensorparalleljobs", job)

    def read() -> dict[str, Any]:
        return dict(
            custom.get_namespaced_custom_object(
                GROUP, VERSION, tcp_only, "tensorparalleljobs", "tcp-job"
            )
        )

    def running() -> dict[str, Any] | None:
        obj = read()
        return obj if (obj.get("status") or {}).get("phase") == "Running" else None

    obj = wait_for(running, 90, what="the job Running", explain=lambda: str(read().get("status")))
    rdma = condition_of(obj, "RDMA")
    assert rdma is not None
    assert (rdma["status"], rdma["reason"]) == ("False", "NodesOfferNone")
