"""Who owns a gang and how large it is: what its pods, its record and its owner say. Pure."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from gang_world import NS, group_pod, lws_pod, pods_of

from tpfabric_core import labels
from tpfabric_operator.gangs.owners import (
    GANG_SETTINGS,
    OwnerRead,
    first_pod,
    identify,
    owner_apis,
    owner_needed,
    pod_group_gang,
    too_large_problem,
)
from tpfabric_operator.gangs.records import GangPod, OwnerRef

pytestmark = pytest.mark.unit

SETTINGS = GANG_SETTINGS
JOBSET = {
    "spec": {
        "replicatedJobs": [
            {"name": "driver", "replicas": 1, "template": {"spec": {"parallelism": 1}}},
            {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4}}},
        ]
    }
}


def jobset_pods(*, rank: bool) -> list[GangPod]:
    pods = []
    for completion in range(4):
        pod_labels = {
            "tpfabric.io/gang": "train",
            "jobset.sigs.k8s.io/jobset-name": "train",
            "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/job-index": "1",
            "batch.kubernetes.io/job-completion-index": str(completion),
        }
        if rank:
            pod_labels["tpfabric.io/rank"] = str(5 + completion)
        pods.append(
            {"metadata": {"name": f"train-w-1-{completion}", "namespace": NS, "labels": pod_labels}}
        )
    return pods_of(*pods)


def test_the_first_pod_has_the_lowest_rank_then_the_oldest() -> None:
    pods = pods_of(group_pod("g", "b", rank=1), group_pod("g", "a"), group_pod("g", "cc", rank=0))
    assert first_pod(pods).name == "cc"
    assert first_pod(pods_of(group_pod("g", "bb"), group_pod("g", "a"))).name == "a", "oldest"


def test_the_owner_is_read_to_make_the_record_or_to_rank_a_jobsets_pods_only() -> None:
    lws = pods_of(lws_pod("chat", 1, 0), lws_pod("chat", 1, 1))
    assert owner_needed(lws[0], lws, None)
    assert not owner_needed(lws[0], lws, {"spec": {"workers": 2}})
    unranked = jobset_pods(rank=False)
    assert owner_needed(unranked[0], unranked, {"spec": {"workers": 4}})
    ranked = jobset_pods(rank=True)
    assert not owner_needed(ranked[0], ranked, {"spec": {"workers": 4}})


def test_a_pod_group_has_no_owner_object_to_read() -> None:
    (pod,) = pods_of(group_pod("g", "a"))
    assert owner_apis(pod.member) == []
    (leader,) = pods_of(lws_pod("chat", 1, 0))
    assert [kind for *_, kind in owner_apis(leader.member)] == ["LeaderWorkerSet"]


def test_without_the_owner_read_the_size_is_the_records() -> None:
    pods = jobset_pods(rank=True)
    identity = identify(pods[0], {"spec": {"workers": 4}}, None)
    assert (identity.size, identity.layout, identity.owner) == (4, None, None)


def test_a_jobsets_owner_gives_the_size_and_the_layout_of_one_child_job() -> None:
    exclusive = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "x"}  # a gang per child Job
    per_job = [replace(p, labels={**p.labels, **exclusive}) for p in jobset_pods(rank=False)]
    ref = OwnerRef("jobset.x-k8s.io/v1alpha2", "JobSet", "train", "uid-train")
    identity = identify(per_job[0], None, OwnerRead(ref, JOBSET))
    assert (identity.size, identity.layout, identity.owner) == (4, {"": 4, "workers/1": 0}, ref)
    assert identity.problems == []


def test_a_gang_whose_owner_is_gone_has_no_size_and_says_why() -> None:
    pods = jobset_pods(rank=False)
    identity = identify(pods[0], None, OwnerRead())
    assert identity.size is None
    assert identity.problems == [
        "jobset.sigs.k8s.io/jobset-name: the JobSet 'train' does not give the size"
    ]


def pod_group_member() -> GangPod:
    pod = {
        "metadata": {
            "name": "llama-0",
            "namespace": NS,
            "labels": {"tpfabric.io/gang": "llama-pg"},
        },
        "spec": {"schedulingGroup": {"podGroupName": "llama-pg"}},
    }
    (member,) = pods_of(pod)
    return member


def a_pod_group(min_count: int, key: str = labels.LEAF) -> dict[str, Any]:
    return {
        "metadata": {"name": "llama-pg", "uid": "uid-pg"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": min_count}},
            "schedulingConstraints": {"topology": [{"key": key}]},
        },
    }


def test_a_workload_pod_group_gives_the_size_and_the_topology_its_pods_do_not() -> None:
    first = pod_group_member()
    ref = OwnerRef("scheduling.k8s.io/v1beta1", "PodGroup", "llama-pg", "uid-pg")
    identity = identify(first, None, OwnerRead(ref, a_pod_group(4)))
    assert identity.size == 4
    assert (identity.first.member.topology.level, identity.first.member.topology.mode) == (
        "leaf",
        "required",
    )


def test_a_gang_larger_than_a_record_holds_has_no_size_and_says_how_to_split_it() -> None:
    first = pod_group_member()
    ref = OwnerRef("scheduling.k8s.io/v1beta1", "PodGroup", "llama-pg", "uid-pg")
    identity = identify(first, None, OwnerRead(ref, a_pod_group(5000)))
    assert identity.size is None
    assert "makes a gang of 5000 pods; a Gang record holds at most 1024" in identity.problems[-1]


def test_a_jobset_whose_gang_no_record_can_hold_is_told_how_to_make_it_smaller() -> None:
    words = too_large_problem("JobSet", "train", 3000)
    assert "makes a gang of 3000 pods; a Gang record holds at most 1024" in words
    assert "alpha.jobset.sigs.k8s.io/exclusive-topology" in words


def test_a_pod_group_gives_its_gang_size_and_its_topology_constraint_as_a_level() -> None:
    group = {
        "metadata": {"name": "llama-pg"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 4}},
            "schedulingConstraints": {"topology": [{"key": labels.LEAF}]},
        },
    }
    size, ask, problems = pod_group_gang(group, SETTINGS.levels)
    assert size == 4
    assert ask is not None
    assert (ask.level, ask.mode) == ("leaf", "required")
    assert problems == []


def test_a_pod_group_without_a_gang_policy_or_with_an_unknown_key_is_named() -> None:
    group = {
        "metadata": {"name": "basic"},
        "spec": {
            "schedulingPolicy": {"basic": {}},
            "schedulingConstraints": {"topology": [{"key": "example.com/rack"}]},
        },
    }
    size, ask, problems = pod_group_gang(group, SETTINGS.levels)
    assert size is None
    assert ask is None
    assert problems[0].startswith("spec.schedulingPolicy.gang.minCount: the PodGroup 'basic'")
    assert problems[1].startswith(
        "spec.schedulingConstraints.topology[0].key: no level has the node label 'example.com/rack'"
    )
