"""What the operator writes for a gang another controller made: the record, the ranks, the
status."""

from __future__ import annotations

from typing import Any

import pytest

from tpfabric_core import labels
from tpfabric_core.gangs import GangSettings, gang_of
from tpfabric_core.jobset_ranks import jobset_layout
from tpfabric_operator.gangs.records import (
    GangPod,
    OwnerRef,
    elsewhere_problem,
    owners_problem,
    ranks_to_write,
    record_manifest,
    record_status,
)

pytestmark = pytest.mark.unit

SETTINGS = GangSettings(levels={"leaf": labels.LEAF, "spine": labels.SPINE})


def plain(name: str, created: str, rank: int | None = None, **status: Any) -> GangPod:
    pod_labels = {
        "tpfabric.io/gang-name": "grp",
        "tpfabric.io/gang-size": "3",
        "tpfabric.io/gang": "grp",
    }
    if rank is not None:
        pod_labels["tpfabric.io/rank"] = str(rank)
    member = gang_of({"name": name, "namespace": "ns", "labels": pod_labels}, SETTINGS)
    assert member is not None
    return GangPod(name=name, member=member, created=created, labels=pod_labels, gpus=8, **status)


def jobset_pod(job: int, completion: int) -> GangPod:
    keys = {
        "jobset.sigs.k8s.io/jobset-name": "train",
        "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        "jobset.sigs.k8s.io/job-index": str(job),
        "jobset.sigs.k8s.io/job-global-index": str(job),
        "batch.kubernetes.io/job-completion-index": str(completion),
    }
    member = gang_of({"namespace": "ns", "labels": keys}, SETTINGS)
    assert member is not None
    return GangPod(
        name=f"train-{job}-{completion}", member=member, created="2026-12-04T10:00:00Z", labels=keys
    )


JOBSET = {
    "spec": {
        "replicatedJobs": [
            {"name": "driver", "replicas": 1, "template": {"spec": {"parallelism": 1}}},
            {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4}}},
        ]
    }
}


def test_pods_without_ranks_take_the_free_ones_by_creation_once_the_gang_is_whole() -> None:
    pods = [plain("c", "2026-12-04T10:00:03Z"), plain("a", "2026-12-04T10:00:01Z", rank=1)]
    assert ranks_to_write(pods, 3) == {}, "2 of 3 pods: no rank yet"
    pods.append(plain("b", "2026-12-04T10:00:02Z"))
    assert ranks_to_write(pods, 3) == {"b": 0, "c": 2}


def test_an_indexed_jobs_pod_the_webhook_left_unranked_takes_its_completion_index() -> None:
    """A pod admitted by a webhook that did not read its completion index (an older version)
    takes that index once the gang is whole, as the webhook ranks its pods now: one rule."""
    index = "batch.kubernetes.io/job-completion-index"
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}
    pods = []
    for name, created, completion in (("x", "10:00:01", 2), ("y", "10:00:02", 0)):
        keys = {"tpfabric.io/gang-name": "grp", "tpfabric.io/gang-size": "3", index: completion}
        meta = {
            "name": name,
            "labels": {**keys, index: str(completion)},
            "ownerReferences": [owner],
        }
        member = gang_of(meta, SETTINGS)
        assert member is not None
        pods.append(GangPod(name=name, member=member, created=f"2026-12-04T{created}Z", labels={}))
    pods.append(plain("z", "2026-12-04T10:00:00Z"))  # a bare pod: by creation, the free rank
    assert ranks_to_write(pods, 3) == {"x": 2, "y": 0, "z": 1}


def test_a_jobsets_ranks_follow_its_jobs_in_order_then_the_completion_index() -> None:
    layout = jobset_layout(JOBSET, None)
    assert layout == {"driver/0": 0, "workers/0": 1, "workers/1": 5, "": 9}
    pods = [jobset_pod(job, c) for job in range(2) for c in range(4)]
    ranks = ranks_to_write(pods, 8, dict(layout.items()))
    assert ranks["train-0-0"] == 1
    assert ranks["train-1-3"] == 8


def test_the_record_is_owned_by_the_gangs_owner_and_asks_the_chart_default_when_silent() -> None:
    owner = OwnerRef("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "vllm", "uid-1")
    record = record_manifest(plain("a", "t"), 3, owner)
    assert record["metadata"]["name"] == "grp"
    assert record["metadata"]["namespace"] == "ns"
    assert record["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "name": "vllm",
            "uid": "uid-1",
        }
    ]
    assert record["spec"]["workers"] == 3
    assert record["spec"]["gpusPerWorker"] == 8
    assert record["spec"]["topology"] == {"level": "leaf", "mode": "preferred"}
    assert "ownerReferences" not in record_manifest(plain("a", "t"), 3, None)["metadata"]


def test_the_status_says_pending_waiting_placed_running_and_names_two_pods_of_one_rank() -> None:
    some = [plain("a", "t", rank=0)]
    assert record_status(some, 3, {}, [])["phase"] == "Pending"
    whole = [plain(n, "t", rank=r) for r, n in enumerate("abc")]
    assert record_status(whole, 3, {"state": "Waiting"}, [])["phase"] == "Waiting"
    assert record_status(whole, 3, {"state": "Planned"}, [])["phase"] == "Placed"
    running = [plain(n, "t", rank=r, phase="Running", ready=True) for r, n in enumerate("abc")]
    assert record_status(running, 3, {"state": "Planned"}, []) == {
        "phase": "Running",
        "ready": "3/3",
        "pods": 3,
        "problems": [],
    }
    twice = [plain("a", "t", rank=0), plain("b", "t", rank=0)]
    status = record_status(twice, 3, {}, [])
    assert status["phase"] == "Invalid"
    assert "ranks [0] are held by more than one pod" in status["problems"][0]


def test_pods_of_two_owners_claiming_one_group_name_are_named_as_the_problem() -> None:
    pods = [
        plain("a-0", "2026-12-04T10:00:00Z", controller="Job/a"),
        plain("a-1", "2026-12-04T10:00:01Z", controller="Job/a"),
        plain("b-0", "2026-12-04T10:00:02Z", controller="Job/b"),
    ]
    problem = owners_problem(pods)
    assert problem is not None
    assert problem.startswith("tpfabric.io/gang-name: 'grp' is claimed by pods of 2 owners")
    assert "(Job/a, Job/b)" in problem
    assert record_status(pods, 3, {}, [problem])["phase"] == "Invalid"


def test_one_owner_or_pods_without_one_make_one_gang() -> None:
    assert owners_problem([plain("a-0", "t", controller="Job/a"), plain("x", "t")]) is None
    assert owners_problem([plain("x", "t"), plain("y", "t")]) is None
    assert owners_problem([jobset_pod(0, 0)]) is None  # named after its owner: never twice


def test_a_group_short_of_pods_here_with_a_namesake_elsewhere_says_so_naming_no_namespace() -> None:
    pods = [plain("a-0", "t"), plain("a-1", "t")]
    problem = elsewhere_problem(pods, 3, ["team-b"])
    assert problem == (
        "tpfabric.io/gang-name: 2 of 3 pods of 'grp' are in namespace 'ns', and another "
        "namespace has a gang of that name too: a gang's pods must all be in one namespace"
    )
    assert "team-b" not in problem  # another tenant's namespace is not this one's business
    assert elsewhere_problem(pods, 3, []) is None, "no namesake: it only waits for its pods"
    assert elsewhere_problem([*pods, plain("a-2", "t")], 3, ["team-b"]) is None, "whole here"
