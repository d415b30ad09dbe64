from __future__ import annotations

from typing import Any

from tpfabric_core import labels
from tpfabric_core.api import TensorParallelJob
from tpfabric_core.rdma_default import NodeOffer
from tpfabric_operator.jobs.children import worker_pod, worker_rdma
from tpfabric_operator.jobs.kueue.admission import (
    admission_of,
    finished_status,
    pods_ready_condition,
    reclaimable_status,
    requeued_status,
    with_condition,
)
from tpfabric_operator.jobs.kueue.workload import (
    MAX_EXEC_TIME_LABEL,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    RESOURCE_IN_USE,
    Priority,
    out_of_step,
    priority_source,
    version_problem,
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
    offers = [NodeOffer("n", {labels.LEAF: "l"}, {"nvidia.com/gpu": 8, "rdma/ib": 8})]
    worker = worker_pod(job, "j", "ns", 0, "init:1", rdma=worker_rdma(job, offers))
    manifest = workload_for(job, worker, name="j", namespace="ns", uid="0123456789")
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
    assert status is not None
    assert "admission" not in status
    kinds = {c["type"]: c["status"] for c in status["conditions"]}
    assert (kinds["QuotaReserved"], kinds["Admitted"]) == ("False", "False")
    # written once per eviction: the requeued workload holds no quota, nothing more to write
    assert requeued_status({**evicted, "status": status}, now="2026-01-01T00:00:02Z") is None


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


def a_workload_of(job: TensorParallelJob, **kwargs: Any) -> dict[str, Any]:
    worker = worker_pod(job, "j", "ns", 0, "init:1")
    return workload_for(job, worker, name="j", namespace="ns", uid="0123456789", **kwargs)


def test_requeued_after_a_preemption_at_once_and_after_a_timeout_once_kueue_backs_off() -> None:
    for reason, requeued in (("Preempted", "True"), ("PodsReadyTimeout", "False")):
        evicted = workload(("QuotaReserved", "True", ""), ("Admitted", "True", ""))
        evicted["status"]["conditions"].append(
            {"type": "Evicted", "status": "True", "reason": reason, "message": "m"}
        )
        status = requeued_status(evicted, now="t")
        assert status is not None
        shown = {c["type"]: c for c in status["conditions"]}
        assert (shown["Requeued"]["status"], shown["Requeued"]["reason"]) == (requeued, reason)
        assert shown["QuotaReserved"]["reason"] == "Pending"


def test_the_workload_has_kueues_finalizer_priority_and_max_execution_time() -> None:
    job = a_job()
    job.metadata["labels"][MAX_EXEC_TIME_LABEL] = "600"
    manifest = a_workload_of(job, priority=Priority("scheduling.k8s.io", "PriorityClass", "hi", 9))
    assert manifest["metadata"]["finalizers"] == [RESOURCE_IN_USE]
    assert manifest["spec"]["priorityClassRef"] == {
        "group": "scheduling.k8s.io",
        "kind": "PriorityClass",
        "name": "hi",
    }
    assert manifest["spec"]["priority"] == 9
    assert manifest["spec"]["maximumExecutionTimeSeconds"] == 600


def test_the_priority_comes_from_kueues_label_first_then_the_templates_class() -> None:
    job = a_job()
    assert priority_source(job) is None
    job.spec.template.spec["priorityClassName"] = "pod-high"
    assert priority_source(job) == ("scheduling.k8s.io", "PriorityClass", "pod-high")
    job.metadata["labels"][PRIORITY_CLASS_LABEL] = "wl-high"
    assert priority_source(job) == ("kueue.x-k8s.io", "WorkloadPriorityClass", "wl-high")


def test_kueues_topology_annotation_becomes_the_pod_sets_topology_request() -> None:
    job = a_job()
    job.metadata["annotations"] = {
        "kueue.x-k8s.io/podset-required-topology": "topology.tpfabric.io/leaf"
    }
    (pod_set,) = a_workload_of(job)["spec"]["podSets"]
    assert pod_set["topologyRequest"] == {"required": "topology.tpfabric.io/leaf"}
    assert "topologyRequest" not in a_workload_of(a_job())["spec"]["podSets"][0]


def test_in_a_tas_queue_the_workload_asks_kueue_for_the_jobs_own_level() -> None:
    job = a_job()  # preferred, leaf (the model's defaults)
    tas = ("topology.tpfabric.io/block", "topology.tpfabric.io/leaf", "kubernetes.io/hostname")
    (pod_set,) = a_workload_of(job, tas_levels=tas)["spec"]["podSets"]
    assert pod_set["topologyRequest"] == {"preferred": "topology.tpfabric.io/leaf"}
    job.spec.topology.mode = "required"
    (pod_set,) = a_workload_of(job, tas_levels=tas)["spec"]["podSets"]
    assert pod_set["topologyRequest"] == {"required": "topology.tpfabric.io/leaf"}
    # a level the Topology lacks: Kueue's implied request, nothing asked
    job.spec.topology.level = "cluster"
    assert "topologyRequest" not in a_workload_of(job, tas_levels=tas)["spec"]["podSets"][0]
    # a non-TAS queue: never asked (Kueue refuses a topology request there)
    assert "topologyRequest" not in a_workload_of(a_job())["spec"]["podSets"][0]


def test_a_topology_request_that_changed_under_an_admitted_workload_is_not_a_new_demand() -> None:
    job = a_job()
    have = a_workload_of(job)
    tas = ("topology.tpfabric.io/leaf",)
    assert out_of_step(have, a_workload_of(job, tas_levels=tas)) is not None
    have["status"] = {"conditions": [{"type": "QuotaReserved", "status": "True"}]}
    assert out_of_step(have, a_workload_of(job, tas_levels=tas)) is None


def test_a_workload_out_of_step_with_its_job_says_how() -> None:
    job = a_job()
    have = a_workload_of(job)
    assert out_of_step(have, a_workload_of(job)) is None
    moved = a_job()
    moved.metadata["labels"][QUEUE_LABEL] = "other"
    assert out_of_step(have, a_workload_of(moved)) == "the job's queue changed from 'training'"
    bigger = a_job()
    bigger.spec.template.spec["containers"][0]["resources"] = {"requests": {"cpu": "4"}}
    assert "demand changed" in str(out_of_step(have, a_workload_of(bigger)))
    more = TensorParallelJob.model_validate(
        {
            **job.model_dump(by_alias=True),
            "spec": {**job.model_dump(by_alias=True)["spec"], "workers": 3},
        }
    )
    assert "demand changed" in str(out_of_step(have, a_workload_of(more)))


def pods_ready(wl: dict[str, Any], *, ready: bool) -> tuple[str, str] | None:
    condition = pods_ready_condition(wl, ready=ready)
    return None if condition is None else (condition["status"], condition["reason"])


def test_pods_ready_follows_kueues_job_reconciler() -> None:
    admitted = workload(("QuotaReserved", "True", ""), ("Admitted", "True", ""))
    assert pods_ready(admitted, ready=False) == ("False", "WaitForStart")
    assert pods_ready(admitted, ready=True) == ("True", "Started")
    started = {
        **admitted,
        "status": with_condition(
            admitted, pods_ready_condition(admitted, ready=True) or {}, now="t"
        ),
    }
    assert pods_ready(started, ready=True) is None  # shown already: no write
    assert pods_ready(started, ready=False) == ("False", "WaitForRecovery")  # a gang restart
    recovering = {
        **started,
        "status": with_condition(
            started, pods_ready_condition(started, ready=False) or {}, now="u"
        ),
    }
    assert pods_ready(recovering, ready=False) is None
    assert pods_ready(recovering, ready=True) == ("True", "Recovered")
    assert pods_ready(workload(("QuotaReserved", "False", "")), ready=True) == (
        "False",
        "WaitForStart",
    )


def test_finished_workers_are_reclaimable_and_the_count_never_goes_down() -> None:
    admitted = workload(("Admitted", "True", ""))
    assert reclaimable_status(admitted, 0) is None
    status = reclaimable_status(admitted, 1)
    assert status is not None
    assert status["reclaimablePods"] == [{"name": "workers", "count": 1}]
    assert reclaimable_status({**admitted, "status": status}, 1) is None
    assert reclaimable_status({**admitted, "status": status}, 0) is None


def test_an_old_or_missing_kueue_is_one_clear_problem() -> None:
    assert version_problem(("v1beta2", "v1beta1")) is None
    assert version_problem(None) is None
    assert "not installed" in str(version_problem(()))
    words = str(version_problem(("v1beta1",)))
    assert "v1beta1 only" in words
    assert "v0.15" in words
