"""A JobSet gang's ranks: its child Jobs in order, each Job's pods by completion index, one rule
for the gang webhook (at admission) and the operator (for pods the webhook could not rank)."""

from __future__ import annotations

import time

import pytest

from tpfabric_core.gangs import GangSettings, gang_of
from tpfabric_core.jobset_ranks import jobset_job, jobset_layout, jobset_rank, member_layout

pytestmark = pytest.mark.unit

JOBSET = {
    "spec": {
        "replicatedJobs": [
            {"name": "driver", "replicas": 1, "template": {"spec": {"parallelism": 1}}},
            {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4}}},
        ]
    }
}
SETTINGS = GangSettings(levels={"leaf": "topology.tpfabric.io/leaf"})
INT32_MAX = 2**31 - 1


def pod_labels(job: str, index: int, completion: int) -> dict[str, str]:
    return {
        "jobset.sigs.k8s.io/jobset-name": "train",
        "jobset.sigs.k8s.io/replicatedjob-name": job,
        "jobset.sigs.k8s.io/job-index": str(index),
        "batch.kubernetes.io/job-completion-index": str(completion),
    }


def test_the_whole_jobset_ranks_its_jobs_in_order_then_the_completion_index() -> None:
    layout = jobset_layout(JOBSET, None)
    assert layout == {"driver/0": 0, "workers/0": 1, "workers/1": 5, "": 9}
    assert jobset_rank(layout, "workers/1", 3) == 8
    assert jobset_rank(layout, "workers/2", 0) is None, "no such Job in the JobSet"


def test_a_pods_gang_is_laid_out_whole_or_job_by_job_as_its_gang_is_named() -> None:
    labels = pod_labels("workers", 1, 2)
    whole = gang_of({"labels": labels}, SETTINGS)
    assert whole is not None
    assert jobset_job(labels) == "workers/1"
    assert member_layout(whole, labels, JOBSET) == jobset_layout(JOBSET, None)
    per_job = gang_of({"labels": labels, "annotations": {"tpfabric.io/gang-per": "job"}}, SETTINGS)
    assert per_job is not None
    assert member_layout(per_job, labels, JOBSET) == {"": 4, "workers/1": 0}


def test_one_child_job_is_a_gang_of_its_parallelism() -> None:
    assert jobset_layout(JOBSET, "workers/1") == {"": 4, "workers/1": 0}
    assert jobset_layout(JOBSET, "workers/7") is None


def test_a_jobset_whose_gang_no_record_can_hold_is_counted_not_walked_job_by_job() -> None:
    huge = {
        "spec": {
            "replicatedJobs": [
                {"name": "workers", "replicas": INT32_MAX, "template": {"spec": {"parallelism": 8}}}
            ]
        }
    }
    started = time.monotonic()
    assert jobset_layout(huge, None) == {"": INT32_MAX * 8}
    assert jobset_layout(huge, f"workers/{INT32_MAX - 1}") == {"": 8, f"workers/{INT32_MAX - 1}": 0}
    assert jobset_layout(huge, f"workers/{INT32_MAX}") is None
    assert time.monotonic() - started < 0.5, "walked the JobSet's Jobs one by one"


def test_a_jobset_of_exactly_the_largest_gang_is_laid_out() -> None:
    jobset = {
        "spec": {
            "replicatedJobs": [
                {"name": "w", "replicas": 128, "template": {"spec": {"parallelism": 8}}}
            ]
        }
    }
    layout = jobset_layout(jobset, None)
    assert layout is not None
    assert layout[""] == 1024
    assert layout["w/127"] == 1016


def test_a_child_job_index_is_matched_as_the_jobset_spells_it() -> None:
    assert jobset_layout(JOBSET, "workers/01") is None
    assert jobset_layout(JOBSET, "workers/ 1") is None
    assert jobset_layout(JOBSET, "workers/-1") is None
