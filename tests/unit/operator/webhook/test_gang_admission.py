"""The gang webhook's answers: what a gang pod is given, what passes untouched, and why."""

from __future__ import annotations

import base64
import copy
import json
from dataclasses import replace
from typing import Any

import pytest

from tpfabric_core import labels
from tpfabric_core.api import ATTEMPT_LABEL, GANG_GATE, SCHEDULER_NAME
from tpfabric_core.api.placement import StoredPlacement, read_placement
from tpfabric_core.gangs import (
    GANG_LABEL,
    GANG_NAME_LABEL,
    GANG_PROBLEM_LABEL,
    GANG_PROBLEMS_ANNOTATION,
    GANG_SIZE_LABEL,
    RANK_LABEL,
)
from tpfabric_core.rail_ports import PLAN_LEVEL_ANNOTATION
from tpfabric_core.rdma_default import RDMA_ANNOTATION, NodeOffer, RdmaDecision, parse_decision
from tpfabric_operator.webhook.admission import (
    RDMA_COUNT_ANNOTATION,
    BadReviewError,
    WebhookSettings,
    admit,
)
from tpfabric_operator.webhook.gang_plans import GangPlans
from tpfabric_operator.webhook.jobsets import slim_jobset

pytestmark = pytest.mark.unit

SETTINGS = WebhookSettings(init_image="registry.local/rdma-init:dev")


def pod(
    pod_labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod being created (no name yet on a generateName pod, no namespace in the object)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "bert-",
            "labels": pod_labels or {},
            "annotations": annotations or {},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                    "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                },
                {"name": "sidecar", "image": "busybox"},
            ],
            **spec,
        },
    }


def review(obj: dict[str, Any], *, operation: str = "CREATE") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": operation,
            "namespace": "train",
            "object": obj,
        },
    }


def patched(obj: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """Apply the answer's JSON patch as kube-apiserver would (the webhook only emits ``add``)."""
    response = answer["response"]
    assert response["allowed"] is True
    result = copy.deepcopy(obj)
    if "patch" not in response:
        return result
    assert response["patchType"] == "JSONPatch"
    for op in json.loads(base64.b64decode(response["patch"])):
        assert op["op"] == "add"
        parent, key = op["path"].rsplit("/", 1)
        target = result
        for part in parent.strip("/").split("/"):
            target = target[part]
        target[key] = op["value"]
    return result


GANG = {GANG_NAME_LABEL: "bert", GANG_SIZE_LABEL: "6", RANK_LABEL: "2"}


def test_a_gang_pod_is_gated_for_tpfabrics_scheduler_and_wired_for_rdma() -> None:
    obj = pod(GANG, {RDMA_COUNT_ANNOTATION: "4"})
    answer = admit(review(obj), SETTINGS)
    assert answer["response"]["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    wired = patched(obj, answer)
    spec, labels = wired["spec"], wired["metadata"]["labels"]
    assert spec["schedulerName"] == SCHEDULER_NAME
    assert spec["schedulingGates"] == [{"name": GANG_GATE}]
    assert labels[GANG_LABEL] == "bert"
    assert labels[RANK_LABEL] == "2"
    init = spec["initContainers"][0]
    assert init["name"] == "rdma-init"
    assert init["image"] == SETTINGS.init_image
    assert init["resources"]["limits"] == {"nvidia.com/gpu": "8", "rdma/ib": "4"}
    assert "--policy=preferred" in init["args"]
    main, sidecar = spec["containers"]
    assert main["resources"]["limits"] == {"nvidia.com/gpu": "8", "rdma/ib": "4"}
    assert "rdma/ib" not in (sidecar.get("resources") or {}).get("limits", {})  # takes no GPU
    assert main["env"][0] == {"name": "NCCL_CONF_FILE", "value": "/tpfabric/nccl.conf"}
    assert {"name": "NCCL_DEBUG", "value": "INFO"} in main["env"]  # the user's stay
    assert "securityContext" not in main  # nothing added: IPC_LOCK is the template's to ask for
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {v["name"] for v in spec["volumes"]} == {"tpfabric-shared", "tpfabric-podinfo"}


class Nodes:
    """The webhook's view of the nodes, as a test gives it: counts the passes over them."""

    def __init__(self, *offers: NodeOffer) -> None:
        self.offers = offers
        self.passes = 0
        self.memo: dict[Any, Any] = {}

    def remember(self, key: Any, compute: Any) -> Any:
        if key not in self.memo:
            self.passes += 1
            self.memo[key] = compute(self.offers)
        return self.memo[key]


def dgx(name: str, rdma: dict[str, int] | None = None, **node_labels: str) -> NodeOffer:
    resources = {"nvidia.com/gpu": 8, **({"rdma/ib": 8} if rdma is None else rdma)}
    return NodeOffer(name, {labels.LEAF: "leaf1", **node_labels}, resources)


def decision_of(wired: dict[str, Any]) -> RdmaDecision:
    decision = parse_decision(wired["metadata"]["annotations"][RDMA_ANNOTATION])
    assert decision is not None
    return decision


def test_a_gang_pod_that_names_no_rdma_gets_what_the_nodes_offer() -> None:
    nodes = Nodes(dgx("a"), dgx("b"), dgx("c", {"rdma/ib": 4}))
    settings = replace(SETTINGS, nodes=nodes)
    wired = patched(pod(GANG), admit(review(pod(GANG)), settings))
    main = wired["spec"]["containers"][0]
    assert main["resources"]["limits"] == {"nvidia.com/gpu": "8", "rdma/ib": "8"}
    assert "--policy=preferred" in wired["spec"]["initContainers"][0]["args"]
    assert (decision_of(wired).count, decision_of(wired).reason) == (8, "NodesOffer")
    for _ in range(3):  # a burst of pods of one shape: one pass over the nodes
        admit(review(pod(GANG)), settings)
    assert nodes.passes == 1


def test_the_clusters_rdma_resource_is_a_setting() -> None:
    nodes = Nodes(*(dgx(n, {"rdma/rdma_shared_device_a": 63}) for n in "ab"))
    settings = replace(SETTINGS, nodes=nodes, rdma_resource="rdma/rdma_shared_device_a")
    wired = patched(pod(GANG), admit(review(pod(GANG)), settings))
    limits = wired["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "63"}


def test_on_nodes_without_rdma_the_pod_runs_over_tcp_and_says_why() -> None:
    settings = replace(SETTINGS, nodes=Nodes(dgx("a", {}), dgx("b", {})))
    wired = patched(pod(GANG), admit(review(pod(GANG)), settings))
    assert wired["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert "--policy=disabled" in wired["spec"]["initContainers"][0]["args"]
    decision = decision_of(wired)
    assert decision.reason == "NodesOfferNone"
    assert "offers rdma/ib" in decision.message


def test_a_single_pod_gang_and_a_pod_without_gpus_get_no_rdma_by_default() -> None:
    settings = replace(SETTINGS, nodes=Nodes(dgx("a")))
    alone = pod({GANG_NAME_LABEL: "solo", GANG_SIZE_LABEL: "1"})
    assert decision_of(patched(alone, admit(review(alone), settings))).count == 0
    cpu = pod(GANG)
    cpu["spec"]["containers"][0]["resources"] = {}
    wired = patched(cpu, admit(review(cpu), settings))
    assert (decision_of(wired).count, decision_of(wired).reason) == (0, "NotRequested")


def test_the_pods_own_count_and_the_charts_number_win_over_the_nodes() -> None:
    nodes = Nodes(dgx("a"))
    asked = pod(GANG, {RDMA_COUNT_ANNOTATION: "0"})
    wired = patched(asked, admit(review(asked), replace(SETTINGS, nodes=nodes)))
    assert "--policy=disabled" in wired["spec"]["initContainers"][0]["args"]
    assert "annotation tpfabric.io/rdma-count asks 0" in decision_of(wired).message
    chart = replace(SETTINGS, nodes=nodes, rdma_count=2)
    wired = patched(pod(GANG), admit(review(pod(GANG)), chart))
    assert wired["spec"]["containers"][0]["resources"]["limits"]["rdma/ib"] == "2"
    assert "gangWebhook.rdmaCount" in decision_of(wired).message
    assert nodes.passes == 0, "an asked count reads no node"


def test_a_container_that_names_the_rdma_resource_keeps_its_own_amount() -> None:
    obj = pod(GANG, {RDMA_COUNT_ANNOTATION: "8"})
    obj["spec"]["containers"][0]["resources"]["limits"]["rdma/ib"] = "2"
    main = patched(obj, admit(review(obj), SETTINGS))["spec"]["containers"][0]
    assert main["resources"]["limits"]["rdma/ib"] == "2"


def test_a_container_that_names_the_rdma_resource_is_wired_for_rdma_without_an_annotation() -> None:
    obj = pod(GANG)
    obj["spec"]["containers"][0]["resources"]["limits"]["rdma/ib"] = "2"
    wired = patched(obj, admit(review(obj), SETTINGS))
    init = wired["spec"]["initContainers"][0]
    assert "--policy=preferred" in init["args"]
    assert init["resources"]["limits"]["rdma/ib"] == "2"
    assert decision_of(wired).reason == "Requested"


def test_a_pod_that_opts_into_no_gang_passes_untouched() -> None:
    answer = admit(review(pod({"app": "web"})), SETTINGS)
    assert answer["response"] == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


def test_a_pod_wired_already_is_left_as_it_is() -> None:
    """A pod wired already (made again from a wired manifest, a reinvocation) is not wired twice."""
    once = patched(pod(GANG), admit(review(pod(GANG)), SETTINGS))
    again = admit(review(once), SETTINGS)
    assert "patch" not in again["response"]


@pytest.mark.parametrize(
    ("pod_labels", "annotations", "spec", "words"),
    [
        ({GANG_NAME_LABEL: "bert"}, {}, {}, f"{GANG_SIZE_LABEL}: missing"),
        ({GANG_NAME_LABEL: "bert", GANG_SIZE_LABEL: "0"}, {}, {}, "0 is outside 1..1024"),
        (GANG, {"tpfabric.io/topology-level": "rack"}, {}, "level 'rack' is not configured"),
        (GANG, {RDMA_COUNT_ANNOTATION: "lots"}, {}, f"{RDMA_COUNT_ANNOTATION}: 'lots'"),
        (GANG, {"tpfabric.io/gpu-direct": "yes"}, {}, "tpfabric.io/gpu-direct: 'yes'"),
        (GANG, {}, {"schedulerName": "volcano"}, "spec.schedulerName: the pod names 'volcano'"),
    ],
)
def test_bad_input_is_admitted_unwired_with_a_warning_naming_the_field_and_marked(
    pod_labels: dict[str, str], annotations: dict[str, str], spec: dict[str, Any], words: str
) -> None:
    obj = pod(pod_labels, annotations, **spec)
    answer = admit(review(obj), SETTINGS)
    response = answer["response"]
    assert response["allowed"] is True
    assert len(response["warnings"]) == 1
    assert words in response["warnings"][0]
    assert "admitted unwired" in response["warnings"][0]
    # unwired: only marked, so that the operator tells the pod (an Event)
    marked = patched(obj, answer)
    assert marked["spec"] == obj["spec"]
    assert marked["metadata"]["labels"] == {**pod_labels, GANG_PROBLEM_LABEL: "true"}
    problems = marked["metadata"]["annotations"][GANG_PROBLEMS_ANNOTATION]
    assert words in problems
    assert {
        k: v for k, v in marked["metadata"]["annotations"].items() if k != GANG_PROBLEMS_ANNOTATION
    } == annotations


def test_only_pod_creations_are_changed() -> None:
    answer = admit(review(pod(GANG), operation="UPDATE"), SETTINGS)
    assert "patch" not in answer["response"]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"request": {}},
        {"request": {"uid": "u", "operation": "CREATE", "kind": {"kind": "Pod"}}},
        [],
    ],
)
def test_what_is_not_an_admission_review_is_refused_with_a_reason(body: Any) -> None:
    with pytest.raises(BadReviewError, match=r"AdmissionReview|not a pod"):
        admit(body, SETTINGS)


def test_a_pod_that_names_a_workload_api_pod_group_is_gated_and_labelled_with_it() -> None:
    obj = pod({}, {}, schedulingGroup={"podGroupName": "llama-pg"})
    wired = patched(obj, admit(review(obj), SETTINGS))
    assert wired["spec"]["schedulingGates"] == [{"name": GANG_GATE}]
    assert wired["metadata"]["labels"][GANG_LABEL] == "llama-pg"
    assert RANK_LABEL not in wired["metadata"]["labels"], "ranked by the operator, in order"
    assert wired["spec"]["schedulingGroup"] == {"podGroupName": "llama-pg"}, "kept"


def test_a_gang_pod_gets_the_fabric_profile_and_the_fabric_env() -> None:
    profile = '{"linkLayer":"roce","roce":{"trafficClass":106}}'
    settings = WebhookSettings(init_image="rdma-init:dev", fabric_profile=profile)
    obj = pod(GANG, {RDMA_COUNT_ANNOTATION: "4"})
    spec = patched(obj, admit(review(obj), settings))["spec"]
    assert f"--fabric-profile={profile}" in spec["initContainers"][0]["args"]
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["BASH_ENV"]["value"] == env["ENV"]["value"] == "/tpfabric/fabric.env"
    assert env["TPFABRIC_POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_the_webhook_refuses_a_bad_fabric_profile_at_start_naming_the_field(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tpfabric_operator.webhook.__main__ import parse_args  # noqa: PLC0415

    bad = '{"linkLayer": "roce", "roce": {"trafficClass": 300}}'
    with pytest.raises(SystemExit):
        parse_args(["--cert-dir=/tmp", "--init-image=i", f"--fabric-profile={bad}"])
    err = capsys.readouterr().err
    assert "--fabric-profile: fabric.profile.roce.trafficClass" in err
    assert "less than or equal to 255" in err
    assert parse_args(["--cert-dir=/tmp", "--init-image=i"]).fabric_profile is None


# -- born released ---------------------------------------------------------------------------


def leaf_plan(size: int) -> StoredPlacement:
    """A plan of attempt 0 onto nodes n0.. of leaf-1."""
    return read_placement(
        {
            "state": "Planned",
            "attempt": 0,
            "level": "leaf",
            "domain": "leaf-1",
            "domainLabels": {"topology.tpfabric.io/leaf": "leaf-1"},
            "nodes": [f"n{i}" for i in range(size)],
        }
    )


LWS_PLAN = leaf_plan(4)


def lws_pod(worker: int) -> dict[str, Any]:
    """A pod of group 0 of LeaderWorkerSet ``chat`` (size 4), as LWS creates it."""
    obj = pod(
        {
            "leaderworkerset.sigs.k8s.io/name": "chat",
            "leaderworkerset.sigs.k8s.io/group-index": "0",
            "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
        },
        {"leaderworkerset.sigs.k8s.io/size": "4"},
    )
    obj["metadata"]["name"] = "chat-0" if worker == 0 else f"chat-0-{worker}"
    return obj


class Plans:
    """The webhook's view of the gangs, as a test gives it (:class:`.gang_plans.GangPlans`)."""

    def __init__(
        self,
        plan: StoredPlacement | None = None,
        *,
        gang: str = "chat-0",
        jobsets: dict[str, Any] | None = None,
    ) -> None:
        self.book = GangPlans()
        self.jobsets = jobsets or {}
        if plan is not None:
            self.book.plan(("train", gang), plan)

    def stamp(self, namespace: str, gang: str, rank: int, restart: int | None = None) -> Any:
        return self.book.stamp(namespace, gang, rank, restart)

    def jobset(self, namespace: str, name: str) -> Any:
        return self.jobsets.get(f"{namespace}/{name}")


def test_a_pod_admitted_after_its_gangs_plan_is_created_released_onto_it() -> None:
    plans = Plans(LWS_PLAN)
    plans.book.saw(("train", "chat-0"), 0, 0)  # the leader, from which the gang was planned
    nodes = Nodes(dgx("n2"))
    settings = replace(SETTINGS, plans=plans, nodes=nodes)
    obj = lws_pod(2)
    wired = patched(obj, admit(review(obj), settings))
    meta, spec = wired["metadata"], wired["spec"]
    assert meta["labels"][ATTEMPT_LABEL] == "0"
    assert "schedulingGates" not in spec, "ungated: no release patch follows"
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert {"key": "topology.tpfabric.io/leaf", "operator": "In", "values": ["leaf-1"]} in (
        term["nodeSelectorTerms"][0]["matchExpressions"]
    )
    assert meta["annotations"][PLAN_LEVEL_ANNOTATION] == "leaf"
    assert spec["schedulerName"] == SCHEDULER_NAME
    assert spec["initContainers"][0]["name"] == "rdma-init", "wired as every gang pod"


def test_a_gangs_pods_before_its_plan_are_numbered_and_gated() -> None:
    settings = replace(SETTINGS, plans=Plans())
    obj = lws_pod(0)
    wired = patched(obj, admit(review(obj), settings))
    assert wired["metadata"]["labels"][ATTEMPT_LABEL] == "0"
    assert wired["spec"]["schedulingGates"] == [{"name": GANG_GATE}]


def test_a_replacement_of_a_rank_already_admitted_is_a_later_attempt_and_gated() -> None:
    plans = Plans(LWS_PLAN)
    settings = replace(SETTINGS, plans=plans)
    first = patched(lws_pod(1), admit(review(lws_pod(1)), settings))
    assert "schedulingGates" not in first["spec"]
    again = patched(lws_pod(1), admit(review(lws_pod(1)), settings))  # its StatefulSet's new pod
    assert again["metadata"]["labels"][ATTEMPT_LABEL] == "1"
    assert again["spec"]["schedulingGates"] == [{"name": GANG_GATE}]
    assert "affinity" not in again["spec"], "the placer checks its node before releasing it"


JOB_OWNER = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "name": "bert",
    "uid": "u",
    "controller": True,
}
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


@pytest.mark.parametrize(
    ("group", "owners"),
    [
        ({GANG_NAME_LABEL: "bert", GANG_SIZE_LABEL: "6"}, []),  # rank: the order of creation
        (GANG, []),  # ranked, but no owner makes its pods again after a dropped plan
        ({GANG_NAME_LABEL: "bert", GANG_SIZE_LABEL: "6"}, [JOB_OWNER]),  # a Job's, not Indexed
    ],
)
def test_a_pod_group_is_not_numbered_and_waits_gated_for_its_whole_gang(
    group: dict[str, str], owners: list[dict[str, Any]]
) -> None:
    settings = replace(SETTINGS, plans=Plans(BERT_PLAN))
    obj = pod(group)
    obj["metadata"]["ownerReferences"] = owners
    wired = patched(obj, admit(review(obj), settings))
    assert ATTEMPT_LABEL not in wired["metadata"]["labels"]
    assert wired["spec"]["schedulingGates"] == [{"name": GANG_GATE}]


BERT_PLAN = leaf_plan(6)


def indexed_job_pod(index: int) -> dict[str, Any]:
    """A pod of an Indexed Job labelled a member of pod group ``bert`` of 6, as the Job
    controller creates it (and creates it again, with the same index, to replace it)."""
    obj = pod({GANG_NAME_LABEL: "bert", GANG_SIZE_LABEL: "6", COMPLETION_INDEX: str(index)})
    obj["metadata"]["annotations"][COMPLETION_INDEX] = str(index)
    obj["metadata"]["ownerReferences"] = [JOB_OWNER]
    return obj


def test_an_indexed_jobs_pod_group_is_numbered_and_its_pods_after_the_plan_born_released() -> None:
    plans = Plans()
    settings = replace(SETTINGS, plans=plans)
    first = patched(indexed_job_pod(0), admit(review(indexed_job_pod(0)), settings))
    assert first["metadata"]["labels"][RANK_LABEL] == "0", "its completion index"
    assert first["metadata"]["labels"][ATTEMPT_LABEL] == "0"
    assert first["spec"]["schedulingGates"] == [{"name": GANG_GATE}], "gated until planned"
    plans.book.plan(("train", "bert"), BERT_PLAN)  # planned from its first pods
    later = patched(indexed_job_pod(4), admit(review(indexed_job_pod(4)), settings))
    assert later["metadata"]["labels"][RANK_LABEL] == "4"
    assert later["metadata"]["labels"][ATTEMPT_LABEL] == "0"
    assert "schedulingGates" not in later["spec"], "born released: no release patch follows"
    term = later["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert {"key": "topology.tpfabric.io/leaf", "operator": "In", "values": ["leaf-1"]} in (
        term["nodeSelectorTerms"][0]["matchExpressions"]
    )


def test_an_indexed_jobs_pod_made_again_with_its_index_is_a_later_attempt_and_gated() -> None:
    plans = Plans()
    plans.book.plan(("train", "bert"), BERT_PLAN)
    settings = replace(SETTINGS, plans=plans)
    patched(indexed_job_pod(3), admit(review(indexed_job_pod(3)), settings))
    again = patched(indexed_job_pod(3), admit(review(indexed_job_pod(3)), settings))
    assert again["metadata"]["labels"][ATTEMPT_LABEL] == "1", "a replacement"
    assert again["spec"]["schedulingGates"] == [{"name": GANG_GATE}]
    assert "affinity" not in again["spec"], "the placer checks its node before releasing it"


def test_a_workload_api_pod_groups_indexed_job_pod_after_the_plan_is_born_released() -> None:
    plans = Plans()
    plans.book.plan(("train", "llama-pg"), BERT_PLAN)
    settings = replace(SETTINGS, plans=plans)
    obj = pod(
        {COMPLETION_INDEX: "1"},
        {COMPLETION_INDEX: "1"},
        schedulingGroup={"podGroupName": "llama-pg"},
    )
    obj["metadata"]["ownerReferences"] = [JOB_OWNER]
    wired = patched(obj, admit(review(obj), settings))
    assert wired["metadata"]["labels"][GANG_LABEL] == "llama-pg"
    assert (
        wired["metadata"]["labels"][RANK_LABEL],
        wired["metadata"]["labels"][ATTEMPT_LABEL],
    ) == (
        "1",
        "0",
    )
    assert "schedulingGates" not in wired["spec"]


# -- a JobSet's pods: ranked at admission from the webhook's view of the JobSets ---------------

#: JobSet ``pretrain``: a driver Job of 2 pods, then 2 worker Jobs of 4 (10 pods, ranks 0-9)
PRETRAIN = slim_jobset(
    {
        "spec": {
            "replicatedJobs": [
                {"name": "driver", "replicas": 1, "template": {"spec": {"parallelism": 2}}},
                {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4}}},
            ]
        }
    }
)


JOBSET_PLAN = leaf_plan(10)


def jobset_pod(
    job: str, index: int, completion: int, restart: int = 0, **annotations: str
) -> dict[str, Any]:
    """A pod of JobSet ``pretrain`` as its Job creates it (the labels JobSet v0.12 writes)."""
    obj = pod(
        {
            "jobset.sigs.k8s.io/jobset-name": "pretrain",
            "jobset.sigs.k8s.io/replicatedjob-name": job,
            "jobset.sigs.k8s.io/job-index": str(index),
            "jobset.sigs.k8s.io/restart-attempt": str(restart),
            "batch.kubernetes.io/job-completion-index": str(completion),
        },
        {"batch.kubernetes.io/job-completion-index": str(completion), **annotations},
    )
    obj["metadata"]["generateName"] = f"pretrain-{job}-{index}-{completion}-"
    return obj


def jobset_plans(plan: StoredPlacement | None = None, gang: str = "pretrain") -> Plans:
    return Plans(plan, gang=gang, jobsets={"train/pretrain": PRETRAIN})


def test_a_jobset_pod_is_ranked_by_its_jobs_place_in_the_jobset_and_numbered() -> None:
    settings = replace(SETTINGS, plans=jobset_plans())
    obj = jobset_pod("workers", 1, 3)
    wired = patched(obj, admit(review(obj), settings))
    assert wired["metadata"]["labels"][RANK_LABEL] == "9", "2 driver pods + 4 + completion 3"
    assert wired["metadata"]["labels"][ATTEMPT_LABEL] == "0"
    assert wired["spec"]["schedulingGates"] == [{"name": GANG_GATE}], "no plan yet: gated"


def test_a_jobset_pod_of_the_planned_attempt_is_created_released_onto_its_ranks_plan() -> None:
    settings = replace(SETTINGS, plans=jobset_plans(JOBSET_PLAN))
    obj = jobset_pod("workers", 0, 1)
    wired = patched(obj, admit(review(obj), settings))
    meta, spec = wired["metadata"], wired["spec"]
    assert (meta["labels"][RANK_LABEL], meta["labels"][ATTEMPT_LABEL]) == ("3", "0")
    assert "schedulingGates" not in spec, "ungated: no release patch follows"
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert {"key": "topology.tpfabric.io/leaf", "operator": "In", "values": ["leaf-1"]} in (
        term["nodeSelectorTerms"][0]["matchExpressions"]
    )


def test_a_jobset_pod_its_job_makes_again_is_a_later_attempt_and_gated() -> None:
    settings = replace(SETTINGS, plans=jobset_plans(JOBSET_PLAN))
    first = patched(
        jobset_pod("workers", 0, 1), admit(review(jobset_pod("workers", 0, 1)), settings)
    )
    assert "schedulingGates" not in first["spec"]
    again = jobset_pod("workers", 0, 1)  # the Job's new pod for completion index 1
    wired = patched(again, admit(review(again), settings))
    assert wired["metadata"]["labels"][ATTEMPT_LABEL] == "1"
    assert wired["spec"]["schedulingGates"] == [{"name": GANG_GATE}]
    assert "affinity" not in wired["spec"], "the placer checks its node before releasing it"


def test_a_jobset_restart_begins_the_next_attempt_at_any_rank() -> None:
    """JobSet restarted (its restart-attempt went up) before every pod of attempt 0 was made:
    a new pod of a rank attempt 0 never had is of the next attempt all the same."""
    plans = jobset_plans(JOBSET_PLAN)
    settings = replace(SETTINGS, plans=plans)
    for completion in range(2):
        patched(
            jobset_pod("driver", 0, completion),
            admit(review(jobset_pod("driver", 0, completion)), settings),
        )
    obj = jobset_pod("workers", 1, 3, restart=1)
    wired = patched(obj, admit(review(obj), settings))
    assert wired["metadata"]["labels"][ATTEMPT_LABEL] == "1"
    assert wired["spec"]["schedulingGates"] == [{"name": GANG_GATE}]


def test_a_jobset_placed_job_by_job_ranks_each_jobs_pods_from_zero() -> None:
    per_job = "pretrain-workers-1"
    settings = replace(SETTINGS, plans=jobset_plans(leaf_plan(4), gang=per_job))
    obj = jobset_pod("workers", 1, 2, **{"tpfabric.io/gang-per": "job"})
    wired = patched(obj, admit(review(obj), settings))
    labels = wired["metadata"]["labels"]
    assert (labels[GANG_LABEL], labels[RANK_LABEL]) == (per_job, "2")
    assert "schedulingGates" not in wired["spec"], "its Job's gang was planned"


@pytest.mark.parametrize(
    ("jobsets", "obj", "max_size"),
    [
        ({}, jobset_pod("workers", 1, 3), 1024),  # the watch has not shown the JobSet yet
        ({"train/pretrain": slim_jobset({"spec": "?"})}, jobset_pod("workers", 1, 3), 1024),
        ({"train/pretrain": PRETRAIN}, jobset_pod("workers", 2, 0), 1024),  # no such Job
        ({"train/pretrain": PRETRAIN}, jobset_pod("workers", 1, 4), 1024),  # past the Job
        ({"train/pretrain": PRETRAIN}, jobset_pod("workers", 1, 3), 8),  # over the size limit
    ],
)
def test_a_jobset_pod_whose_rank_is_unknown_at_admission_waits_gated_for_the_operator(
    jobsets: dict[str, Any], obj: dict[str, Any], max_size: int
) -> None:
    plans = Plans(JOBSET_PLAN, gang="pretrain", jobsets=jobsets)
    gangs = replace(SETTINGS.gangs, max_size=max_size)
    settings = replace(SETTINGS, plans=plans, gangs=gangs)
    answer = admit(review(obj), settings)
    assert answer["response"]["allowed"] is True, "never refused"
    wired = patched(obj, answer)
    assert RANK_LABEL not in wired["metadata"]["labels"], "ranked by the operator once whole"
    assert ATTEMPT_LABEL not in wired["metadata"]["labels"]
    assert wired["spec"]["schedulingGates"] == [{"name": GANG_GATE}]
    assert wired["spec"]["initContainers"][0]["name"] == "rdma-init", "wired all the same"
