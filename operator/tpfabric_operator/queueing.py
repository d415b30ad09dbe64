"""Kueue admission of a TensorParallelJob, as Kueue's external-framework contract has it: pure.

A job labelled ``kueue.x-k8s.io/queue-name`` is one Kueue ``Workload`` with one pod set of
``workers`` pods. The operator keeps such a job suspended (no pods, so no plan and no reservation
by the gang placer) until Kueue admits the workload; Kueue's eviction (preemption, a deactivated
workload) suspends it again, every pod is stopped uncharged, and once all are gone the workload's
quota reservation is released so that Kueue requeues it. A finished job marks its workload
Finished, which returns its quota. Why not Kueue's plain-pod groups: those gate pods that already
exist, and the gang placer would plan (and reserve nodes for) a gang that has no quota yet.

Nothing here talks to the API server: manifests and decisions only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpfabric_core.api import API_VERSION, KIND, TensorParallelJob

__all__ = [
    "QUEUE_LABEL",
    "WORKLOAD_GROUP",
    "WORKLOAD_PLURAL",
    "WORKLOAD_VERSION",
    "Admission",
    "admission_of",
    "finished_status",
    "requeued_status",
    "workload_for",
    "workload_name",
]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
WORKLOAD_GROUP = "kueue.x-k8s.io"
WORKLOAD_VERSION = "v1beta2"
WORKLOAD_PLURAL = "workloads"
POD_SET = "workers"


def workload_name(job: str, uid: str) -> str:
    """Return the name of the job's Workload (unique per job object, at most 63 characters)."""
    return f"tpj-{job}-{uid[:8]}"


def _demand(container: dict[str, Any]) -> dict[str, Any]:
    resources = dict(container.get("resources") or {})
    requests = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {
        "name": container["name"],
        "image": container.get("image", "x"),
        "resources": {"requests": requests, "limits": dict(resources.get("limits") or {})},
    }


def workload_for(
    job: TensorParallelJob, worker: dict[str, Any], *, name: str, namespace: str, uid: str
) -> dict[str, Any]:
    """Return the Workload of ``job``: one pod set of ``workers`` pods shaped like ``worker``.

    ``worker`` is one worker pod's manifest; only what quota counts is kept (container
    resources, with limits standing in for missing requests, and the node constraints).
    """
    spec = worker["spec"]
    template_spec: dict[str, Any] = {
        "containers": [_demand(c) for c in spec.get("containers") or []],
        "restartPolicy": "Never",
    }
    if spec.get("initContainers"):
        template_spec["initContainers"] = [_demand(c) for c in spec["initContainers"]]
    for key in ("nodeSelector", "tolerations", "priorityClassName"):
        if spec.get(key):
            template_spec[key] = spec[key]
    queue = str((job.metadata.get("labels") or {}).get(QUEUE_LABEL, ""))
    return {
        "apiVersion": f"{WORKLOAD_GROUP}/{WORKLOAD_VERSION}",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(name, uid),
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/job-uid": uid},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "queueName": queue,
            "podSets": [
                {"name": POD_SET, "count": job.spec.workers, "template": {"spec": template_spec}}
            ],
        },
    }


@dataclass(frozen=True, slots=True)
class Admission:
    """Where Kueue stands on a job's Workload."""

    admitted: bool
    evicted: bool
    finished: bool
    reason: str
    message: str

    @property
    def hold(self) -> bool:
        """Return whether the job must keep no pods (not admitted, or evicted)."""
        return not self.admitted or self.evicted


def _conditions(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(c.get("type")): c for c in (workload.get("status") or {}).get("conditions") or []}


def admission_of(workload: dict[str, Any] | None, queue: str) -> Admission:
    """Return Kueue's verdict on ``workload`` (None: not created yet)."""
    if workload is None:
        return Admission(False, False, False, "Queued", f"waiting for LocalQueue {queue}")
    conditions = _conditions(workload)

    def true(kind: str) -> bool:
        return conditions.get(kind, {}).get("status") == "True"

    finished = true("Finished")
    evicted_at = str(conditions.get("Evicted", {}).get("lastTransitionTime") or "")
    reserved_at = str(conditions.get("QuotaReserved", {}).get("lastTransitionTime") or "")
    # an eviction is over once quota was reserved again after it
    if true("Evicted") and not (true("QuotaReserved") and reserved_at > evicted_at):
        evicted = conditions["Evicted"]
        why = str(evicted.get("message") or evicted.get("reason") or "evicted")
        return Admission(true("Admitted"), True, finished, "Evicted", f"Kueue evicted it: {why}")
    if true("Admitted"):
        queue_of = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue")
        return Admission(True, False, finished, "Admitted", f"admitted by ClusterQueue {queue_of}")
    pending = conditions.get("QuotaReserved", {})
    message = str(pending.get("message") or f"waiting in LocalQueue {queue}")
    return Admission(False, False, finished, "Queued", message)


def requeued_status(workload: dict[str, Any], *, now: str) -> dict[str, Any]:
    """Return the Workload status after its evicted job stopped: no reservation, so requeued."""
    status = dict(workload.get("status") or {})
    status.pop("admission", None)
    kept = [
        c
        for c in status.get("conditions") or []
        if c.get("type") not in ("QuotaReserved", "Admitted")
    ]
    message = "the job's pods are gone after its eviction; requeued"
    for kind, reason in (("QuotaReserved", "Pending"), ("Admitted", "NoReservation")):
        kept.append(
            {
                "type": kind,
                "status": "False",
                "reason": reason,
                "message": message,
                "lastTransitionTime": now,
                "observedGeneration": workload.get("metadata", {}).get("generation", 0),
            }
        )
    status["conditions"] = kept
    return status


def finished_status(
    workload: dict[str, Any], *, succeeded: bool, message: str, now: str
) -> dict[str, Any]:
    """Return the Workload status of a finished job (Kueue then gives its quota back)."""
    status = dict(workload.get("status") or {})
    kept = [c for c in status.get("conditions") or [] if c.get("type") != "Finished"]
    kept.append(
        {
            "type": "Finished",
            "status": "True",
            "reason": "Succeeded" if succeeded else "Failed",
            "message": message or ("the job succeeded" if succeeded else "the job failed"),
            "lastTransitionTime": now,
            "observedGeneration": workload.get("metadata", {}).get("generation", 0),
        }
    )
    status["conditions"] = kept
    return status
