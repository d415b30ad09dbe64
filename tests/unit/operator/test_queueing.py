from __future__ import annotations

from typing import Any

from tpfabric_core.api import TensorParallelJob
from tpfabric_operator.children import worker_pod
from tpfabric_operator.queueing import (
    QUEUE_LABEL,
    admission_of,
    finished_status,
    requeued_status,
    workload_for,
    workload_name,
)


def a_job() -> TensorParallelJob:
    return TensorParallelJob.model_validate(
        {
            "metadata": {"name": "j", "labels": {QUEUE_LABEL: "training"}},
            "spec": {
                "workers": 2,
                "tensorParallelSize": 8,
                "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
            },
        }
    )


def workload(*conditions: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "w", "namespace": "ns", "generation": 1},
        "status": {
            "admission": {"clusterQueue": "cq"},
            "conditions": [
                {"type": t, "status": s, "reason": "r", "message": m} for t, s, m in conditions
            ],
        },
    }


def test_the_workload_is_one_pod_set_with_the_workers_demand() -> None:
    job = a_job()
    manifest = workload_for(
        job, worker_pod(job, "j", "ns", 0, "init:1"), name="j", namespace="ns", uid="0123456789"
    )
    assert manifest["metadata"]["name"] == workload_name("j", "0123456789") == "tpj-j-01234567"
    assert manifest["metadata"]["ownerReferences"][0]["kind"] == "TensorParallelJob"
    assert manifest["spec"]["queueName"] == "training"
    (pod_set,) = manifest["spec"]["podSets"]
    assert pod_set["count"] == 2
    container = pod_set["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"nvidia.com/gpu": "8", "rdma/ib": "8"}


def test_a_queued_workload_holds_the_job_with_kueues_words() -> None:
    pending = admission_of(workload(("QuotaReserved", "False", "insufficient quota")), "training")
    assert (pending.hold, pending.reason, pending.message) == (True, "Queued", "insufficient quota")
    assert admission_of(None, "training").hold


def test_an_admitted_workload_releases_the_job() -> None:
    admitted = admission_of(workload(("QuotaReserved", "True", ""), ("Admitted", "True", "")), "q")
    assert not admitted.hold
    assert admitted.message == "admitted by ClusterQueue cq"


def test_an_evicted_workload_holds_the_job_and_is_requeued_once_its_pods_are_gone() -> None:
    evicted = workload(("Admitted", "True", ""), ("Evicted", "True", "preempted"))
    verdict = admission_of(evicted, "q")
    assert verdict.hold
    assert verdict.evicted
    status = requeued_status(evicted, now="2026-01-01T00:00:00Z")
    assert "admission" not in status
    kinds = {c["type"]: c["status"] for c in status["conditions"]}
    assert (kinds["QuotaReserved"], kinds["Admitted"]) == ("False", "False")


def test_a_finished_job_finishes_its_workload() -> None:
    status = finished_status(workload(), succeeded=True, message="done", now="t")
    assert status["conditions"][-1]["type"] == "Finished"
    assert status["conditions"][-1]["reason"] == "Succeeded"


def test_quota_reserved_again_after_an_eviction_ends_it() -> None:
    readmitted = workload(("Evicted", "True", "deactivated"), ("Admitted", "True", ""))
    conditions = readmitted["status"]["conditions"]
    conditions[0]["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    conditions.append(
        {"type": "QuotaReserved", "status": "True", "lastTransitionTime": "2026-01-01T00:01:00Z"}
    )
    assert not admission_of(readmitted, "q").hold
