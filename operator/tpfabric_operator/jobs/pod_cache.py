"""The operator's view of its own worker pods: one list+watch in a thread of its own.

kopf's pod watch parsed every event of every worker pod (full objects, managed fields and all) with
the standard ``json`` module on the event loop that also runs every job's handlers and timers. In a
burst of 100 jobs (1,100 pods, about six events each) that loop fell 12 to 30 s behind the API
server, and a job showed ``Running`` that much after its pods did (measured with ``tpfabric bench
operator``): a job's status must follow its pods within moments. This cache reads the same pods
(server-side filtered by the attempt label every worker keeps, kept failed ones included) with
``orjson`` in its own thread and keeps only what a reconcile reads: per job, its workers as
:class:`~tpfabric_operator.jobs.job_state.WorkerPod` and its kept failed pods.

``synced`` is set after the first list; a reconcile waits for it (a restarted operator must
never act on an empty view: it would create a second set of pods).

``on_change`` is called (from the cache's thread) with a job whose workers changed in a way its
status shows at once (:func:`shows_at_once`): a worker failed, finished or went away, or the last
one became ready. The operator reconciles that job then instead of at its next tick
(:mod:`.wakeups`); every other change (a worker created, scheduled, one of several ready) waits
for the tick, so that a gang coming up is not written once per worker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes import client

from tpfabric_core.api import KIND
from tpfabric_core.input_limits import whole_number
from tpfabric_core.timestamps import parse_rfc3339
from tpfabric_operator.jobs.children import (
    ATTEMPT_LABEL,
    FAILED_WORKER_LABEL,
    JOB_LABEL,
    WORKER_INDEX_LABEL,
)
from tpfabric_operator.jobs.job_state import WorkerPod
from tpfabric_operator.pod_watch import Grouped, PodWatch, pod_key

__all__ = ["PodCache", "owner_uid", "shows_at_once", "worker_of"]

log = logging.getLogger("tpfabric.operator.pods")

JobKey = tuple[str, str]  # (namespace, job name)


def owner_uid(meta: Mapping[str, Any]) -> str:
    """Return the uid of the TensorParallelJob that owns an object ("" when none does)."""
    return next(
        (r.get("uid", "") for r in meta.get("ownerReferences") or [] if r.get("kind") == KIND),
        "",
    )


def _why_failed(status: Mapping[str, Any]) -> tuple[str, str, int | None]:
    """Return (reason, message, exit code) of a pod's failure, init containers first."""
    for kind, states in (
        ("init container", status.get("initContainerStatuses") or []),
        ("container", status.get("containerStatuses") or []),
    ):
        for state in states:
            terminated = (state.get("state") or {}).get("terminated") or (
                (state.get("lastState") or {}).get("terminated") or {}
            )
            code = terminated.get("exitCode")
            if code:
                why = str(terminated.get("reason") or "Error")
                reason = "InitContainerFailed" if kind == "init container" else why
                if kind == "container" and why != "OOMKilled" and code == 137:
                    reason = "Killed"
                return reason, f"{kind} {state.get('name')} exited {code} ({why})", int(code)
    reason = str(status.get("reason") or "")
    return reason or "Error", str(status.get("message") or reason or "failed"), None


def worker_of(
    name: str,
    labels: Mapping[str, str],
    meta: Mapping[str, Any],
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
) -> tuple[str, WorkerPod]:
    """Return (uid of the owning job, the worker) for a worker pod's fields."""
    conditions = frozenset(
        str(c.get("type"))
        for c in status.get("conditions") or []
        if c.get("status") == "True" and c.get("type")
    )
    phase = str(status.get("phase") or "Pending")
    reason, message, code = _why_failed(status) if phase == "Failed" else ("", "", None)
    index = whole_number(labels.get(WORKER_INDEX_LABEL))
    attempt = whole_number(labels.get(ATTEMPT_LABEL))
    return owner_uid(meta), WorkerPod(
        name=name,
        index=index if index is not None else -1,
        phase=phase,
        ready="Ready" in conditions,
        node=spec.get("nodeName"),
        deleting=meta.get("deletionTimestamp") is not None,
        reason=reason,
        message=message,
        exit_code=code,
        conditions=conditions,
        attempt=attempt or 0,
        delete_deadline=parse_rfc3339(meta.get("deletionTimestamp")),
        uid=str(meta.get("uid") or ""),
    )


def _serving(pod: WorkerPod) -> bool:
    return pod.ready and pod.phase == "Running" and not pod.deleting


def shows_at_once(
    old: WorkerPod | None, new: WorkerPod | None, others: Iterable[WorkerPod]
) -> bool:
    """Return whether a worker's change from ``old`` to ``new`` (None: absent) is one its job's
    status should show at once: it failed or finished, was deleted or went away (a loss to charge,
    a restart to begin, old pods gone so the next attempt can start), or it became ready and so
    did every other worker of the job (``others``): the job runs.

    A worker appearing is never one: the reconcile that created it is running.
    """
    if old is None:
        return False
    if new is None or (new.deleting and not old.deleting):
        return True
    if new.phase in ("Failed", "Succeeded") and new.phase != old.phase:
        return True
    if _serving(new) and not _serving(old):
        return all(_serving(p) or p.phase == "Succeeded" for p in others if not p.deleting)
    return False


class _Entry:
    """What the cache keeps of one pod: the job it counts for, as a worker or as kept."""

    __slots__ = ("failed", "job", "worker")

    def __init__(
        self,
        job: JobKey,
        worker: tuple[str, WorkerPod] | None,
        failed: tuple[str, str, int, str] | None,
    ) -> None:
        self.job = job
        self.worker = worker
        self.failed = failed


def entry_of(obj: Mapping[str, Any]) -> _Entry | None:
    """Return what a reconcile reads of a pod, or None for a pod that is no job's worker."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    namespace = str(meta.get("namespace") or "")
    name = str(meta.get("name") or "")
    if JOB_LABEL in labels and WORKER_INDEX_LABEL in labels:
        worker = worker_of(name, labels, meta, obj.get("spec") or {}, obj.get("status") or {})
        return _Entry((namespace, str(labels[JOB_LABEL])), worker, None)
    if FAILED_WORKER_LABEL in labels:
        failed = (
            owner_uid(meta),
            name,
            whole_number(labels.get(ATTEMPT_LABEL)) or 0,
            str(meta.get("uid") or ""),
        )
        return _Entry((namespace, str(labels[FAILED_WORKER_LABEL])), None, failed)
    return None


def keyed_entry(obj: Mapping[str, Any]) -> tuple[str, _Entry | None]:
    """Return ("namespace/name", what a reconcile reads of it) for one listed pod."""
    return pod_key(obj), entry_of(obj)


class PodCache(PodWatch):
    """List+watch of the operator's pods; per job its workers and its kept failed pods."""

    def __init__(
        self,
        core: client.CoreV1Api,
        *,
        selector: str = ATTEMPT_LABEL,
        on_change: Callable[[JobKey], None] | None = None,
    ) -> None:
        super().__init__(core, selector, "pod-cache")
        self.on_change = on_change
        self._lock = threading.Lock()
        self._pods: Grouped[JobKey, _Entry] = Grouped(lambda entry: entry.job)

    # -- what a reconcile reads -------------------------------------------------------------------

    def workers(self, job: JobKey) -> list[tuple[str, WorkerPod]]:
        """Return (owner uid, worker) of every worker pod labelled for ``job``."""
        with self._lock:
            entries = self._pods.members(job)
        return [e.worker for e in entries if e.worker is not None]

    def failed(self, job: JobKey) -> list[tuple[str, str, int, str]]:
        """Return (owner uid, pod name, attempt, pod uid) of every failed pod kept for ``job``."""
        with self._lock:
            entries = self._pods.members(job)
        return [e.failed for e in entries if e.failed is not None]

    # -- keeping it current -----------------------------------------------------------------------

    def _slim(self, obj: Mapping[str, Any]) -> tuple[str, _Entry | None]:
        return keyed_entry(obj)

    def _event(self, key: str, obj: Mapping[str, Any] | None) -> None:
        job, at_once = self._put(key, obj)
        if job is not None and at_once and self.on_change is not None:
            self.on_change(job)

    def _put(self, key: str, obj: Mapping[str, Any] | None) -> tuple[JobKey | None, bool]:
        """Store (or with ``None`` forget) one pod; return the job it counted or counts for, and
        whether that job's status should show the change at once (:func:`shows_at_once`)."""
        entry = entry_of(obj) if obj is not None else None
        with self._lock:
            old = self._pods.put(key, entry)
            job = entry.job if entry is not None else (old.job if old is not None else None)
            before = old.worker[1] if old is not None and old.worker is not None else None
            after = entry.worker[1] if entry is not None and entry.worker is not None else None
            if job is None or (before is None and after is None):
                return job, False
            others = (
                e.worker[1]
                for k in self._pods.keys.get(job, ())
                if k != key and (e := self._pods.entries[k]).worker is not None
            )
            return job, shows_at_once(before, after, others)

    def _replace(self, entries: list[tuple[str, Any]]) -> None:
        with self._lock:
            self._pods.replace(entries)
