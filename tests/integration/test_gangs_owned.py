"""Gangs the real LeaderWorkerSet and JobSet controllers make, placed by tpfabric.

LWS v0.9.0 and JobSet v0.12.0 are built from the Go module proxy (``tpfabric toolchain build
--controllers``) and run on the local control plane with their own webhooks on loopback, beside
the gang webhook, the operator and the placer. Nothing tpfabric-specific is in their manifests
but the namespace's opt-in label.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from control_plane_fixtures import (
    FabricFactory,
    clear_jobs_and_pods,
    opt_in,
    spec_writes,
    wait_for,
)
from tpfabric_core import labels
from tpfabric_core.api import ATTEMPT_LABEL, GROUP, SCHEDULER_NAME, VERSION
from tpfabric_core.api.gang import GANG_PLURAL
from tpfabric_core.gangs import GANG_LABEL, RANK_LABEL
from tpfabric_core.jobset_ranks import jobset_layout
from tpfabric_core.rdma_default import RDMA_ANNOTATION, parse_decision
from tpfabric_localcluster.cluster import LocalCluster
from tpfabric_localcluster.gang_webhook import GangWebhook, start_gang_webhook
from tpfabric_localcluster.toolchain import find_toolchain
from tpfabric_localcluster.tpfabric import OPERATOR, start_operator
from tpfabric_localcluster.workload_controllers import (
    JOBSET,
    LWS,
    start_workload_controller,
)
from tpfabric_operator.webhook.jobsets import JobSetLayouts

pytestmark = pytest.mark.integration

FABRIC = """
name: owned
rails: 8
railOptimized: true
rdmaResource: rdma/ib
node: {gpus: 8, rdma: 8, cpu: "128", memory: 2Ti, pods: 110}
blocks:
- name: own
  spines:
  - name: own-su
    leaves:
    - {name: own-leaf1, nodes: ["own-l1-[01-04]"]}
    - {name: own-leaf2, nodes: ["own-l2-[01-04]"]}
    - {name: own-leaf3, nodes: ["own-l3-[01-04]"]}
"""

CONTAINER = {
    "name": "main",
    "image": "registry.local/vllm:1",
    "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "1"}},
}


@pytest.fixture(scope="module")
def controllers(tpfabric_scheduling: LocalCluster, api: client.ApiClient) -> Iterator[None]:
    """LWS, JobSet, the gang webhook (configured) and the operator, beside the placer."""
    missing = find_toolchain(("lws", "jobset")).missing
    if missing:
        pytest.fail(
            f"missing {missing}: run `tpfabric toolchain build --controllers` (the "
            "`make test` target does it)",
            pytrace=False,
        )
    for controller in (LWS, JOBSET):
        start_workload_controller(tpfabric_scheduling, controller)
    start_operator(tpfabric_scheduling)
    hook: GangWebhook = start_gang_webhook(tpfabric_scheduling)
    registrations = client.AdmissionregistrationV1Api(api)
    config = hook.configuration()
    registrations.create_mutating_webhook_configuration(config)
    yield
    registrations.delete_mutating_webhook_configuration(config["metadata"]["name"])
    hook.stop()
    tpfabric_scheduling.stop_component(OPERATOR)
    for controller in (LWS, JOBSET):
        tpfabric_scheduling.stop_component(controller.component)
    # their webhooks would refuse their objects (and pods) with nobody answering
    for item in registrations.list_mutating_webhook_configuration().items:
        if item.metadata.name.startswith(("lws-", "jobset-")):
            registrations.delete_mutating_webhook_configuration(item.metadata.name)
    for item in registrations.list_validating_webhook_configuration().items:
        if item.metadata.name.startswith(("lws-", "jobset-")):
            registrations.delete_validating_webhook_configuration(item.metadata.name)


@pytest.fixture
def enabled(
    controllers: None, api: client.ApiClient, namespace: str, fake_nodes: FabricFactory
) -> Iterator[str]:
    """The test's namespace, opted in, with three leaves of four nodes."""
    fake_nodes(FABRIC)
    yield opt_in(api, namespace)
    custom = client.CustomObjectsApi(api)
    for group, version, plural in (
        ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
        ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    ):  # the owners first: they would make the pods again
        custom.delete_collection_namespaced_custom_object(
            group, version, namespace, plural, propagation_policy="Foreground"
        )
    clear_jobs_and_pods(api, namespace)


def create_lws(
    custom: client.CustomObjectsApi,
    namespace: str,
    name: str,
    *,
    replicas: int,
    recreate_groups: bool = False,
    restart_policy: str | None = None,
    annotations: dict[str, str] | None = None,
) -> None:
    """Create a LeaderWorkerSet of ``replicas`` groups of 4 pods of 8 GPUs (plain: nothing of
    tpfabric in it)."""
    template: dict[str, Any] = {"size": 4, "workerTemplate": {"spec": {"containers": [CONTAINER]}}}
    if recreate_groups:
        template["restartPolicy"] = "RecreateGroupOnPodRestart"
    if restart_policy is not None:
        template["restartPolicy"] = restart_policy
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": template},
    }
    custom.create_namespaced_custom_object(
        "leaderworkerset.x-k8s.io", "v1", namespace, "leaderworkersets", lws
    )


def leaf_of(node: str) -> str:
    return node.split("-")[1]  # own-l2-03 -> l2


def bound_pods(core: client.CoreV1Api, namespace: str, selector: str, count: int) -> Any:
    def bound() -> list[client.V1Pod] | None:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        return pods if len(pods) == count and all(p.spec.node_name for p in pods) else None

    def explain() -> str:
        return "\n".join(
            f"{p.metadata.name}: gang {p.metadata.labels.get(GANG_LABEL)} rank "
            f"{p.metadata.labels.get(RANK_LABEL)} gates "
            f"{[g.name for g in p.spec.scheduling_gates or []]} node {p.spec.node_name}"
            for p in core.list_namespaced_pod(namespace, label_selector=selector).items
        )

    return wait_for(bound, 120, what=f"{count} pods bound ({selector})", explain=explain)


def test_a_leader_worker_set_of_three_groups_lands_one_group_per_leaf(
    api: client.ApiClient, enabled: str
) -> None:
    custom = client.CustomObjectsApi(api)
    create_lws(custom, enabled, "vllm", replicas=3, recreate_groups=True)
    core = client.CoreV1Api(api)
    pods = bound_pods(core, enabled, "leaderworkerset.sigs.k8s.io/name=vllm", 12)
    groups: dict[str, dict[str, str]] = {}
    for pod in pods:
        labels = pod.metadata.labels
        groups.setdefault(labels[GANG_LABEL], {})[labels[RANK_LABEL]] = pod.spec.node_name
        assert pod.spec.scheduler_name == SCHEDULER_NAME
        assert pod.spec.init_containers[0].name == "rdma-init"
        env = {e.name: e.value for e in pod.spec.containers[0].env or []}
        assert env["NCCL_CONF_FILE"] == "/tpfabric/nccl.conf"
    assert sorted(groups) == ["vllm-0", "vllm-1", "vllm-2"], "one gang per LWS group"
    for gang, ranks in groups.items():
        assert sorted(ranks) == ["0", "1", "2", "3"], f"{gang}: the leader is 0, workers 1-3"
        assert len({leaf_of(n) for n in ranks.values()}) == 1, f"{gang} in one leaf: {ranks}"
    leaves = [leaf_of(next(iter(ranks.values()))) for ranks in groups.values()]
    assert sorted(leaves) == ["l1", "l2", "l3"], "one group per leaf"
    owner = custom.get_namespaced_custom_object(
        "leaderworkerset.x-k8s.io", "v1", enabled, "leaderworkersets", "vllm"
    )
    for gang in groups:
        record = custom.get_namespaced_custom_object(GROUP, VERSION, enabled, GANG_PLURAL, gang)
        assert record["spec"]["workers"] == 4
        assert record["spec"]["owner"] == {"kind": "LeaderWorkerSet", "name": "vllm"}
        (reference,) = record["metadata"]["ownerReferences"]
        assert reference["uid"] == owner["metadata"]["uid"], "collected with its LWS"
        assert record["status"]["placement"]["state"] == "Planned"


def test_a_jobset_of_two_jobs_of_four_lands_whole_ranked_by_job_then_index(
    api: client.ApiClient, enabled: str
) -> None:
    pod_spec = {"containers": [CONTAINER], "restartPolicy": "Never"}
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "parallelism": 4,
                            "completions": 4,
                            "completionMode": "Indexed",
                            "backoffLimit": 0,
                            "template": {"spec": pod_spec},
                        }
                    },
                }
            ]
        },
    }
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", enabled, "jobsets", jobset
    )

    def recorded() -> dict[str, Any] | None:
        try:
            return dict(
                custom.get_namespaced_custom_object(GROUP, VERSION, enabled, GANG_PLURAL, "train")
            )
        except ApiException as err:
            if err.status != 404:
                raise
            return None

    # read while the pods live: kwok runs a Job's pods to completion, and the record goes after
    record = wait_for(recorded, 60, what="the JobSet's Gang record")
    assert record["spec"]["workers"] == 8, "2 replicated jobs x parallelism 4, from the JobSet"
    assert record["spec"]["owner"] == {"kind": "JobSet", "name": "train"}
    core = client.CoreV1Api(api)
    pods = bound_pods(core, enabled, "jobset.sigs.k8s.io/jobset-name=train", 8)
    assert {p.metadata.labels[GANG_LABEL] for p in pods} == {"train"}, "one gang per JobSet"
    ranks = {
        (
            int(p.metadata.labels["jobset.sigs.k8s.io/job-index"]),
            int(p.metadata.annotations["batch.kubernetes.io/job-completion-index"]),
        ): int(p.metadata.labels[RANK_LABEL])
        for p in pods
    }
    assert ranks == {(job, index): job * 4 + index for job in range(2) for index in range(4)}
    nodes = [p.spec.node_name for p in pods]
    assert len(set(nodes)) == 8, "one pod per node"


EXAMPLES = Path(__file__).parents[2] / "examples" / "gangs"


@pytest.mark.parametrize(
    ("example", "selector", "pods", "gangs"),
    [
        ("vllm-lws.yaml", "leaderworkerset.sigs.k8s.io/name=vllm-405b", 4, 2),
        ("jobset-train.yaml", "jobset.sigs.k8s.io/jobset-name=train-70b", 4, 1),
    ],
)
def test_the_examples_are_placed_as_they_are(
    api: client.ApiClient, enabled: str, example: str, selector: str, pods: int, gangs: int
) -> None:
    """examples/gangs/: plain LWS and JobSet manifests, each gang whole in one leaf."""
    manifest = yaml.safe_load((EXAMPLES / example).read_text())
    group, version = manifest["apiVersion"].split("/")
    plural = {"LeaderWorkerSet": "leaderworkersets", "JobSet": "jobsets"}[manifest["kind"]]
    manifest["metadata"]["namespace"] = enabled
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        group, version, enabled, plural, manifest
    )
    bound = bound_pods(client.CoreV1Api(api), enabled, selector, pods)
    by_gang: dict[str, set[str]] = {}
    for pod in bound:
        by_gang.setdefault(pod.metadata.labels[GANG_LABEL], set()).add(leaf_of(pod.spec.node_name))
    assert len(by_gang) == gangs
    assert all(len(leaves) == 1 for leaves in by_gang.values()), by_gang


SHIPPED = sorted(EXAMPLES.glob("*.yaml")) + sorted((EXAMPLES.parent / "jobs").glob("*.yaml"))
PLURALS = {
    "LeaderWorkerSet": "leaderworkersets",
    "JobSet": "jobsets",
    "TensorParallelJob": "tensorparalleljobs",
}


def _pods_of(manifest: dict[str, Any]) -> int:
    """Return the pods a shipped manifest makes (its owner's own arithmetic)."""
    spec = manifest["spec"]
    if manifest["kind"] == "LeaderWorkerSet":
        return int(spec.get("replicas", 1)) * int(spec["leaderWorkerTemplate"].get("size", 1))
    if manifest["kind"] == "JobSet":
        return sum(
            int(job.get("replicas", 1)) * int(job["template"]["spec"].get("parallelism", 1))
            for job in spec["replicatedJobs"]
        )
    return int(spec["workers"])


def test_every_shipped_example_runs_on_rdma_as_it_is(api: client.ApiClient, enabled: str) -> None:
    """examples/gangs/ and examples/jobs/, created unchanged (but for the namespace) through the
    gang webhook and the real LWS and JobSet controllers, or the operator: every GPU pod asks
    for the RDMA devices its nodes offer and runs rdma-init with a policy that uses them."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    expected = 0
    for path in SHIPPED:
        for manifest in yaml.safe_load_all(path.read_text()):
            if not manifest or manifest["kind"] == "Namespace":
                continue
            group, version = manifest["apiVersion"].split("/")
            manifest["metadata"]["namespace"] = enabled
            custom.create_namespaced_custom_object(
                group, version, enabled, PLURALS[manifest["kind"]], manifest
            )
            expected += _pods_of(manifest)

    def made() -> list[client.V1Pod] | None:
        pods = core.list_namespaced_pod(enabled).items
        return list(pods) if len(pods) == expected else None

    pods = wait_for(
        made,
        120,
        what=f"the {expected} pods of {', '.join(p.name for p in SHIPPED)}",
        explain=lambda: f"{len(core.list_namespaced_pod(enabled).items)} pods",
    )
    for pod in pods:
        main = pod.spec.containers[0]
        name = pod.metadata.name
        assert main.resources.limits["nvidia.com/gpu"] == "8", name
        assert main.resources.limits.get("rdma/ib") == "8", f"{name}: no RDMA devices"
        init = pod.spec.init_containers[0]
        assert init.name == "rdma-init", name
        assert init.resources.limits.get("rdma/ib") == "8", name
        policy = next(a for a in init.args if a.startswith("--policy="))
        assert policy != "--policy=disabled", f"{name}: {policy}"
        decision = parse_decision((pod.metadata.annotations or {}).get(RDMA_ANNOTATION))
        assert decision is not None, name
        assert (decision.count, decision.reason) == (8, "NodesOffer"), (name, decision)


def test_a_tpj_and_an_lws_share_the_leaves_and_the_gang_left_over_waits_whole(
    api: client.ApiClient, enabled: str
) -> None:
    """One engine for both kinds: a TensorParallelJob holds a leaf, two LWS groups take the two
    others, the third group waits whole (none of its pods bound) until the job goes."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    job = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TensorParallelJob",
        "metadata": {"name": "train"},
        "spec": {
            "workers": 4,
            "tensorParallelSize": 8,
            "topology": {"mode": "required", "level": "leaf"},
            "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
        },
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, enabled, "tensorparalleljobs", job)
    bound_pods(core, enabled, "tpfabric.io/job-name=train", 4)
    create_lws(custom, enabled, "serve", replicas=3)
    selector = "leaderworkerset.sigs.k8s.io/name=serve"

    def settled() -> dict[str, list[str | None]] | None:
        pods = core.list_namespaced_pod(enabled, label_selector=selector).items
        groups: dict[str, list[str | None]] = {}
        for pod in pods:
            groups.setdefault(pod.metadata.labels.get(GANG_LABEL, ""), []).append(
                pod.spec.node_name
            )
        placed = [g for g, nodes in groups.items() if len(nodes) == 4 and all(nodes)]
        return groups if len(pods) == 12 and len(placed) == 2 else None

    groups = wait_for(settled, 120, what="two LWS groups placed beside the job")
    (waiting,) = [g for g, nodes in groups.items() if not all(nodes)]
    assert not any(groups[waiting]), f"{waiting} waits whole: no pod of it bound"
    record = custom.get_namespaced_custom_object(GROUP, VERSION, enabled, GANG_PLURAL, waiting)
    placement = record["status"]["placement"]
    assert placement["state"] == "Waiting"
    assert placement["message"]
    custom.delete_namespaced_custom_object(GROUP, VERSION, enabled, "tensorparalleljobs", "train")
    pods = bound_pods(core, enabled, f"{GANG_LABEL}={waiting}", 4)
    assert len({leaf_of(p.spec.node_name) for p in pods}) == 1, "the freed leaf, whole"


def _tenant(core: client.CoreV1Api, namespace: str, node: str) -> str:
    """Another tenant's pod of 8 GPUs, bound to ``node`` directly (no gang, no scheduler)."""
    name = f"tenant-{node}"
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "containers": [CONTAINER],
                "terminationGracePeriodSeconds": 0,
            },
        },
    )
    return name


def test_a_recreated_lws_group_returns_to_the_leaf_it_left(
    api: client.ApiClient, enabled: str
) -> None:
    """RecreateGroupOnPodRestart: the group's pods go and come back (new pods, same names), and
    the group is placed again whole, ranks as before, in the leaf it left.

    Another tenant holds l1 while the group comes (it lands in l2) and is gone before the group
    is made again: best fit alone would now pick l1 (the first of the equally free leaves); the
    plan prefers the nodes of the group's last plan (``previousNodes``)."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    tenants = [_tenant(core, enabled, f"own-l1-0{i}") for i in range(1, 5)]
    bound_pods(core, enabled, "!" + GANG_LABEL, 4)
    create_lws(custom, enabled, "again", replicas=1, recreate_groups=True)
    selector = "leaderworkerset.sigs.k8s.io/name=again"
    before = bound_pods(core, enabled, selector, 4)
    (left,) = {leaf_of(p.spec.node_name) for p in before}
    assert left != "l1", "l1 is held by the tenant"
    for name in tenants:
        core.delete_namespaced_pod(name, enabled, grace_period_seconds=0)
    wait_for(
        lambda: not core.list_namespaced_pod(enabled, label_selector="!" + GANG_LABEL).items,
        60,
        what="the tenant gone",
    )
    old = {p.metadata.uid for p in before}
    core.delete_namespaced_pod("again-0", enabled)  # the leader: LWS makes the group again

    def recreated() -> list[client.V1Pod] | None:
        pods = core.list_namespaced_pod(enabled, label_selector=selector).items
        fresh = [p for p in pods if p.metadata.uid not in old and not p.metadata.deletion_timestamp]
        return fresh if len(fresh) == 4 and all(p.spec.node_name for p in fresh) else None

    after = wait_for(recreated, 120, what="the group made again and bound")
    assert {leaf_of(p.spec.node_name) for p in after} == {left}, "whole, in the leaf it left"
    assert sorted(p.metadata.labels[RANK_LABEL] for p in after) == ["0", "1", "2", "3"]
    # the group made again is numbered past the planned attempt (0): 1, or 2 for a worker its
    # old StatefulSet made again before garbage collection removed it (a rank seen twice)
    attempts = sorted(int(p.metadata.labels[ATTEMPT_LABEL]) for p in after)
    assert attempts[0] >= 1, f"a later attempt than the plan's, not the planned one ({attempts})"


def test_a_record_deleted_while_its_group_is_made_again_does_not_wedge_the_group(
    api: client.ApiClient, enabled: str
) -> None:
    """The record goes (by hand) while LWS makes the group again: pods the old record's plan
    released and that never bound are deleted, the group is made again and placed whole."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    create_lws(custom, enabled, "redo", replicas=1, recreate_groups=True)
    selector = "leaderworkerset.sigs.k8s.io/name=redo"
    old = {p.metadata.uid for p in bound_pods(core, enabled, selector, 4)}
    core.delete_namespaced_pod("redo-0", enabled)
    time.sleep(0.5)
    custom.delete_namespaced_custom_object(GROUP, VERSION, enabled, GANG_PLURAL, "redo-0")

    def placed() -> list[client.V1Pod] | None:
        pods = core.list_namespaced_pod(enabled, label_selector=selector).items
        fresh = [p for p in pods if p.metadata.uid not in old and not p.metadata.deletion_timestamp]
        return fresh if len(fresh) == 4 and all(p.spec.node_name for p in fresh) else None

    pods = wait_for(placed, 120, what="the group made again and placed whole")
    assert len({leaf_of(p.spec.node_name) for p in pods}) == 1


def test_a_groups_pods_after_its_plan_are_created_released_onto_it_one_write_each(
    api: client.ApiClient, enabled: str
) -> None:
    """The group is planned from its leader; LeaderWorkerSet makes the workers once the leader
    is bound (its exclusive placement), and the gang webhook creates each released onto the
    plan: ungated, narrowed to the planned leaf, no release patch after."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    exclusive = {"leaderworkerset.sigs.k8s.io/exclusive-topology": labels.LEAF}
    create_lws(custom, enabled, "born", replicas=1, annotations=exclusive)
    pods = bound_pods(core, enabled, "leaderworkerset.sigs.k8s.io/name=born", 4)
    assert len({leaf_of(p.spec.node_name) for p in pods}) == 1
    by_rank = {int(p.metadata.labels[RANK_LABEL]): p for p in pods}
    assert {p.metadata.labels[ATTEMPT_LABEL] for p in pods} == {"0"}
    assert len(spec_writes(by_rank[0])) == 2, "the leader: created gated, released by a patch"
    record = custom.get_namespaced_custom_object(GROUP, VERSION, enabled, GANG_PLURAL, "born-0")
    plan = record["status"]["placement"]
    for rank in (1, 2, 3):
        worker = by_rank[rank]
        assert spec_writes(worker) == spec_writes(worker)[:1], (
            f"rank {rank}: one write, its creation ({spec_writes(worker)})"
        )
        terms = (
            worker.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
        )
        expressions = [e.to_dict() for e in terms.node_selector_terms[0].match_expressions]
        assert {"key": labels.LEAF, "operator": "In", "values": [plan["domain"]]} in [
            {k: e[k] for k in ("key", "operator", "values")} for e in expressions
        ]
        assert worker.spec.node_name == plan["nodes"][rank], "on its rank's planned node"


def test_a_worker_made_again_after_a_deletion_is_a_replacement_not_the_planned_attempt(
    api: client.ApiClient, enabled: str
) -> None:
    """restartPolicy None: a deleted worker is made again alone by its StatefulSet, with the
    same name and labels. The webhook numbers it as the next attempt and leaves it gated: the
    placer checks its planned node before it releases it there."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    exclusive = {"leaderworkerset.sigs.k8s.io/exclusive-topology": labels.LEAF}
    create_lws(custom, enabled, "mend", replicas=1, restart_policy="None", annotations=exclusive)
    selector = "leaderworkerset.sigs.k8s.io/name=mend"
    before = {int(p.metadata.labels[RANK_LABEL]): p for p in bound_pods(core, enabled, selector, 4)}
    gone = before[2]
    assert len(spec_writes(gone)) == 1, "born released"
    core.delete_namespaced_pod(gone.metadata.name, enabled, grace_period_seconds=0)

    def made_again() -> client.V1Pod | None:
        try:
            pod = core.read_namespaced_pod(gone.metadata.name, enabled)
        except ApiException:
            return None
        fresh = pod.metadata.uid != gone.metadata.uid and pod.spec.node_name
        return pod if fresh else None

    again = wait_for(made_again, 120, what="the worker made again and bound")
    assert again.metadata.labels[ATTEMPT_LABEL] == "1", "a later attempt than the plan's"
    assert len(spec_writes(again)) == 2, "created gated, released by the placer after its check"
    assert again.spec.node_name == gone.spec.node_name, "back on its planned node"


def create_jobset(
    custom: client.CustomObjectsApi,
    namespace: str,
    name: str,
    jobs: list[tuple[str, int]],
    *,
    in_order: bool = False,
    gates: list[str] | None = None,
    backoff_limit: int = 0,
) -> None:
    """Create a JobSet of one Job per ``(replicated Job, parallelism)``, Indexed, of pods of 8
    GPUs (plain: nothing of tpfabric in it); ``gates``: scheduling gates of the pods' own."""
    pod_spec: dict[str, Any] = {"containers": [CONTAINER], "restartPolicy": "Never"}
    if gates:
        pod_spec["schedulingGates"] = [{"name": gate} for gate in gates]
    replicated = [
        {
            "name": job,
            "replicas": 1,
            "template": {
                "spec": {
                    "parallelism": pods,
                    "completions": pods,
                    "completionMode": "Indexed",
                    "backoffLimit": backoff_limit,
                    "template": {"spec": pod_spec},
                }
            },
        }
        for job, pods in jobs
    ]
    spec: dict[str, Any] = {"replicatedJobs": replicated}
    if in_order:
        spec["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": spec,
    }
    custom.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", jobset
    )


def gang_record(custom: client.CustomObjectsApi, namespace: str, name: str) -> Any:
    def recorded() -> dict[str, Any] | None:
        try:
            return dict(
                custom.get_namespaced_custom_object(GROUP, VERSION, namespace, GANG_PLURAL, name)
            )
        except ApiException as err:
            if err.status != 404:
                raise
            return None

    return wait_for(recorded, 60, what=f"the Gang record {name}")


def test_a_jobsets_later_jobs_are_created_released_onto_the_plan_one_write_each(
    api: client.ApiClient, enabled: str
) -> None:
    """``startupPolicy: InOrder``: JobSet makes the ``tail`` Job only once the ``head`` Job's
    pods are ready (kwok then runs them to completion). The gang webhook ranks each pod from its
    watch of the JobSet, so the placer plans the gang from the head's two pods, before it is
    whole; the tail's pods are created released onto that plan, one write each."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    create_jobset(custom, enabled, "waves", [("head", 2), ("tail", 2)], in_order=True)
    pods = bound_pods(core, enabled, "jobset.sigs.k8s.io/jobset-name=waves", 4)
    record = gang_record(custom, enabled, "waves")
    assert record["spec"]["workers"] == 4
    plan = record["status"]["placement"]
    assert plan["attempt"] == 0
    by_rank = {int(p.metadata.labels[RANK_LABEL]): p for p in pods}
    assert sorted(by_rank) == [0, 1, 2, 3]
    assert {p.metadata.labels[ATTEMPT_LABEL] for p in pods} == {"0"}, "numbered at admission"
    for rank, pod in by_rank.items():
        job = "head" if rank < 2 else "tail"
        assert pod.metadata.labels["jobset.sigs.k8s.io/replicatedjob-name"] == job
        assert pod.spec.node_name == plan["nodes"][rank], f"rank {rank} on its planned node"
        writes = spec_writes(pod)
        if job == "head":  # planned from these two, the gang not yet whole
            assert len(writes) == 2, f"rank {rank}: created gated, released ({writes})"
        else:
            assert writes == writes[:1], f"rank {rank}: one write, its creation ({writes})"
            terms = (
                pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
            )
            expressions = [e.to_dict() for e in terms.node_selector_terms[0].match_expressions]
            assert {"key": labels.LEAF, "operator": "In", "values": [plan["domain"]]} in [
                {k: e[k] for k in ("key", "operator", "values")} for e in expressions
            ]
    assert len({leaf_of(p.spec.node_name) for p in pods}) == 1, "the gang on one leaf"


def test_a_jobset_the_webhooks_watch_has_not_shown_is_read_by_name_from_the_api_server(
    api: client.ApiClient, enabled: str
) -> None:
    """The read on a miss (a watch event late behind the JobSet's first pods) against the real
    API server: a list of one by ``metadata.name``, which the webhook's right to list covers."""
    custom = client.CustomObjectsApi(api)
    layouts = JobSetLayouts(client.CoreV1Api(api), custom)
    layouts._list()  # listed once, before the JobSet; no watch runs to show it
    create_jobset(custom, enabled, "late", [("head", 2), ("tail", 3)])
    kept = layouts.jobset(enabled, "late")
    assert kept is not None
    assert jobset_layout(kept, None) == {"head/0": 0, "tail/0": 2, "": 5}
    assert layouts.jobset(enabled, "no-such-jobset") is None


HOLD = "example.com/hold"


def test_a_jobset_pod_its_job_makes_again_is_a_later_attempt_checked_by_the_placer(
    api: client.ApiClient, enabled: str
) -> None:
    """A pod deleted before it ran (held by a gate of the test's own, so that kwok does not run
    it to completion first) is made again by its Job, under another name with the same Job and
    completion index. The webhook numbers it the next attempt and leaves it gated: the placer
    checks its planned node, then releases it there."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    create_jobset(custom, enabled, "mend", [("workers", 2)], gates=[HOLD], backoff_limit=2)
    selector = "jobset.sigs.k8s.io/jobset-name=mend"

    def live() -> list[client.V1Pod]:
        pods = core.list_namespaced_pod(enabled, label_selector=selector).items
        return [p for p in pods if not p.metadata.deletion_timestamp]

    def gates(pod: client.V1Pod) -> list[str]:
        return [g.name for g in pod.spec.scheduling_gates or []]

    def released() -> list[client.V1Pod] | None:
        pods = live()
        return pods if len(pods) == 2 and all(gates(p) == [HOLD] for p in pods) else None

    before = {
        int(p.metadata.labels[RANK_LABEL]): p
        for p in wait_for(released, 60, what="both pods released, still held by the test")
    }
    plan = gang_record(custom, enabled, "mend")["status"]["placement"]
    assert {p.metadata.labels[ATTEMPT_LABEL] for p in before.values()} == {"0"}
    gone = before[1]
    core.delete_namespaced_pod(gone.metadata.name, enabled, grace_period_seconds=0)

    def made_again() -> client.V1Pod | None:
        fresh = [
            p for p in live() if p.metadata.uid not in {b.metadata.uid for b in before.values()}
        ]
        return fresh[0] if fresh and gates(fresh[0]) == [HOLD] else None

    again = wait_for(made_again, 60, what="the pod made again and released by the placer")
    assert again.metadata.labels[RANK_LABEL] == "1"
    assert again.metadata.labels[ATTEMPT_LABEL] == "1", "a later attempt than the plan's"
    writers = [w.split("/")[0] for w in spec_writes(again)]
    assert len(writers) == 2, f"created gated, then the placer's release ({writers})"
    for pod in live():  # the test lets them run
        remove = [{"op": "remove", "path": "/spec/schedulingGates"}]  # a JSON patch
        core.patch_namespaced_pod(pod.metadata.name, enabled, remove)
    pods = bound_pods(core, enabled, selector, 2)
    placed = {p.metadata.labels[RANK_LABEL]: p.spec.node_name for p in pods}
    assert placed == {"0": plan["nodes"][0], "1": plan["nodes"][1]}, "back on its planned node"
