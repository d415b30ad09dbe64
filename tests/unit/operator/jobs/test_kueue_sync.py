"""What one reconcile does with Kueue for a job without a queue label: LocalQueue defaulting,
leaving a queue while pods still hold its quota, and a queue that Kueue's configuration requires.

Pure decision logic against a recording stand-in of the API server (Kueue v1beta2 served); what
the real Kueue does with it is tested in tests/integration/test_kueue.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from test_lifecycle import a_job, pod

from tpfabric_core.placement.pod_fit import label_selector
from tpfabric_operator.jobs.job_state import Memory, WorkerPod
from tpfabric_operator.jobs.kueue import sync as kueue_sync
from tpfabric_operator.jobs.kueue.sync import KueueView, sync
from tpfabric_operator.jobs.kueue.workload import QUEUE_LABEL, RESOURCE_IN_USE, workload_name
from tpfabric_operator.settings import QueueRequirement

pytestmark = pytest.mark.unit

UID = "0123456789abcdef"
WORKLOAD = workload_name("j", UID)
NAME_LABEL = "kubernetes.io/metadata.name"
#: Kueue's default managedJobsNamespaceSelector for a Kueue in kueue-system
KUEUES_DEFAULT = label_selector(
    {
        "matchExpressions": [
            {"key": NAME_LABEL, "operator": "NotIn", "values": ["kube-system", "kueue-system"]}
        ]
    }
)
REQUIRED = QueueRequirement(without_queue_name=True, namespaces=KUEUES_DEFAULT)


class Kueue:
    """The API server as kueue_sync sees it, recording every write."""

    def __init__(
        self,
        *,
        local_queues: tuple[str, ...] = (),
        workload: dict[str, Any] | None = None,
    ) -> None:
        self.local_queues = set(local_queues)
        self.workloads: dict[str, dict[str, Any]] = {} if workload is None else {WORKLOAD: workload}
        self.writes: list[tuple[Any, ...]] = []
        self.namespaces_read: list[str] = []

    def kueue_versions(self) -> tuple[str, ...]:
        return ("v1beta2",)

    def local_queue_exists(self, namespace: str, name: str) -> bool:
        return name in self.local_queues

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        self.namespaces_read.append(namespace)
        return {NAME_LABEL: namespace}

    def queue_job(self, namespace: str, name: str, queue: str) -> None:
        self.writes.append(("queue_job", name, queue))

    def set_suspend(self, namespace: str, name: str, suspend: bool) -> None:
        self.writes.append(("set_suspend", name, suspend))

    def workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.workloads.get(name)

    def create_workload(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("create_workload", manifest["spec"]["queueName"]))
        self.workloads[manifest["metadata"]["name"]] = manifest
        return manifest

    def delete_workload(self, namespace: str, name: str) -> None:
        self.writes.append(("delete_workload", name))
        self.workloads.pop(name, None)

    def remove_workload_finalizer(self, workload: dict[str, Any], finalizer: str) -> None:
        self.writes.append(("remove_finalizer", finalizer))

    def replace_workload_status(self, workload: dict[str, Any], status: dict[str, Any]) -> None:
        self.writes.append(("workload_status",))

    def queue_topology_levels(self, namespace: str, queue: str) -> tuple[str, ...]:
        return ()

    def priority_value(self, group: str, kind: str, name: str) -> int | None:
        return None


@pytest.fixture(autouse=True)
def nothing_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test asks afresh what the module keeps for a minute (versions, queues, namespaces)."""
    monkeypatch.setattr(kueue_sync, "_recent", kueue_sync._Recent())


def admitted_workload(queue: str = "training") -> dict[str, Any]:
    """A Workload that holds quota and is admitted (Kueue's conditions)."""
    at = "2026-01-01T00:00:00Z"
    return {
        "metadata": {
            "name": WORKLOAD,
            "namespace": "team-a",
            "finalizers": [RESOURCE_IN_USE],
            "resourceVersion": "7",
        },
        "spec": {"queueName": queue, "podSets": []},
        "status": {
            "admission": {"clusterQueue": "cq"},
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "lastTransitionTime": at},
                {"type": "Admitted", "status": "True", "lastTransitionTime": at},
            ],
        },
    }


ADMITTED_STATUS = {
    "phase": "Running",
    "conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted"}],
}


def reconcile(
    kube: Kueue,
    *,
    labels: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    owned: list[WorkerPod] | None = None,
    memory: Memory | None = None,
    namespace: str = "team-a",
    suspended: bool = False,
    **options: Any,
) -> KueueView:
    meta = {"name": "j", "namespace": namespace, "uid": UID, "labels": labels or {}}
    worker = {"spec": {"containers": [{"name": "w", "image": "x"}]}}
    job = a_job(workers=2, suspend=suspended).model_copy(update={"metadata": meta})
    return sync(
        kube,  # type: ignore[arg-type]  # the stand-in answers what sync asks
        meta,
        status or {},
        job,
        owned or [],
        memory=memory or Memory(),
        worker=lambda: worker,
        now=1_000_000.0,
        **options,
    )


# -- LocalQueue defaulting ------------------------------------------------------------------------


def test_a_new_job_without_a_queue_label_is_queued_in_the_namespaces_default_local_queue() -> None:
    kube = Kueue(local_queues=("default",))
    view = reconcile(kube)
    # labelled and suspended in one write, then queued there like any labelled job
    assert kube.writes[:2] == [("queue_job", "j", "default"), ("create_workload", "default")]
    assert ("set_suspend", "j", True) not in kube.writes, "the label's write suspended it"
    assert view.job.spec.suspend is True
    assert view.admission is not None
    assert view.admission.hold


def test_a_job_that_already_ran_is_never_defaulted_into_a_queue() -> None:
    kube = Kueue(local_queues=("default",))
    view = reconcile(kube, status={"phase": "Running"}, owned=[pod(0), pod(1)])
    assert kube.writes == []
    assert view.admission is None
    assert view.job.spec.suspend is False


def test_without_a_default_local_queue_a_job_without_a_label_runs_outside_kueue() -> None:
    kube = Kueue(local_queues=("training",))
    view = reconcile(kube)
    assert kube.writes == []
    assert view.admission is None
    assert kube.namespaces_read == [], "Kueue's requirement is off: no namespace is read"


# -- the queue label removed ----------------------------------------------------------------------


def test_a_removed_queue_label_keeps_the_workload_and_its_quota_until_the_pods_are_gone() -> None:
    kube = Kueue(workload=admitted_workload())
    view = reconcile(kube, status=ADMITTED_STATUS, owned=[pod(0), pod(1)])
    assert view.admission is not None
    assert (view.admission.reason, view.admission.hold) == ("LeavingQueue", False)
    assert "keeps the job's quota until its 2 pod(s) are gone" in view.admission.message
    assert kube.writes == [], "the Workload and its quota stay while the pods hold them"

    finished = [pod(0, "Succeeded"), pod(1, "Failed")]  # hold nothing any more
    view = reconcile(kube, status=ADMITTED_STATUS, owned=finished)
    assert view.admission is None
    assert kube.writes == [("remove_finalizer", RESOURCE_IN_USE), ("delete_workload", WORKLOAD)]


def test_a_removed_queue_label_of_a_job_that_holds_no_quota_lets_its_workload_go_at_once() -> None:
    waiting = admitted_workload()
    waiting["status"] = {"conditions": [{"type": "QuotaReserved", "status": "False"}]}
    kube = Kueue(workload=waiting)
    status = {"conditions": [{"type": "Admitted", "status": "False", "reason": "Queued"}]}
    view = reconcile(kube, status=status, suspended=True)
    assert view.admission is None
    assert ("delete_workload", WORKLOAD) in kube.writes


# -- a queue required (Kueue's manageJobsWithoutQueueName) ----------------------------------------


def test_where_kueue_requires_a_queue_a_job_without_one_waits_suspended_and_is_told_how() -> None:
    kube = Kueue()
    view = reconcile(kube, requirement=REQUIRED)
    assert kube.writes == [("set_suspend", "j", True)]
    assert view.job.spec.suspend is True
    assert view.admission is not None
    assert (view.admission.reason, view.admission.hold) == ("QueueNameRequired", True)
    assert "kubectl label tpj j kueue.x-k8s.io/queue-name=<local-queue>" in view.admission.message
    # the next reconcile finds it suspended: nothing more is written
    kube.writes.clear()
    reconcile(kube, requirement=REQUIRED, suspended=True)
    assert kube.writes == []


def test_a_job_held_for_want_of_a_queue_is_queued_once_it_names_one() -> None:
    kube = Kueue()
    status = {
        "phase": "Suspended",
        "conditions": [{"type": "Admitted", "status": "False", "reason": "QueueNameRequired"}],
    }
    view = reconcile(
        kube, labels={QUEUE_LABEL: "training"}, status=status, suspended=True, requirement=REQUIRED
    )
    assert kube.writes[0] == ("create_workload", "training")
    assert ("set_suspend", "j", False) not in kube.writes, "not before Kueue admits it"
    assert view.admission is not None
    assert view.admission.reason == "Queued"


@pytest.mark.parametrize("namespace", ["kube-system", "kueue-system"])
def test_namespaces_kueues_selector_leaves_out_run_jobs_without_a_queue(namespace: str) -> None:
    kube = Kueue()
    view = reconcile(kube, namespace=namespace, requirement=REQUIRED)
    assert kube.writes == []
    assert view.admission is None
    assert kube.namespaces_read == [namespace]


def test_a_running_job_without_a_queue_where_one_is_required_is_stopped() -> None:
    """As Kueue stops a running job of its own that it manages and has not admitted (one made
    before the option was turned on)."""
    kube = Kueue()
    view = reconcile(
        kube, status={"phase": "Running"}, owned=[pod(0), pod(1)], requirement=REQUIRED
    )
    assert kube.writes == [("set_suspend", "j", True)]
    assert view.admission is not None
    assert view.admission.hold


def test_a_label_removed_where_a_queue_is_required_stops_the_job_and_keeps_its_quota() -> None:
    kube = Kueue(workload=admitted_workload())
    view = reconcile(kube, status=ADMITTED_STATUS, owned=[pod(0), pod(1)], requirement=REQUIRED)
    assert view.admission is not None
    assert (view.admission.reason, view.admission.hold) == ("QueueNameRequired", True)
    assert kube.writes == [("set_suspend", "j", True)], "the Workload stays while pods hold"
    kube.writes.clear()
    gone = [replace(pod(0), deleting=True, phase="Succeeded")]
    reconcile(kube, status=ADMITTED_STATUS, owned=gone, suspended=True, requirement=REQUIRED)
    assert kube.writes == [("remove_finalizer", RESOURCE_IN_USE), ("delete_workload", WORKLOAD)]


def test_a_finished_job_is_never_held_for_want_of_a_queue() -> None:
    kube = Kueue()
    view = reconcile(
        kube, status={"phase": "Succeeded"}, memory=Memory(phase="Succeeded"), requirement=REQUIRED
    )
    assert kube.writes == []
    assert view.admission is None
