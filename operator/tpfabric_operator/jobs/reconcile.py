"""The reconcile of one TensorParallelJob: read it, decide, carry the intent out, patch status.

Every kopf handler of a job (:mod:`tpfabric_operator.handlers`) and the waker (:mod:`.wakeups`)
run the same idempotent :func:`reconcile`: read the job, its worker pods and kept failed pods
(from the pod cache, :mod:`.pod_cache`, a list+watch in its own thread) and its Service (a kopf
index; never a list per call), take Kueue's verdict (:mod:`.kueue.sync`) and the degraded nodes
under it (:mod:`.degraded_links`), ask :func:`.decide.decide` what to do, do it
(:func:`.apply_intent.apply_intent`), and patch the operator-owned status once
(:func:`.status_patch.patch_status`, :func:`.job_status.job_status`). Names are deterministic,
so a restarted operator finds its pods instead of making a second set. Owner references let
the garbage collector remove pods and the Service when the job goes.

Between ticks, a change of a job's workers that its status shows at once (a worker failed,
finished or went away, the last one became ready) runs the job's reconcile right away, outside
kopf (:func:`reconcile_woken`): the same function on the job's latest body from a kopf index,
with the status patch applied here instead of by kopf.

One reconcile at a time per job: the timer skips a job whose reconcile is running, and a
reconcile never acts on a body older than the status it patched last (kopf applies the patch
after the handler returns; acting on the older body would charge one incident twice).

What a reconcile remembers between calls is the :class:`.operator_state.OperatorState` every
function here takes first; none keeps a module global.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

import kopf
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from tpfabric_core.api import TensorParallelJob
from tpfabric_core.api.placement import placement_of_status
from tpfabric_core.fabric_description import pydantic_error_path
from tpfabric_core.timestamps import parse_rfc3339, rfc3339
from tpfabric_operator import leadership
from tpfabric_operator.jobs.apply_intent import apply_intent, node_offers
from tpfabric_operator.jobs.born_released import placement_state
from tpfabric_operator.jobs.children import worker_pod, worker_rdma
from tpfabric_operator.jobs.decide import decide, honour_problem
from tpfabric_operator.jobs.degraded_links import degraded_links
from tpfabric_operator.jobs.job_state import Intent, Memory, WorkerPod
from tpfabric_operator.jobs.kueue.admission import QUEUE_NAME_REQUIRED
from tpfabric_operator.jobs.kueue.sync import KueueView
from tpfabric_operator.jobs.kueue.sync import sync as kueue_sync
from tpfabric_operator.jobs.metrics import DEGRADED_MOVES
from tpfabric_operator.jobs.obstacles import not_owned_message, stuck_message, stuck_terminating
from tpfabric_operator.jobs.operator_state import OperatorState
from tpfabric_operator.jobs.pod_cache import JobKey, worker_of
from tpfabric_operator.jobs.status_patch import patch_status
from tpfabric_operator.settings import FABRIC_PROFILE, INIT_IMAGE, RDMA_RESOURCE

__all__ = ["JobPods", "reconcile", "reconcile_every_job", "reconcile_woken"]

log = logging.getLogger("tpfabric.operator")


def _invalid_spec(state: OperatorState, body: kopf.Body, patch: kopf.Patch, message: str) -> None:
    """Say that the spec is invalid: condition ``InvalidSpec`` True and a Warning Event.

    Not terminal: the CRD refuses at admission what the models refuse, so an invalid spec comes
    only past an older CRD, often as an edit of a running job. The job keeps its phase and its
    pods, nothing is created, deleted or charged, and the condition turns False once the spec
    is valid again (:func:`.job_status.job_status`).
    """
    status = body.get("status") or {}
    generation = body.meta.get("generation")
    conditions = [dict(c) for c in status.get("conditions") or []]
    shown = next((c for c in conditions if c.get("type") == "InvalidSpec"), {})
    held = shown.get("status") == "True"
    if held and shown.get("message") == message and shown.get("observedGeneration") == generation:
        return  # already said, for this generation: no PATCH, no Event every tick
    condition = {
        "type": "InvalidSpec",
        "status": "True",
        "reason": "ValidationFailed",
        "message": message,
        "lastTransitionTime": shown["lastTransitionTime"] if held else rfc3339(state.now()),
        "observedGeneration": generation,
    }
    patch.status["conditions"] = [c for c in conditions if c is not shown] + [condition]
    state.warn(body, "InvalidSpec", message)


def reconcile(
    state: OperatorState,
    body: kopf.Body,
    patch: kopf.Patch,
    indexes: Mapping[str, Any],
    apply: Callable[[kopf.Body, kopf.Patch], None] | None = None,
) -> bool:
    """Bring the job's children and status to what :func:`.decide.decide` says; idempotent.

    ``apply`` writes the patch (a woken reconcile; kopf applies it after its handlers return).
    Returns False when it did not run: another reconcile of the job is running, the status it
    patched last is not back yet, or the pods are not listed yet.
    """
    uid = str(body.meta["uid"])
    version = str(body.meta.get("resourceVersion") or "")
    if body.meta.get("deletionTimestamp") or not leadership.leading():
        return True  # a follower acts on nothing (:mod:`.leadership`)
    if not state.pods.synced.is_set():
        return False  # never act on an empty view of the pods: a second set would be created
    if not state.serial.enter(uid, version, body.get("status") or {}):
        return False
    written = False
    try:
        _reconcile(state, body, patch, indexes)
        if not leadership.leading():
            patch.pop("status", None)  # the lease was lost meanwhile: the new leader writes it
        if apply is not None and patch:
            apply(body, patch)  # an error: nothing written
        written = bool(patch)
    finally:
        # kopf writes its handlers' patch after they return, after an error too
        landed = written if apply is not None else bool(patch)
        state.serial.leave(uid, version, dict(patch.status) if landed else None)
    return True


def _apply_status(state: OperatorState, body: kopf.Body, patch: kopf.Patch) -> None:
    """Write a woken reconcile's patch as kopf writes a tick's (the reconcile only ever patches
    the job's status). Not guarded by the body's resourceVersion: the body is kopf's view, the
    one every tick acts on, which lags the API server in a burst; a guarded write was refused
    (409) 411 times in a 100-job burst and left the jobs' status 18 s behind their pods at the
    median. The stale-body rule of :class:`.operator_state.Serial` is what keeps a reconcile
    from acting twice on one state, here as for the ticks."""
    meta = body.meta
    state.kube.patch_job_status(meta["namespace"], meta["name"], patch.status)


def reconcile_woken(state: OperatorState, job: JobKey) -> bool:
    """Reconcile ``job`` now, outside kopf: its workers changed (see :mod:`.wakeups`).

    Returns False when it must be tried again (see :func:`reconcile`); True when it ran or has
    nothing to act on (no kopf handler ran yet, the job is gone or not indexed yet: its own
    handlers cover it).
    """
    if state.kopf_state is None:
        return True
    indexes, context = state.kopf_state
    store = indexes["job_objects"].get(job)
    body = next(iter(store), None) if store is not None else None
    if body is None:
        return True
    if state.plan_waits.unseen(str(body.meta.get("uid")), placement_state(body.get("status"))):
        return False  # woken by the plan, which the index has not stored yet: try again
    try:
        return bool(
            context.copy().run(
                reconcile,
                state,
                body,
                kopf.Patch(),
                indexes,
                functools.partial(_apply_status, state),
            )
        )
    except ApiException as err:
        if err.status == 404:  # deleted meanwhile
            return True
        raise


def reconcile_every_job(state: OperatorState) -> None:
    """Wake the reconcile of every job kopf has shown (this replica has just begun to lead)."""
    if state.kopf_state is not None:
        for key in list(state.kopf_state[0]["job_objects"]):
            state.waker.wake(key)


def _memory(status: Mapping[str, Any], replanning: bool) -> Memory:
    phase = status.get("phase")
    failed = next(
        (
            c
            for c in status.get("conditions") or []
            if c.get("type") == "Failed" and c.get("status") == "True"
        ),
        None,
    )
    if failed is not None:
        # an older operator failed a job for an invalid spec; that is no longer terminal
        phase = None if failed.get("reason") == "InvalidSpec" else "Failed"
    return Memory(
        phase=str(phase) if phase else None,
        created_before=bool(status.get("workersCreated")),
        restarts=int(status.get("restarts") or 0),
        attempt=int(status.get("attempt") or 0),
        restarting=frozenset(int(i) for i in status.get("restartingWorkers") or []),
        succeeded=frozenset(int(i) for i in status.get("succeededWorkers") or []),
        last_failure=parse_rfc3339(status.get("lastFailureTime")),
        start_time=parse_rfc3339(status.get("startTime")),
        completion_time=parse_rfc3339(status.get("completionTime")),
        replanning=replanning,
    )


class JobPods:
    """A job's worker pods by owner: its own, an older job's of the same name (``stale``), and
    those no job owns (``foreign``: never adopted, never deleted; :mod:`.obstacles`)."""

    def __init__(self, uid: str, workers: list[tuple[str, WorkerPod]]) -> None:
        self.owned: list[WorkerPod] = []
        self.stale: list[WorkerPod] = []
        self.foreign: list[WorkerPod] = []
        for owner, pod in workers:
            if pod.index >= 0:
                mine = self.owned if owner == uid else self.stale if owner else self.foreign
                mine.append(pod)


def _listed_workers(state: OperatorState, namespace: str, name: str) -> list[tuple[str, WorkerPod]]:
    """Return (owner uid, worker) of the job's pods as the API server lists them now."""
    workers = []
    for found in state.kube.list_job_pods(namespace, name):
        meta = found["metadata"]
        labels = meta.get("labels") or {}
        spec, status = found.get("spec") or {}, found.get("status") or {}
        workers.append(worker_of(meta["name"], labels, meta, spec, status))
    return workers


def _reconcile(
    state: OperatorState, body: kopf.Body, patch: kopf.Patch, indexes: Mapping[str, Any]
) -> None:
    namespace, name = body.meta["namespace"], body.meta["name"]
    uid = body.meta["uid"]
    status = dict(body.get("status") or {})
    try:
        job = TensorParallelJob.model_validate(dict(body))
    except ValidationError as err:
        first = err.errors()[0]
        where = pydantic_error_path(tuple(first["loc"]))
        _invalid_spec(
            state,
            body,
            patch,
            f"{where}: {first['msg']}; fix the spec (meanwhile the job keeps its pods and phase, "
            "and nothing is created, restarted or charged)",
        )
        return
    pods_now = JobPods(uid, state.pods.workers((namespace, name)))
    placement = placement_of_status(status)
    replanning = placement.replanning
    memory = _memory(status, replanning)
    terminal = memory.phase in ("Succeeded", "Failed")
    expected = set(range(job.spec.workers)) - memory.succeeded - memory.restarting
    owned = pods_now.owned
    if (
        memory.created_before
        and not replanning
        and not terminal
        and not job.spec.suspend
        and (
            not expected <= {p.index for p in owned if not p.deleting}
            or any(p.deleting or p.phase == "Failed" for p in owned)
        )
    ):
        # a loss is about to be charged: confirm it with the API server. The index may lag
        # behind the status (a busy operator), and the placer writes Replanning before it
        # deletes released pods, so the pod watch may be ahead of the job's. The placement read
        # here is the one this reconcile acts on, also when it creates workers: kopf's older
        # view could show the plan the placer has just dropped, and workers would be born
        # released onto it
        seen = state.kube.read_placement(namespace, name, uid)
        if seen is None:
            return  # the job is gone
        placement, replanning = seen, seen.replanning
        memory = _memory(status, replanning)
        pods_now = JobPods(uid, _listed_workers(state, namespace, name))
    owned = pods_now.owned
    now = state.now()
    job = (
        kueue := _kueue(state, body, status, job, owned, memory=memory, now=now, indexes=indexes)
    ).job
    problem = None
    if not terminal and not job.spec.suspend:
        problem = honour_problem(
            job, [o.resources for o in node_offers(indexes).values()], RDMA_RESOURCE
        )
    links = degraded_links(job, owned, indexes.get("degraded_nodes", {}), status, placement)
    intent = decide(
        job,
        owned,
        memory,
        now=now,
        stale=pods_now.stale,
        foreign=pods_now.foreign,
        move=links.move,
    )
    if links.words:
        state.warn(body, "DegradedLink", links.words)
    if problem and not memory.created_before and not intent.succeed:
        # a job that never ran and that no node can run fails at once; a running one is only
        # warned (node pools scale, and what runs proves nodes for it existed)
        intent = Intent(attempt=memory.attempt, fail=problem, fail_reason="CannotBeHonoured")
        intent.delete = [p.name for p in owned if p.active]
    elif problem:
        state.warn(body, "CannotBeHonoured", problem)
    # the workers' RDMA devices, worked out only when workers are made (a pass over the nodes)
    rdma = worker_rdma(job, node_offers(indexes).values(), RDMA_RESOURCE) if intent.create else None
    stuck = stuck_terminating(owned + pods_now.stale, now)
    stuck_words = stuck_message(stuck, now) if stuck else ""
    if stuck_words:
        state.warn(body, "WorkerStuckTerminating", stuck_words)
    create_error = apply_intent(
        state,
        body,
        job,
        intent,
        memory=memory,
        owned=owned,
        placement=placement,
        indexes=indexes,
        now=now,
        pod_set=kueue.pod_set,
        rdma=rdma,
    )
    if pods_now.foreign and not create_error:
        create_error = not_owned_message(pods_now.foreign, name, namespace)
        state.warn(body, "PodNotOwned", create_error)
    patch_status(
        state,
        body,
        patch,
        job,
        intent,
        memory=memory,
        owned=owned,
        placement=placement,
        create_error=create_error,
        admission=kueue.admission,
        now=now,
        straggler=links.words,
        stuck=stuck_words,
        moved_off=links.moved_off_after(intent.failure.reason if intent.failure else None),
        rdma=rdma,
    )
    if intent.failure is not None and intent.failure.reason == "DegradedLink" and not intent.fail:
        DEGRADED_MOVES.labels(job.spec.topology.on_degraded_link).inc()
        # a move is written down first and its workers stopped by the next reconcile
        # (decide._move): run it once this patch is back, not at the next tick
        state.waker.wake((namespace, name))


def _kueue(
    state: OperatorState,
    body: kopf.Body,
    status: dict[str, Any],
    job: TensorParallelJob,
    owned: list[WorkerPod],
    *,
    memory: Memory,
    now: float,
    indexes: Mapping[str, Any],
) -> KueueView:
    """Return the job as Kueue's verdict wants it (:mod:`.kueue.sync`); a job that must name a
    queue is told so (Event ``QueueNameRequired``, beside its ``Admitted`` condition)."""
    namespace, name = body.meta["namespace"], body.meta["name"]
    view = kueue_sync(
        state.kube,
        dict(body.meta),
        status,
        job,
        owned,
        memory=memory,
        worker=lambda: worker_pod(
            job,
            name,
            namespace,
            0,
            INIT_IMAGE,
            fabric_profile=FABRIC_PROFILE,
            rdma=worker_rdma(job, node_offers(indexes).values(), RDMA_RESOURCE),
        ),
        now=now,
    )
    if view.admission is not None and view.admission.reason == QUEUE_NAME_REQUIRED:
        state.warn(body, QUEUE_NAME_REQUIRED, view.admission.message)
    return view
