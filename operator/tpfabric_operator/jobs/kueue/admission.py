"""Kueue's verdict on a TensorParallelJob's Workload, and what the job tells Kueue back: pure.

What Kueue's own job reconciler (``jobframework``, v0.17) does for its built-in jobs is done here
for ours, decision by decision: the admission read from the Workload's conditions
(:func:`admission_of`: admitted, evicted, finished, or why it waits), the ``PodsReady``
condition, reclaimable pods, the requeue after an eviction and Finished. The Workload itself is
:mod:`.workload`'s.

Nothing here talks to the API server: decisions and status bodies only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tpfabric_operator.jobs.kueue.workload import (
    POD_SET,
    QUEUE_LABEL,
    has_quota_reservation,
    workload_conditions,
)

__all__ = [
    "QUEUE_NAME_REQUIRED",
    "Admission",
    "admission_of",
    "finished_status",
    "pods_ready_condition",
    "queue_name_required",
    "reclaimable_status",
    "requeued_status",
    "was_queued",
    "with_condition",
]


#: eviction reasons after which Kueue's job reconciler marks the workload Requeued at once
_REQUEUED_AT_ONCE = ("Preempted", "NodeFailures")


#: the reason a job is held for want of a queue label (Kueue's manageJobsWithoutQueueName)
QUEUE_NAME_REQUIRED = "QueueNameRequired"


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


def queue_name_required(name: str) -> Admission:
    """Return the verdict on job ``name`` that has no queue label where Kueue requires one."""
    return Admission(
        False,
        False,
        False,
        QUEUE_NAME_REQUIRED,
        "Kueue manages the jobs of this namespace that name no queue "
        "(manageJobsWithoutQueueName): the job waits suspended until it names a LocalQueue: "
        f"kubectl label tpj {name} {QUEUE_LABEL}=<local-queue> (kubectl get localqueues lists "
        "them)",
    )


def was_queued(job_labels: dict[str, Any], status: dict[str, Any]) -> bool:
    """Return whether Kueue has a say on the job: it has the queue label, or its status still
    shows Kueue's verdict (the label was removed: its Workload must go)."""
    if job_labels.get(QUEUE_LABEL):
        return True
    return any(c.get("type") == "Admitted" for c in status.get("conditions") or [])


def admission_of(workload: dict[str, Any] | None, queue: str) -> Admission:
    """Return Kueue's verdict on ``workload`` (None: not created yet)."""
    if workload is None:
        return Admission(False, False, False, "Queued", f"waiting for LocalQueue {queue}")
    conditions = workload_conditions(workload)

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


def _set_condition(
    status: dict[str, Any], workload: Mapping[str, Any], condition: dict[str, Any], now: str
) -> None:
    """Set ``condition`` in ``status`` as ``meta.SetStatusCondition`` does: its transition time
    moves only when its status changes."""
    conditions = [dict(c) for c in status.get("conditions") or []]
    shown = next((c for c in conditions if c.get("type") == condition["type"]), None)
    new = {
        **condition,
        "observedGeneration": workload.get("metadata", {}).get("generation", 0),
        "lastTransitionTime": now,
    }
    if shown is not None and shown.get("status") == condition["status"]:
        new["lastTransitionTime"] = shown.get("lastTransitionTime") or now
    status["conditions"] = [c for c in conditions if c is not shown] + [new]


def requeued_status(workload: dict[str, Any], *, now: str) -> dict[str, Any] | None:
    """Return the Workload status after its evicted job stopped: no reservation, so requeued;
    None when its reservation is already released (one write per eviction).

    As Kueue's job reconciler: ``Requeued`` (True at once after a preemption or node failures,
    else False until Kueue's backoff ends), ``QuotaReserved`` False (``Pending``), no
    ``admission``, ``Admitted`` False.
    """
    if not has_quota_reservation(workload) and not (workload.get("status") or {}).get("admission"):
        return None
    status = dict(workload.get("status") or {})
    evicted = workload_conditions(workload).get("Evicted", {})
    reason = str(evicted.get("reason") or "Evicted")
    message = str(evicted.get("message") or "the job's pods are gone after its eviction")
    _set_condition(
        status,
        workload,
        {
            "type": "Requeued",
            "status": "True" if reason in _REQUEUED_AT_ONCE else "False",
            "reason": reason,
            "message": message,
        },
        now,
    )
    status.pop("admission", None)
    for kind, why in (("QuotaReserved", "Pending"), ("Admitted", "NoReservation")):
        _set_condition(
            status,
            workload,
            {"type": kind, "status": "False", "reason": why, "message": message},
            now,
        )
    return status


def pods_ready_condition(workload: Mapping[str, Any], *, ready: bool) -> dict[str, str] | None:
    """Return the ``PodsReady`` condition the workload must show now (type, status, reason,
    message), or None when it shows it already.

    Kueue's ``generatePodsReadyCondition``: not admitted, WaitForStart; every worker ready (or
    finished), Started (Recovered after a recovery); a gang that was ready and is no longer,
    WaitForRecovery until it is. With ``waitForPodsReady`` on, a workload that does not reach
    True in time is evicted by Kueue; one that never shows the condition would be too.
    """
    conditions = workload_conditions(workload)
    shown = conditions.get("PodsReady")
    admitted = conditions.get("Admitted", {}).get("status") == "True"
    if not admitted:
        wanted = ("False", "WaitForStart", "Not all pods are ready or succeeded")
    elif ready:
        recovering = shown is not None and shown.get("reason") in ("WaitForRecovery", "Recovered")
        wanted = (
            "True",
            "Recovered" if recovering else "Started",
            "All pods reached readiness and the workload is running",
        )
    elif shown is not None and (
        shown.get("status") == "True" or shown.get("reason") == "WaitForRecovery"
    ):
        wanted = ("False", "WaitForRecovery", "At least one pod has failed, waiting for recovery")
    else:
        wanted = ("False", "WaitForStart", "Not all pods are ready or succeeded")
    if shown is not None and (shown.get("status"), shown.get("reason")) == wanted[:2]:
        return None
    status, reason, message = wanted
    return {"type": "PodsReady", "status": status, "reason": reason, "message": message}


def with_condition(
    workload: dict[str, Any], condition: dict[str, str], *, now: str
) -> dict[str, Any]:
    """Return the workload's status with ``condition`` set."""
    status = dict(workload.get("status") or {})
    _set_condition(status, workload, dict(condition), now)
    return status


def reclaimable_status(workload: dict[str, Any], finished_workers: int) -> dict[str, Any] | None:
    """Return the workload's status reporting ``finished_workers`` reclaimable pods (workers
    that succeeded and will not run again: their quota can serve others), or None when it
    says so already. Kueue never lets the count go down while quota is reserved, so a lower
    count is left as it is."""
    status = dict(workload.get("status") or {})
    shown = {
        str(p.get("name")): int(p.get("count") or 0) for p in status.get("reclaimablePods") or []
    }
    if finished_workers <= shown.get(POD_SET, 0):
        return None
    others = [p for p in status.get("reclaimablePods") or [] if p.get("name") != POD_SET]
    status["reclaimablePods"] = [*others, {"name": POD_SET, "count": finished_workers}]
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
