"""kopf handlers of TensorParallelJob: create, resume, update and a short reconcile timer.

Every handler runs the same idempotent ``reconcile``: read the job and its worker pods (from a
kopf index of pods, never a list per call), ask ``lifecycle.decide`` what to do, do it through
the adapter, and patch the operator-owned status once. Names are deterministic, so a restarted
operator finds its pods instead of making a second set. No finalizer: owner references let the
garbage collector remove pods and the Service when the job goes.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

import kopf
from pydantic import ValidationError

from tpfabric_core.api import GROUP, KIND, PLURAL, VERSION, TensorParallelJob
from tpfabric_core.fabric_description import pydantic_error_path
from tpfabric_operator.children import (
    JOB_LABEL,
    WORKER_INDEX_LABEL,
    headless_service,
    worker_name,
    worker_pod,
)
from tpfabric_operator.kube import KubeAdapter
from tpfabric_operator.lifecycle import Intent, WorkerPod, decide, honour_problem, job_status

log = logging.getLogger("tpfabric.operator")

RECONCILE_SECONDS = float(os.environ.get("TPFABRIC_RECONCILE_SECONDS", "2"))
INIT_IMAGE = os.environ.get("TPFABRIC_RDMA_INIT_IMAGE", "tpfabric/rdma-init:0.1.0")
_adapter: KubeAdapter | None = None


def adapter() -> KubeAdapter:
    """Return the process's API adapter (made on first use, after kopf has logged in)."""
    global _adapter  # noqa: PLW0603 - one client per operator process
    if _adapter is None:
        _adapter = KubeAdapter()
    return _adapter


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Keep kopf's bookkeeping under our own annotation prefix; post Events at info level."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="tpfabric.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="tpfabric.io", key="last-handled-configuration"
    )
    settings.posting.level = logging.INFO
    # our own Events only: kopf's per-handler log lines as Events would be one per job per tick
    settings.posting.loggers = False
    # "Timer succeeded" every tick for every job is noise; our messages use our own logger
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    settings.watching.server_timeout = 240


def worker_of(
    name: str,
    labels: Mapping[str, str],
    meta: Mapping[str, Any],
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
) -> tuple[str, WorkerPod]:
    """Return (uid of the owning job, the worker) for a worker pod's fields."""
    owner = next(
        (r.get("uid", "") for r in meta.get("ownerReferences") or [] if r.get("kind") == KIND),
        "",
    )
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    reason = ""
    for state in status.get("containerStatuses") or []:
        terminated = (state.get("state") or {}).get("terminated") or {}
        if terminated.get("exitCode"):
            reason = f"{state.get('name')} exited {terminated['exitCode']}"
    index = str(labels.get(WORKER_INDEX_LABEL, ""))
    return owner, WorkerPod(
        name=name,
        index=int(index) if index.isdigit() else -1,
        phase=str(status.get("phase") or "Pending"),
        ready=ready,
        node=spec.get("nodeName"),
        deleting=meta.get("deletionTimestamp") is not None,
        reason=reason or str(status.get("reason") or ""),
    )


@kopf.index("pods", labels={JOB_LABEL: kopf.PRESENT, WORKER_INDEX_LABEL: kopf.PRESENT})
def workers(
    *,
    namespace: str | None,
    name: str,
    labels: kopf.Labels,
    meta: kopf.Meta,
    status: kopf.Status,
    spec: kopf.Spec,
    **_: Any,
) -> dict[tuple[str, str], tuple[str, WorkerPod]]:
    """Index worker pods by (namespace, job name), with the uid of the job that owns them."""
    return {(namespace or "", str(labels[JOB_LABEL])): worker_of(name, labels, meta, spec, status)}


def _now() -> float:
    return time.time()


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None


def _rfc3339(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fail_invalid(body: kopf.Body, patch: kopf.Patch, message: str) -> None:
    now = _rfc3339(_now())
    patch.status["phase"] = "Failed"
    patch.status["conditions"] = [
        {
            "type": "Failed",
            "status": "True",
            "reason": "InvalidSpec",
            "message": message,
            "lastTransitionTime": now,
            "observedGeneration": body.meta.get("generation"),
        }
    ]
    kopf.warn(body, reason="InvalidSpec", message=message)


def reconcile(
    body: kopf.Body,
    patch: kopf.Patch,
    workers: kopf.Index[tuple[str, str], tuple[str, WorkerPod]],
) -> None:
    """Bring the job's children and status to what ``lifecycle`` says; idempotent."""
    namespace, name = body.meta["namespace"], body.meta["name"]
    uid = body.meta["uid"]
    status = dict(body.get("status") or {})
    try:
        job = TensorParallelJob.model_validate(dict(body))
    except ValidationError as err:
        first = err.errors()[0]
        where = pydantic_error_path(tuple(first["loc"]))
        _fail_invalid(body, patch, f"{where}: {first['msg']}")
        return
    failure = next(
        (
            str(c.get("message"))
            for c in status.get("conditions") or []
            if c.get("type") == "Failed" and c.get("status") == "True"
        ),
        None,
    )
    problem = None if failure else honour_problem(job, adapter().node_capacity())
    if problem:
        failure = problem
        kopf.warn(body, reason="CannotBeHonoured", message=problem)
    pods = {
        pod.index: pod
        for owner, pod in workers.get((namespace, name), [])
        if owner in ("", uid) and pod.index >= 0
    }
    now = _now()
    restarts = int(status.get("restarts") or 0)
    created_before = bool(status.get("workersCreated"))
    if created_before and failure is None and not job.spec.suspend:
        # the index may lag behind the status (a busy operator): a worker it does not show is
        # only lost when the API server says so too
        for index in range(job.spec.workers):
            if index not in pods:
                found = adapter().read_pod(namespace, worker_name(name, index))
                if found is not None:
                    owner, pod = worker_of(
                        found["metadata"]["name"],
                        found["metadata"].get("labels") or {},
                        found["metadata"],
                        found.get("spec") or {},
                        found.get("status") or {},
                    )
                    if owner in ("", uid):
                        pods[index] = pod
    replanning = (status.get("placement") or {}).get("state") == "Replanning"
    if created_before and not replanning and len(pods) < job.spec.workers:
        # the placer writes Replanning before it deletes released pods; the pod watch may be
        # ahead of the job's: ask the API server before charging a loss
        replanning = adapter().read_placement_state(namespace, name) == "Replanning"
    intent = decide(
        job,
        pods,
        created_before=created_before,
        restarts=restarts,
        failed=failure is not None,
        last_failure=_parse_time(status.get("lastFailureTime")),
        now=now,
        replanning=replanning,
    )
    failure, restarts = _apply(
        body=body,
        patch=patch,
        job=job,
        intent=intent,
        failure=failure,
        restarts=restarts,
        now=now,
    )
    if job.spec.suspend:
        patch.status["workersCreated"] = False  # the placer drops the plan of a suspended job
    elif not created_before and (len(pods) + len(intent.create)) >= job.spec.workers:
        patch.status["workersCreated"] = True
    alive = {i: p for i, p in pods.items() if p.name not in intent.delete}
    desired = job_status(
        job,
        alive,
        placement=dict(status.get("placement") or {}),
        previous_conditions=list(status.get("conditions") or []),
        restarts=restarts,
        failure=failure,
        generation=int(body.meta.get("generation") or 0),
        now=now,
    )
    for key, value in desired.items():  # an unchanged job costs no API call
        if status.get(key) != value:
            patch.status[key] = value


def _apply(
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    job: TensorParallelJob,
    intent: Intent,
    failure: str | None,
    restarts: int,
    now: float,
) -> tuple[str | None, int]:
    """Carry out ``intent``; return the job's failure (if any) and its replacement count."""
    namespace, name = body.meta["namespace"], body.meta["name"]
    created_before = bool((body.get("status") or {}).get("workersCreated"))
    kube = adapter()
    if not job.spec.suspend and failure is None and (intent.create or not created_before):
        service = headless_service(name, namespace)
        kopf.adopt(service, owner=body)
        kube.create(service)
    for pod_name in intent.delete:
        if kube.delete_pod(namespace, pod_name):
            log.info("job %s/%s: deleted worker pod %s", namespace, name, pod_name)
    if intent.delete and not intent.fail and failure is None and not job.spec.suspend:
        patch.status["lastFailureTime"] = _rfc3339(now)
        kopf.warn(body, reason="WorkerFailed", message=f"deleted failed {intent.delete}")
    for index in intent.create:
        manifest = worker_pod(job, name, namespace, index, INIT_IMAGE)
        kopf.adopt(manifest, owner=body)
        if kube.create(manifest):
            log.info(
                "job %s/%s: created worker pod %s", namespace, name, manifest["metadata"]["name"]
            )
    if intent.replaced:
        restarts += len(intent.replaced)
        kopf.info(
            body,
            reason="WorkerReplaced",
            message=f"replaced worker(s) {intent.replaced} in the planned domain "
            f"({restarts}/{job.spec.failure_policy.max_restarts} replacements)",
        )
    elif intent.create and not created_before:
        kopf.info(
            body,
            reason="WorkersCreated",
            message=f"created {len(intent.create)} gated worker pods; the gang placer plans them",
        )
    if intent.fail and failure is None:
        failure = intent.fail
        kopf.warn(body, reason="JobFailed", message=failure)
    return failure, restarts


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def on_job_change(*, body: kopf.Body, patch: kopf.Patch, **kwargs: Any) -> None:
    """Reconcile at once when a job appears, changes, or the operator starts."""
    reconcile(body, patch, kwargs["workers"])


@kopf.timer(GROUP, VERSION, PLURAL, interval=RECONCILE_SECONDS, initial_delay=RECONCILE_SECONDS)
def on_tick(*, body: kopf.Body, patch: kopf.Patch, **kwargs: Any) -> None:
    """Reconcile every few seconds: pods and placement change without the job changing."""
    reconcile(body, patch, kwargs["workers"])
