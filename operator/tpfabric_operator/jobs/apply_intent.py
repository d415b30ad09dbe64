"""Carry one reconcile's intent out: delete and keep pods, make the Service, create the workers.

:func:`apply_intent` does what :func:`.decide.decide` asked, in this order: delete the job after
its TTL, stop pods, keep failed pods as evidence (and drop older evidence), make the headless
Service, then create the workers the intent names, with what Kueue's admission adds to them.
Creation goes through :func:`create_pods`: ``CREATE_CONCURRENCY`` pods at a time over every job
on the state's shared pool, stopped at the first refusal and backed off after it
(:mod:`.create_backoff`), each worker born released onto its gang's plan when one exists
(:mod:`.born_released`). It writes no status: it returns why a creation failed, and trims the
intent to what was done, for :mod:`.reconcile` to persist.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import kopf
from kubernetes.client.rest import ApiException

from tpfabric_core.api import TensorParallelJob
from tpfabric_core.api.placement import CREATE_FAILED, StoredPlacement
from tpfabric_core.gang_shortfall import ranges
from tpfabric_core.rdma_default import NodeOffer, RdmaDecision
from tpfabric_operator.jobs.born_released import create_gang
from tpfabric_operator.jobs.children import headless_service, worker_pod
from tpfabric_operator.jobs.create_backoff import partial_gang
from tpfabric_operator.jobs.job_state import Intent, Memory, WorkerPod
from tpfabric_operator.jobs.kube import KubeAdapter
from tpfabric_operator.jobs.kueue.podsets import PodSetInfo
from tpfabric_operator.jobs.operator_state import OperatorState
from tpfabric_operator.jobs.pod_cache import owner_uid
from tpfabric_operator.settings import CREATE_CONCURRENCY, FABRIC_PROFILE, INIT_IMAGE

__all__ = ["apply_intent", "create_pods", "ensure_service", "node_offers"]

log = logging.getLogger("tpfabric.operator")


def node_offers(indexes: Mapping[str, Any]) -> dict[str, NodeOffer]:
    """Return what every node offers, by name, from the operator's node index."""
    return {o.name: o for store in indexes.get("node_resources", {}).values() for o in store}


def _worker_manifests(
    body: kopf.Body,
    job: TensorParallelJob,
    intent: Intent,
    admitted: PodSetInfo | None,
    rdma: RdmaDecision | None = None,
) -> list[dict[str, Any]]:
    """Return the manifests of the workers ``intent`` creates, with what Kueue's admission adds
    to them, owned by the job; ``rdma``: their RDMA devices (:func:`.children.worker_rdma`)."""
    namespace, name = body.meta["namespace"], body.meta["name"]
    manifests = []
    for index in intent.create:
        manifest = worker_pod(
            job,
            name,
            namespace,
            index,
            INIT_IMAGE,
            attempt=intent.attempt,
            fabric_profile=FABRIC_PROFILE,
            rdma=rdma,
        )
        if admitted is not None:
            manifest = admitted.apply(manifest)
        kopf.adopt(manifest, owner=body)
        manifests.append(manifest)
    return manifests


def apply_intent(  # noqa: PLR0912 - carries out one intent, step by step
    state: OperatorState,
    body: kopf.Body,
    job: TensorParallelJob,
    intent: Intent,
    *,
    memory: Memory,
    owned: list[WorkerPod],
    placement: StoredPlacement,
    indexes: Mapping[str, Any],
    now: float,
    pod_set: Callable[[], PodSetInfo] | None = None,
    rdma: RdmaDecision | None = None,
) -> str | None:
    """Carry out ``intent``; return why creating a child failed, if it did.

    ``pod_set``: what a Kueue admission adds to every worker (:mod:`.kueue.podsets`); ``rdma``:
    the workers' RDMA devices (:func:`.children.worker_rdma`).

    ``placement``: the job's ``status.placement`` as this reconcile read it (the only view of it
    that the creation uses, see :func:`_reconcile`).
    """
    namespace, name, uid = body.meta["namespace"], body.meta["name"], body.meta["uid"]
    kube = state.kube
    error: str | None = None
    if intent.delete_job:
        kube.delete_job(namespace, name)
        log.info("job %s/%s: deleted after ttlSecondsAfterFinished", namespace, name)
        return None
    uids = {pod.name: pod.uid for pod in owned}
    for pod_name in intent.delete:
        try:
            if kube.delete_pod(namespace, pod_name, uids.get(pod_name, "")):
                log.info("job %s/%s: deleted pod %s", namespace, name, pod_name)
        except ApiException as err:
            error = f"deleting pod {pod_name}: {err.status} {err.reason}"
    kept = state.pods.failed((namespace, name))
    for pod_name in intent.keep:
        pod = next((p for p in owned if p.name == pod_name), None)
        try:
            kube.keep_failed_pod(namespace, pod_name, name)
            attempt = pod.attempt if pod else memory.attempt
            kept.append((uid, pod_name, attempt, pod.uid if pod else ""))
        except ApiException as err:
            error = f"keeping failed pod {pod_name}: {err.status} {err.reason}"
    _delete_stale_kept(kube, namespace, uid, kept)
    if intent.fail or intent.succeed or job.spec.suspend:
        state.create_backoff.done(uid)
        return error
    if intent.create or memory.created_before:
        services = indexes["job_services"].get((namespace, name), [])
        error = ensure_service(state, body, services) or error
    admitted = pod_set() if pod_set is not None and intent.create else None
    if admitted is not None and admitted.conflict:
        intent.create = []
        words = f"Kueue's admission cannot be applied to the workers: {admitted.conflict}"
        state.warn(body, "AdmissionConflict", words)
        return words
    manifests = _worker_manifests(body, job, intent, admitted, rdma)
    streak = state.create_backoff.streak(uid)
    if manifests and streak is not None and streak.waiting(now):
        # the last round was refused: nothing is posted before the next one is due
        intent.create = []
        if streak.persisting(now):
            _give_back(state, body, job, intent, memory=memory, owned=owned)
            streak = state.create_backoff.streak(uid) or streak
        return streak.message()
    whole = len(manifests) == job.spec.workers  # none of the gang's workers exists yet
    outcomes = create_pods(
        state,
        manifests,
        uid,
        placement,
        whole_gang=whole,
        slow_start=streak is not None,
        nodes=node_offers(indexes) if manifests and placement.present else None,  # rails to tell
    )
    intent.create = [index for index, (ok, _) in zip(intent.create, outcomes, strict=True) if ok]
    if intent.create:
        log.info("job %s/%s: created worker pod(s) %s", namespace, name, ranges(intent.create))
    refusal = next((why for _, why in outcomes if why), None)
    if refusal is not None:
        error = state.create_backoff.refused(uid, refusal, now).message()
        state.warn(body, CREATE_FAILED, refusal)
    elif manifests and all(ok for ok, _ in outcomes):
        state.create_backoff.done(uid)
    return error


def _delete_stale_kept(
    kube: KubeAdapter, namespace: str, uid: str, kept: list[tuple[str, str, int, str]]
) -> None:
    """Delete the kept failed pods of ``kept`` (owner uid, name, attempt, pod uid) but the
    evidence of the job's last failed attempt: older attempts' and old jobs' go; one that no job
    owns is the user's (kept by --cascade=orphan) and stays too."""
    newest = max((a for o, _, a, _ in kept if o == uid), default=None)
    for owner, pod_name, attempt, pod_uid in kept:
        if (owner and owner != uid) or (owner == uid and newest is not None and attempt < newest):
            kube.delete_pod(namespace, pod_name, pod_uid)


def _give_back(
    state: OperatorState,
    body: kopf.Body,
    job: TensorParallelJob,
    intent: Intent,
    *,
    memory: Memory,
    owned: list[WorkerPod],
) -> None:
    """Delete the pods of a gang whose creation is refused for long (``create_backoff``),
    uncharged: workers of a gang restart go back to ``restartingWorkers``."""
    namespace, name, uid = body.meta["namespace"], body.meta["name"], str(body.meta["uid"])
    gang = partial_gang(job, owned, memory)
    deleted = []
    for pod in gang:
        try:
            state.kube.delete_pod(namespace, pod.name, pod.uid)
        except ApiException as err:
            log.warning("job %s/%s: giving back pod %s: %s", namespace, name, pod.name, err)
            continue
        deleted.append(pod)
    if not deleted:
        return
    intent.delete += [p.name for p in deleted]
    if memory.created_before:
        intent.restarting |= {p.index for p in deleted}
    names = sorted(p.name for p in deleted)
    state.create_backoff.gave_back(uid, names)
    state.warn(
        body,
        "PartialGangDeleted",
        f"the gang could not be created whole: its pod(s) {', '.join(names)} were deleted, "
        "uncharged, so that their quota goes back; it is created again when the backoff ends",
    )


def ensure_service(state: OperatorState, body: kopf.Body, services: list[str]) -> str | None:
    """Create the job's headless Service unless the index (``services``: owners' uids of the
    Service of that name) or this operator's memory has it; return why it failed, if it did.

    Called on every reconcile of a job whose pods exist: the index showing the Service is what
    ends this operator's memory of creating it, so that a later deletion is repaired at the next
    reconcile (not once the memory runs out).
    """
    namespace, name, uid = body.meta["namespace"], body.meta["name"], body.meta["uid"]
    kube = state.kube
    if state.services_made.pending(uid, shown=uid in services):
        return None
    for owner in services:
        if owner not in ("", uid):
            kube.delete_service(namespace, name)  # an older job's, not collected yet
    if uid in services:
        return None
    service = headless_service(name, namespace)
    kopf.adopt(service, owner=body)
    try:
        if kube.create(service):
            state.services_made.note(uid)
    except ApiException as err:
        return f"creating Service {service['metadata']['name']}: {_api_words(err)}"
    return None


def create_pods(
    state: OperatorState,
    manifests: list[dict[str, Any]],
    uid: str,
    placement: StoredPlacement | Mapping[str, Any] | None = None,
    *,
    whole_gang: bool = True,
    slow_start: bool = False,
    nodes: Mapping[str, NodeOffer] | None = None,
) -> list[tuple[bool, str | None]]:
    """Return, per manifest in order, (the pod is ours now, the error that stopped it).

    A gang's pods are created together (``CREATE_CONCURRENCY`` at a time over every job): one at
    a time, a 256-worker gang spends seconds in round trips before the placer can plan it. A 409
    is ours only when the existing pod belongs to this job (an earlier reconcile). The first
    refusal ends the round: no pod is posted after it (:mod:`.create_backoff`); with
    ``slow_start`` (the job's last round was refused) the pods go out in batches of 1, 2, 4, ...
    Which workers go out when, and which are born released onto the gang's plan
    (``placement``: the job's as the reconcile saw it), is :func:`.born_released.create_gang`'s.
    """
    kube = state.kube

    def create(manifest: dict[str, Any]) -> tuple[bool, str | None]:
        metadata = manifest["metadata"]
        try:
            if kube.create(manifest):
                log.debug("job %s: created worker pod %s", metadata["namespace"], metadata["name"])
                return True, None
        except ApiException as err:
            return False, f"creating pod {metadata['name']}: {_api_words(err)}"
        # 409: ours from an earlier reconcile, or not ours (an older job's, or nobody's)
        found = kube.read_pod(metadata["namespace"], metadata["name"])
        return found is not None and owner_uid(found["metadata"]) == uid, None

    return create_gang(
        kube,
        manifests,
        uid,
        placement,
        waits=state.plan_waits,
        create=create,
        post=lambda post_one, rest: _post_until_refused(
            state.creator(), post_one, rest, slow_start=slow_start
        ),
        whole_gang=whole_gang,
        batch=CREATE_CONCURRENCY,
        plan_wait_seconds=state.plan_wait_seconds,
        nodes=nodes,
    )


def _post_until_refused(
    pool: concurrent.futures.Executor,
    create: Callable[[dict[str, Any]], tuple[bool, str | None]],
    manifests: list[dict[str, Any]],
    *,
    slow_start: bool,
) -> list[tuple[bool, str | None]]:
    """Return ``create``'s outcome per manifest, in order; none is posted once one was refused
    (only creations already in flight finish).

    All at once on the shared pool, or with ``slow_start`` in batches of 1, 2, 4, ..., each
    once the one before was all accepted (the Job controller's slow start): a refusal that
    persists then costs one POST.
    """
    refused = threading.Event()

    def guarded(manifest: dict[str, Any]) -> tuple[bool, str | None]:
        if refused.is_set():
            return False, None
        outcome = create(manifest)
        if outcome[1] is not None:
            refused.set()
        return outcome

    outcomes: list[tuple[bool, str | None]] = []
    size = 1 if slow_start else max(1, len(manifests))
    while len(outcomes) < len(manifests):
        outcomes += pool.map(guarded, manifests[len(outcomes) : len(outcomes) + size])
        size *= 2
    return outcomes


def _api_words(err: ApiException) -> str:
    """Return the API server's own message of an error (quota, PodSecurity, validation)."""
    import json  # noqa: PLC0415 - only on the error path

    try:
        message = str(json.loads(err.body or "{}").get("message") or "")
    except ValueError:
        message = ""
    return f"{err.status} {err.reason}: {message}" if message else f"{err.status} {err.reason}"
