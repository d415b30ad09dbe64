"""One reconcile's part with Kueue: the Workload made, kept in step, and told what the job does.

:func:`sync` is called by every reconcile; it has a say on a job that carries the queue label
(or that did, per its ``Admitted`` condition), and on a job that carries none where Kueue's
``manageJobsWithoutQueueName`` requires one (the chart mirrors Kueue's Configuration: the job
is held suspended, condition ``Admitted`` and Event ``QueueNameRequired``, until it is given a
queue). It returns the job as Kueue's verdict wants it (suspended or not), the verdict, and,
for an admitted job, what the admission adds to the workers (:mod:`.podsets`). The
decisions are :mod:`.workload`'s and :mod:`.admission`'s; this module and :mod:`.quota`, which
keeps the Workload told what the job does, read and write.

Writes, as Kueue's own job reconciler makes them, and only when something changed (an idle
job costs one GET of its Workload per tick, and no write):

- the Workload, once, with the ``resource-in-use`` finalizer, the priority and the maximum
  execution time; its ``spec.queueName`` when the queue label changes while the job waits; a
  new Workload (the old one deleted once the job's pods are gone) when the demand changed, or
  the queue changed while admitted;
- one status write per change: ``PodsReady``, reclaimable pods, the requeue after an
  eviction (once per eviction), Finished;
- the finalizer removed once the pods are gone: after the job finished, after its Workload
  was deleted, when the job leaves Kueue (queue label removed), or when the job is deleted
  (:func:`.quota.release_on_delete`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tpfabric_core.api import TensorParallelJob
from tpfabric_operator.jobs.job_state import Memory, WorkerPod
from tpfabric_operator.jobs.kube import KubeAdapter
from tpfabric_operator.jobs.kueue.admission import (
    Admission,
    admission_of,
    queue_name_required,
    was_queued,
)
from tpfabric_operator.jobs.kueue.podsets import PodSetInfo, admitted_pod_set, flavor_names
from tpfabric_operator.jobs.kueue.quota import finish, holding_pods, release, report
from tpfabric_operator.jobs.kueue.workload import (
    QUEUE_LABEL,
    Priority,
    has_quota_reservation,
    out_of_step,
    priority_source,
    version_problem,
    workload_for,
    workload_name,
)
from tpfabric_operator.settings import KUEUE_QUEUE_REQUIREMENT, QueueRequirement

__all__ = ["KueueView", "sync"]

log = logging.getLogger("tpfabric.operator")

#: how long the served Kueue versions are trusted before the API server is asked again
VERSIONS_SECONDS = 60.0


@dataclass
class KueueView:
    """What Kueue's verdict makes of the job in this reconcile."""

    job: TensorParallelJob
    admission: Admission | None
    #: what the admission adds to each worker (None: not admitted, or no queue)
    pod_set: Callable[[], PodSetInfo] | None = None


class _Recent:
    """Answers of the API server that change seldom, asked again after ``VERSIONS_SECONDS``:
    the kueue.x-k8s.io versions it serves (a Kueue installed or upgraded later is seen without
    restarting the operator) and the Topology levels behind each LocalQueue."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, ...], tuple[float, tuple[str, ...]]] = {}

    def get(self, key: tuple[str, ...], ask: Callable[[], tuple[str, ...]]) -> tuple[str, ...]:
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and time.monotonic() - seen[0] < VERSIONS_SECONDS:
                return seen[1]
        answer = ask()
        with self._lock:
            if len(self._seen) > 10_000:
                self._seen.clear()
            self._seen[key] = (time.monotonic(), answer)
        return answer


_recent = _Recent()
#: the LocalQueue Kueue queues a job in when it names none (LocalQueueDefaulting)
DEFAULT_QUEUE = "default"


def _new(status: dict[str, Any], owned: list[WorkerPod]) -> bool:
    """Return whether the job has just been made: no status and no pod yet (Kueue defaults
    the queue of a job at its creation only)."""
    return not status.get("phase") and not status.get("conditions") and not owned


def _queue_in_default(
    kube: KubeAdapter, job: TensorParallelJob, namespace: str, name: str
) -> TensorParallelJob:
    """Label the job with the LocalQueue ``default`` and suspend it, as Kueue's LocalQueue
    defaulting labels a job of its own made without a queue; return the job so changed."""
    kube.queue_job(namespace, name, DEFAULT_QUEUE)
    log.info("job %s/%s: queued in LocalQueue %s", namespace, name, DEFAULT_QUEUE)
    labels = {**(job.metadata.get("labels") or {}), QUEUE_LABEL: DEFAULT_QUEUE}
    return job.model_copy(
        update={
            # the Workload made in this reconcile names the queue (workload_for reads the label)
            "metadata": {**job.metadata, "labels": labels},
            "spec": job.spec.model_copy(update={"suspend": True}),
        }
    )


def _default_queue(kube: KubeAdapter, namespace: str) -> bool:
    """Return whether ``namespace`` has the LocalQueue ``default`` (asked again after
    ``VERSIONS_SECONDS``; never when Kueue is not installed)."""
    if version_problem(_recent.get(("versions",), kube.kueue_versions)) is not None:
        return False
    found = _recent.get(
        ("default-queue", namespace),
        lambda: ("yes",) if kube.local_queue_exists(namespace, DEFAULT_QUEUE) else (),
    )
    return bool(found)


def _queue_required(kube: KubeAdapter, namespace: str, requirement: QueueRequirement) -> bool:
    """Return whether a job without a queue label in ``namespace`` must wait for one (the
    namespace's labels asked again after ``VERSIONS_SECONDS``; never asked when Kueue's
    ``manageJobsWithoutQueueName`` is off)."""
    if not requirement.without_queue_name:
        return False

    def ask() -> tuple[str, ...]:
        labels = kube.namespace_labels(namespace)
        return ("yes",) if labels is not None and requirement.applies(labels) else ()

    return bool(_recent.get(("queue-required", namespace), ask))


def _priority(kube: KubeAdapter, job: TensorParallelJob) -> Priority | str | None:
    """Return the job's priority, or why it cannot be read (the class is missing)."""
    source = priority_source(job)
    if source is None:
        return None
    group, kind, name = source
    value = kube.priority_value(group, kind, name)
    if value is None:
        return f"the {kind} {name} the job names is not found; create it or change the job"
    return Priority(group, kind, name, value)


def sync(  # noqa: PLR0911, PLR0912 - Kueue's reconcile, read top to bottom
    kube: KubeAdapter,
    meta: dict[str, Any],
    status: dict[str, Any],
    job: TensorParallelJob,
    owned: list[WorkerPod],
    *,
    memory: Memory,
    worker: Callable[[], dict[str, Any]],
    now: float,
    requirement: QueueRequirement = KUEUE_QUEUE_REQUIREMENT,
) -> KueueView:
    """Bring the job's Workload in step with the job, and the job with Kueue's verdict.

    ``worker``: one worker pod's manifest (what the Workload's pod set is shaped like);
    ``requirement``: whether Kueue requires a queue of jobs that name none (the chart's
    mirror of Kueue's Configuration).
    """
    labels = dict(meta.get("labels") or {})
    namespace, name, uid = meta["namespace"], meta["name"], str(meta["uid"])
    if not labels.get(QUEUE_LABEL) and _new(status, owned) and _default_queue(kube, namespace):
        job = _queue_in_default(kube, job, namespace, name)
        labels[QUEUE_LABEL] = DEFAULT_QUEUE
    queue = str(labels.get(QUEUE_LABEL) or "")
    terminal = memory.phase in ("Succeeded", "Failed")
    if not queue and not terminal and _queue_required(kube, namespace, requirement):
        return _wait_for_a_queue(kube, job, meta, labels=labels, status=status, owned=owned)
    if not was_queued(labels, status):
        return KueueView(job, None)
    problem = version_problem(_recent.get(("versions",), kube.kueue_versions))
    if problem is not None:
        if not queue:
            return KueueView(job, None)
        reason = "KueueNotInstalled" if "not installed" in problem else "KueueVersionUnsupported"
        return _suspend_as(kube, job, meta, Admission(False, False, False, reason, problem))
    workload = kube.workload(namespace, workload_name(name, uid))
    holding = holding_pods(owned)
    if not queue:
        return KueueView(job, _leave(kube, workload, holding, f"{namespace}/{name}"))
    tas_levels = _recent.get(
        ("levels", namespace, queue), lambda: kube.queue_topology_levels(namespace, queue)
    )
    wanted = workload_for(
        job, worker(), name=name, namespace=namespace, uid=uid, tas_levels=tas_levels
    )
    if workload is None:
        if terminal:
            return KueueView(job, None)  # finished, and Kueue deleted its Workload: not again
        priority = _priority(kube, job)
        if isinstance(priority, str):
            return _suspend_as(kube, job, meta, Admission(False, False, False, "Queued", priority))
        wanted = workload_for(
            job,
            worker(),
            name=name,
            namespace=namespace,
            uid=uid,
            priority=priority,
            tas_levels=tas_levels,
        )
        workload = kube.create_workload(wanted)
        log.info("job %s/%s: Workload %s created", namespace, name, wanted["metadata"]["name"])
    if terminal:
        finish(kube, workload, memory, holding, now)
        return KueueView(job, admission_of(workload, queue))
    if workload["metadata"].get("deletionTimestamp"):
        if not holding:
            release(kube, workload, delete=False)
        words = "its Workload is being deleted; a new one follows once it is gone"
        return _suspend_as(kube, job, meta, Admission(False, False, False, "Queued", words))
    differs = out_of_step(workload, wanted)
    if differs is not None:
        reserved = has_quota_reservation(workload)
        if differs.startswith("the job's queue") and job.spec.suspend and not reserved:
            kube.set_workload_queue(workload, queue)
            log.info("job %s/%s: Workload moved to LocalQueue %s", namespace, name, queue)
            workload = kube.workload(namespace, workload_name(name, uid)) or workload
        else:
            if not holding:
                release(kube, workload, delete=True)
            words = f"{differs}: a new Workload replaces the old one once the job's pods are gone"
            log.info("job %s/%s: %s", namespace, name, words)
            return _suspend_as(kube, job, meta, Admission(False, False, False, "Queued", words))
    admission = admission_of(workload, queue)
    view = _suspend_as(kube, job, meta, admission)
    report(kube, workload, admission, job=view.job, owned=owned, memory=memory, now=now)
    if not admission.hold:
        view.pod_set = _pod_set_of(kube, workload, job)
    return view


def _wait_for_a_queue(
    kube: KubeAdapter,
    job: TensorParallelJob,
    meta: dict[str, Any],
    *,
    labels: dict[str, Any],
    status: dict[str, Any],
    owned: list[WorkerPod],
) -> KueueView:
    """Hold a job that names no queue where Kueue requires one: suspended (its pods stopped,
    none made), as Kueue holds a job of its own integrations, until it is given a queue label.
    A job that had a queue leaves it as :func:`_leave` says: its Workload keeps the quota until
    the job's pods are gone."""
    namespace, name = meta["namespace"], meta["name"]
    if was_queued(labels, status) and not version_problem(
        _recent.get(("versions",), kube.kueue_versions)
    ):
        workload = kube.workload(namespace, workload_name(name, str(meta["uid"])))
        _leave(kube, workload, holding_pods(owned), f"{namespace}/{name}")
    return _suspend_as(kube, job, meta, queue_name_required(name))


def _leave(
    kube: KubeAdapter, workload: dict[str, Any] | None, holding: list[WorkerPod], job: str
) -> Admission | None:
    """Take a job whose queue label was removed out of Kueue; return its admission while it
    leaves (None once it has left).

    Its Workload goes, but only once no pod of the job holds what its quota counted: where the
    chart's policy does not refuse the label's removal from a running job, the quota is never
    freed under running pods (the job keeps its pods and its suspend, as a Kueue-managed Job).
    """
    if workload is None:
        return None
    if holding and has_quota_reservation(workload):
        words = (
            f"the queue label was removed; the Workload keeps the job's quota until its "
            f"{len(holding)} pod(s) are gone"
        )
        return Admission(True, False, False, "LeavingQueue", words)
    release(kube, workload, delete=True)
    log.info("job %s: queue label removed; its Workload is deleted", job)
    return None


def _suspend_as(
    kube: KubeAdapter, job: TensorParallelJob, meta: dict[str, Any], admission: Admission
) -> KueueView:
    """Return the view of ``job`` suspended as ``admission`` wants it (written when it differs)."""
    if admission.hold != job.spec.suspend:
        kube.set_suspend(meta["namespace"], meta["name"], admission.hold)
        log.info("job %s/%s: %s", meta["namespace"], meta["name"], admission.message)
        job = job.model_copy(
            update={"spec": job.spec.model_copy(update={"suspend": admission.hold})}
        )
    return KueueView(job, admission)


def _pod_set_of(
    kube: KubeAdapter, workload: dict[str, Any], job: TensorParallelJob
) -> Callable[[], PodSetInfo]:
    """Return a reader of what the admission adds to the workers (read once, when a worker is
    about to be created: the flavors are GETs)."""
    memo: list[PodSetInfo] = []

    def read() -> PodSetInfo:
        if not memo:
            flavors = {n: f for n in flavor_names(workload) if (f := kube.resource_flavor(n))}
            selector = dict(job.spec.template.spec.get("nodeSelector") or {})
            memo.append(admitted_pod_set(workload, flavors, selector))
        return memo[0]

    return read
