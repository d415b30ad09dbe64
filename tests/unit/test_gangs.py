"""Gang identity of pods other controllers make: the labels and annotations as LeaderWorkerSet
(v0.7/main: leaderworkerset_types.go, pod_webhook.go), JobSet (jobset_types.go,
labelAndAnnotateObject) and Kueue pod groups write them."""

from __future__ import annotations

from typing import Any

import pytest

from tpfabric_core import labels
from tpfabric_core.gangs import (
    GANG_NAME_LABEL,
    GANG_SIZE_LABEL,
    LEVEL_ANNOTATION,
    LWS_SIZE,
    MAX_WAIT_ANNOTATION,
    MODE_ANNOTATION,
    RANK_LABEL,
    GangSettings,
    TopologyAsk,
    gang_of,
    record_name,
)

pytestmark = pytest.mark.unit

SETTINGS = GangSettings(
    levels={"leaf": labels.LEAF, "spine": labels.SPINE, "block": labels.BLOCK}, max_size=64
)


def lws_leader(
    group: int, *, lws: str = "vllm", size: int = 4, webhook: bool = True
) -> dict[str, Any]:
    """A leader pod as the leader StatefulSet creates it (and LWS's pod webhook labels it)."""
    pod_labels = {
        "leaderworkerset.sigs.k8s.io/name": lws,
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
    }
    if webhook:
        pod_labels["leaderworkerset.sigs.k8s.io/group-index"] = str(group)
        pod_labels["leaderworkerset.sigs.k8s.io/group-key"] = "3f2a9c"
    return {
        "name": f"{lws}-{group}",
        "labels": pod_labels,
        "annotations": {LWS_SIZE: str(size)},
    }


def lws_worker(group: int, worker: int, *, lws: str = "vllm", size: int = 4) -> dict[str, Any]:
    """A worker pod as the group's StatefulSet creates it (before LWS's webhook adds its index)."""
    return {
        "name": f"{lws}-{group}-{worker}",
        "labels": {
            "leaderworkerset.sigs.k8s.io/name": lws,
            "leaderworkerset.sigs.k8s.io/group-index": str(group),
            "leaderworkerset.sigs.k8s.io/group-key": "3f2a9c",
        },
        "annotations": {
            LWS_SIZE: str(size),
            "leaderworkerset.sigs.k8s.io/leader-name": f"{lws}-{group}",
        },
    }


def jobset_pod(
    job_index: int, completion: int, *, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod of a JobSet's child Job (JobSet writes its keys as labels and annotations)."""
    keys = {
        "jobset.sigs.k8s.io/jobset-name": "train",
        "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        "jobset.sigs.k8s.io/replicatedjob-replicas": "2",
        "jobset.sigs.k8s.io/global-replicas": "2",
        "jobset.sigs.k8s.io/job-index": str(job_index),
        "jobset.sigs.k8s.io/job-global-index": str(job_index),
        "batch.kubernetes.io/job-completion-index": str(completion),
    }
    return {
        "name": f"train-workers-{job_index}-{completion}-x7k2p",
        "labels": dict(keys),
        "annotations": {**keys, **(annotations or {})},
    }


def test_a_leader_worker_set_group_is_one_gang_and_the_leader_is_rank_0() -> None:
    leader = gang_of(lws_leader(2), SETTINGS, namespace="serve")
    worker = gang_of(lws_worker(2, 3), SETTINGS, namespace="serve")
    other = gang_of(lws_worker(1, 3), SETTINGS, namespace="serve")
    assert leader is not None
    assert worker is not None
    assert other is not None
    assert (leader.kind, leader.gang, leader.size, leader.rank) == (
        "LeaderWorkerSet",
        "vllm-2",
        4,
        0,
    )
    assert (worker.gang, worker.rank) == ("vllm-2", 3)  # the ordinal: LWS's webhook had not run
    assert other.gang == "vllm-1"
    assert leader.namespace == "serve"
    assert not leader.problems


def test_a_leader_not_yet_labelled_by_lws_gets_its_group_from_its_name() -> None:
    member = gang_of(lws_leader(7, webhook=False), SETTINGS)
    assert member is not None
    assert (member.gang, member.rank) == ("vllm-7", 0)


def test_a_jobset_is_one_gang_ordered_by_job_then_completion_index() -> None:
    first = gang_of(jobset_pod(0, 3), SETTINGS)
    second = gang_of(jobset_pod(1, 0), SETTINGS)
    assert first is not None
    assert second is not None
    assert first.gang == second.gang == "train"
    assert first.size is None
    assert first.rank is None
    assert first.order == (0, 3)
    assert second.order == (1, 0)
    assert first.order < second.order


@pytest.mark.parametrize(
    "annotation",
    [{"alpha.jobset.sigs.k8s.io/exclusive-topology": labels.LEAF}, {"tpfabric.io/gang-per": "job"}],
)
def test_a_jobset_asking_for_per_job_placement_is_one_gang_per_child_job(
    annotation: dict[str, str],
) -> None:
    member = gang_of(jobset_pod(1, 2, annotations=annotation), SETTINGS)
    assert member is not None
    assert member.gang == "train-workers-1"
    assert member.order == (2,)


def test_a_plain_pod_group_takes_name_size_and_rank_from_tpfabric_labels() -> None:
    meta = {"labels": {GANG_NAME_LABEL: "bert", GANG_SIZE_LABEL: "6", RANK_LABEL: "5"}}
    member = gang_of(meta, SETTINGS)
    assert member is not None
    assert (member.kind, member.gang, member.size, member.rank, member.problems) == (
        "PodGroup",
        "bert",
        6,
        5,
        (),
    )


def test_kueues_pod_group_labels_are_read_as_they_are() -> None:
    meta = {
        "labels": {"kueue.x-k8s.io/pod-group-name": "grp"},
        "annotations": {"kueue.x-k8s.io/pod-group-total-count": "3"},
    }
    member = gang_of(meta, SETTINGS)
    assert member is not None
    assert (member.gang, member.size, member.rank) == ("grp", 3, None)


def test_a_pod_that_opts_into_nothing_is_no_gang_member() -> None:
    assert gang_of({"name": "web-0", "labels": {"app": "web"}}, SETTINGS) is None
    only_jobsets = GangSettings(levels=SETTINGS.levels, owners=frozenset({"JobSet"}))
    assert gang_of(lws_leader(0), only_jobsets) is None  # the chart did not enable LWS


@pytest.mark.parametrize(
    ("pod_labels", "key", "words"),
    [
        ({GANG_NAME_LABEL: "g"}, GANG_SIZE_LABEL, "missing"),
        ({GANG_NAME_LABEL: "g", GANG_SIZE_LABEL: "0"}, GANG_SIZE_LABEL, "outside 1..64"),
        ({GANG_NAME_LABEL: "g", GANG_SIZE_LABEL: "65"}, GANG_SIZE_LABEL, "outside 1..64"),
        ({GANG_NAME_LABEL: "g", GANG_SIZE_LABEL: "four"}, GANG_SIZE_LABEL, "not a whole number"),
        (
            {GANG_NAME_LABEL: "g", GANG_SIZE_LABEL: "4", RANK_LABEL: "4"},
            RANK_LABEL,
            "not below the size",
        ),
        (
            {GANG_NAME_LABEL: "g", GANG_SIZE_LABEL: "4", RANK_LABEL: "x"},
            RANK_LABEL,
            "not a whole number",
        ),
        ({GANG_NAME_LABEL: "Big_Gang", GANG_SIZE_LABEL: "4"}, GANG_NAME_LABEL, "not a DNS label"),
    ],
)
def test_bad_gang_labels_are_problems_that_name_the_label(
    pod_labels: dict[str, str], key: str, words: str
) -> None:
    member = gang_of({"labels": pod_labels}, SETTINGS)
    assert member is not None
    assert [p.key for p in member.problems] == [key]
    assert words in member.problems[0].words()
    assert key in member.problems[0].words()


def test_tpfabrics_own_annotations_ask_for_a_level_mode_and_wait() -> None:
    meta = lws_leader(0)
    meta["annotations"] |= {
        LEVEL_ANNOTATION: "spine",
        MODE_ANNOTATION: "required",
        MAX_WAIT_ANNOTATION: "120",
    }
    member = gang_of(meta, SETTINGS)
    assert member is not None
    assert member.topology == TopologyAsk(
        level="spine", mode="required", max_wait_seconds=120, source=LEVEL_ANNOTATION
    )


@pytest.mark.parametrize(
    ("key", "mode"),
    [
        ("kueue.x-k8s.io/podset-required-topology", "required"),
        ("kueue.x-k8s.io/podset-preferred-topology", "preferred"),
        ("leaderworkerset.sigs.k8s.io/exclusive-topology", "required"),
    ],
)
def test_the_annotations_users_already_have_map_onto_levels_by_label_key(
    key: str, mode: str
) -> None:
    meta = lws_leader(0)
    meta["annotations"][key] = labels.LEAF
    member = gang_of(meta, SETTINGS)
    assert member is not None
    assert member.topology.level == "leaf"
    assert member.topology.mode == mode
    assert member.topology.source == key
    assert not member.problems


def test_a_level_that_is_not_configured_is_a_problem_naming_the_annotation() -> None:
    meta = lws_leader(0)
    meta["annotations"][LEVEL_ANNOTATION] = "rack"
    meta["annotations"]["kueue.x-k8s.io/podset-required-topology"] = (
        "cloud.google.com/gce-topology-block"
    )
    member = gang_of(meta, SETTINGS)
    assert member is not None
    assert member.topology.level is None
    assert [p.key for p in member.problems] == [LEVEL_ANNOTATION]
    assert "'rack' is not configured (levels: block, leaf, spine)" in member.problems[0].message
    del meta["annotations"][LEVEL_ANNOTATION]
    member = gang_of(meta, SETTINGS)
    assert member is not None
    assert (
        "no level has the node label 'cloud.google.com/gce-topology-block'"
        in member.problems[0].message
    )


def test_record_names_are_dns_labels_that_stay_apart_when_cut() -> None:
    assert record_name("vllm", "3") == "vllm-3"
    long_a, long_b = record_name("a" * 70, "1"), record_name("a" * 70, "2")
    assert len(long_a) <= 63
    assert len(long_b) <= 63
    assert long_a != long_b
    assert record_name("My_Set", "0") == "my-set-0"


# -- the upstream Workload API (scheduling.k8s.io PodGroup) ----------------------------------


def test_a_pod_naming_a_pod_group_in_its_spec_is_one_gang_per_pod_group() -> None:
    meta = {"name": "x-1", "namespace": "infer", "labels": {RANK_LABEL: "1"}}
    member = gang_of(meta, SETTINGS, spec={"schedulingGroup": {"podGroupName": "llama-pg"}})
    assert member is not None
    assert (member.kind, member.owner, member.gang) == ("WorkloadPodGroup", "llama-pg", "llama-pg")
    assert member.size is None, "the size is the PodGroup's gang minCount"
    assert member.rank == 1
    assert member.problems == ()


def test_a_pod_group_named_in_the_spec_is_taken_in_only_when_the_chart_enables_it() -> None:
    spec = {"schedulingGroup": {"podGroupName": "llama-pg"}}
    narrow = GangSettings(levels=SETTINGS.levels, owners=frozenset({"LeaderWorkerSet"}))
    assert gang_of({"name": "x"}, narrow, spec=spec) is None
    assert gang_of({"name": "x"}, SETTINGS, spec={"schedulingGroup": {}}) is None


def test_tpfabrics_own_gang_label_wins_over_a_pod_group_in_the_spec() -> None:
    meta = {"name": "x", "labels": {GANG_NAME_LABEL: "mine", GANG_SIZE_LABEL: "2"}}
    member = gang_of(meta, SETTINGS, spec={"schedulingGroup": {"podGroupName": "theirs"}})
    assert member is not None
    assert (member.kind, member.gang) == ("PodGroup", "mine")


# -- a pod group's own rank: tpfabric.io/rank, else an Indexed Job's completion index ----------

JOB = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1", "controller": True}


def job_pod(index: int, *, owner: dict[str, Any] | None = JOB, **extra: str) -> dict[str, Any]:
    """A pod of an Indexed Job labelled a member of pod group ``bert`` of 4, as the Job
    controller creates it (its completion index as a label and an annotation)."""
    index_key = "batch.kubernetes.io/job-completion-index"
    return {
        "name": f"train-{index}-x7k2p",
        "labels": {GANG_NAME_LABEL: "bert", GANG_SIZE_LABEL: "4", index_key: str(index), **extra},
        "annotations": {index_key: str(index)},
        "ownerReferences": [owner] if owner is not None else [],
    }


def test_an_indexed_jobs_pod_group_pod_is_ranked_by_its_completion_index() -> None:
    member = gang_of(job_pod(2), SETTINGS)
    assert member is not None
    assert (member.rank, member.controlled, member.problems) == (2, True, ())


def test_a_pod_groups_rank_label_wins_over_the_completion_index() -> None:
    member = gang_of(job_pod(2, **{RANK_LABEL: "0"}), SETTINGS)
    assert member is not None
    assert member.rank == 0


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        (job_pod(2, owner=None), "a bare pod: no Job made it"),
        (
            job_pod(2, owner={**JOB, "controller": False}),
            "the Job owns it but does not control it",
        ),
        (job_pod(2, owner={**JOB, "apiVersion": "example.com/v1"}), "not the batch Job"),
        (job_pod(4), "an index beyond the gang's 4 pods: a Job of more completions than it"),
    ],
)
def test_a_completion_index_is_no_rank_where_an_indexed_job_did_not_give_it(
    pod: dict[str, Any], why: str
) -> None:
    member = gang_of(pod, SETTINGS)
    assert member is not None
    assert member.rank is None, why
    assert member.problems == (), "ranked by creation, as before: nothing wrong"


def test_a_workload_api_pod_groups_pod_of_an_indexed_job_is_ranked_by_its_index() -> None:
    meta = job_pod(5)
    del meta["labels"][GANG_NAME_LABEL], meta["labels"][GANG_SIZE_LABEL]
    member = gang_of(meta, SETTINGS, spec={"schedulingGroup": {"podGroupName": "llama-pg"}})
    assert member is not None
    assert (member.kind, member.rank, member.controlled) == ("WorkloadPodGroup", 5, True)
