"""The job's quota with Kueue: what the job tells its Workload, and when the Workload lets go.

Called by :func:`.sync.sync` (and by the operator's deletion handler): the Workload marked
Finished once the job is (:func:`finish`); the requeue after an eviction, ``PodsReady`` and
reclaimable pods in one status write when anything changed (:func:`report`); the
``resource-in-use`` finalizer dropped only once no pod of the job holds what the quota counted
(:func:`release`, :func:`release_on_delete`). What each write says is :mod:`.admission`'s.
"""

from __future__ import annotations

from typing import Any

import kopf

from tpfabric_core.api import TensorParallelJob
from tpfabric_core.timestamps import rfc3339
from tpfabric_operator.jobs.job_state import Memory, WorkerPod
from tpfabric_operator.jobs.kube import KubeAdapter
from tpfabric_operator.jobs.kueue.admission import (
    Admission,
    admission_of,
    finished_status,
    pods_ready_condition,
    reclaimable_status,
    requeued_status,
    was_queued,
    with_condition,
)
from tpfabric_operator.jobs.kueue.workload import RESOURCE_IN_USE, workload_name

__all__ = ["finish", "holding_pods", "ready", "release", "release_on_delete", "report"]


def holding_pods(owned: list[WorkerPod]) -> list[WorkerPod]:
    """Return the job's pods that may still hold what its quota counts (not finished)."""
    return [p for p in owned if p.phase not in ("Succeeded", "Failed")]


def release(kube: KubeAdapter, workload: dict[str, Any], *, delete: bool) -> None:
    """Drop the finalizer (the pods are gone) and, with ``delete``, the Workload."""
    if RESOURCE_IN_USE in (workload["metadata"].get("finalizers") or []):
        kube.remove_workload_finalizer(workload, RESOURCE_IN_USE)
    if delete and not workload["metadata"].get("deletionTimestamp"):
        kube.delete_workload(workload["metadata"]["namespace"], workload["metadata"]["name"])


def finish(
    kube: KubeAdapter,
    workload: dict[str, Any],
    memory: Memory,
    holding: list[WorkerPod],
    now: float,
) -> None:
    """Mark the finished job's Workload Finished (once), then drop its finalizer once no pod of
    the job holds what its quota counted."""
    if not admission_of(workload, "").finished:
        kube.replace_workload_status(
            workload,
            finished_status(
                workload,
                succeeded=memory.phase == "Succeeded",
                message=f"TensorParallelJob {memory.phase}",
                now=rfc3339(now),
            ),
        )
        return
    if not holding:
        release(kube, workload, delete=False)


def ready(job: TensorParallelJob, owned: list[WorkerPod], memory: Memory) -> bool:
    """Return whether every worker of the gang is ready (or finished), as Kueue's
    ``PodsReady`` means it."""
    done = {p.index for p in owned if not p.deleting and p.phase == "Succeeded"} | memory.succeeded
    ready = {p.index for p in owned if not p.deleting and p.phase == "Running" and p.ready}
    return not memory.restarting and set(range(job.spec.workers)) <= done | ready


def report(
    kube: KubeAdapter,
    workload: dict[str, Any],
    admission: Admission,
    *,
    job: TensorParallelJob,
    owned: list[WorkerPod],
    memory: Memory,
    now: float,
) -> None:
    """Tell Kueue what the job does, in one status write when anything changed: the requeue
    after an eviction (once the pods are gone), ``PodsReady`` and reclaimable pods."""
    current = workload
    changed = False
    if admission.evicted and not holding_pods(owned):
        requeued = requeued_status(current, now=rfc3339(now))
        if requeued is not None:
            current, changed = {**current, "status": requeued}, True
    condition = pods_ready_condition(
        current, ready=not job.spec.suspend and ready(job, owned, memory)
    )
    if condition is not None:
        current, changed = (
            {**current, "status": with_condition(current, condition, now=rfc3339(now))},
            True,
        )
    if not admission.hold:
        reclaimable = reclaimable_status(current, len(memory.succeeded))
        if reclaimable is not None:
            current, changed = {**current, "status": reclaimable}, True
    if changed:
        kube.replace_workload_status(workload, current["status"])


def release_on_delete(
    kube: KubeAdapter, meta: dict[str, Any], status: dict[str, Any], owned: list[WorkerPod]
) -> None:
    """Keep a deleted job's quota until its pods are gone, then let its Workload go.

    Called by the operator's deletion handler: the job waits (kopf's finalizer) while its
    workers terminate; they are deleted here (the garbage collector would delete them only
    after the job is gone); once none is left, the Workload's ``resource-in-use`` finalizer is
    removed and the garbage collector deletes it with the job. Raises ``kopf.TemporaryError``
    while pods remain.
    """
    if not was_queued(dict(meta.get("labels") or {}), status):
        return
    namespace, name, uid = meta["namespace"], meta["name"], str(meta["uid"])
    workload = kube.workload(namespace, workload_name(name, uid))
    if workload is None or RESOURCE_IN_USE not in (workload["metadata"].get("finalizers") or []):
        return
    remaining = holding_pods(owned)
    if remaining:
        for pod in remaining:
            if not pod.deleting:
                kube.delete_pod(namespace, pod.name, pod.uid)
        raise kopf.TemporaryError(
            f"{len(remaining)} worker pod(s) still terminating: the Workload keeps its quota "
            "until they are gone",
            delay=2,
        )
    kube.remove_workload_finalizer(workload, RESOURCE_IN_USE)
