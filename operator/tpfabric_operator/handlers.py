"""kopf handlers of TensorParallelJob: create, resume, update and a short reconcile timer.

Every handler runs the same idempotent ``reconcile``: read the job, its worker pods and kept
failed pods (from the pod cache, :mod:`.pod_cache`, a list+watch in its own thread) and its
Service (a kopf index; never a list per call), ask ``lifecycle.decide``
what to do, do it through the adapter, and patch the operator-owned status once. Names are
deterministic, so a restarted operator finds its pods instead of making a second set. Owner
references let the garbage collector remove pods and the Service when the job goes. kopf puts its
finalizer on every job because of the timer (kopf's timers and daemons always require one): while
the operator is down, a deleted job waits for it (docs/install.md: "Deleting jobs without the
operator").

Between ticks, a change of a job's workers that its status shows at once (a worker failed,
finished or went away, the last one became ready) runs the job's reconcile right away, outside
kopf (:mod:`.wakeups`): the same function on the job's latest body from a kopf index, with the
status patch applied here instead of by kopf.

One reconcile at a time per job: the timer skips a job whose reconcile is running, and a
reconcile never acts on a body older than the status it patched last (kopf applies the patch
after the handler returns; acting on the older body would charge one incident twice).
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import kopf
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from tpfabric_core.api import GROUP, PLURAL, VERSION, TensorParallelJob
from tpfabric_core.fabric_description import pydantic_error_path
from tpfabric_core.list_watch import WATCH_REQUEST_TIMEOUT, WATCH_TIMEOUT_S
from tpfabric_core.timestamps import parse_rfc3339, rfc3339
from tpfabric_operator import fabric_health, leadership
from tpfabric_operator.children import (
    ATTEMPT_LABEL,
    JOB_LABEL,
    born_released,
    headless_service,
    worker_pod,
)
from tpfabric_operator.create_backoff import CreateBackoff, partial_gang
from tpfabric_operator.kube import KubeAdapter, extended_resources
from tpfabric_operator.kueue_podsets import PodSetInfo
from tpfabric_operator.kueue_sync import KueueView, release_on_delete
from tpfabric_operator.kueue_sync import sync as kueue_sync
from tpfabric_operator.lifecycle import (
    Intent,
    Memory,
    Outcome,
    WorkerPod,
    decide,
    honour_problem,
    job_status,
)
from tpfabric_operator.obstacles import not_owned_message, stuck_message, stuck_terminating
from tpfabric_operator.plan_waits import PLAN_ANSWERS, PlanWaits
from tpfabric_operator.pod_cache import JobKey, PodCache, owner_uid, worker_of
from tpfabric_operator.queueing import Admission
from tpfabric_operator.settings import (
    CREATE_CONCURRENCY,
    HANDLER_THREADS,
    INIT_IMAGE,
    PLAN_DEFER_SECONDS,
    PLAN_WAIT_SECONDS,
    RECONCILE_SECONDS,
)
from tpfabric_operator.wakeups import Waker

log = logging.getLogger("tpfabric.operator")

# the knobs (TPFABRIC_*), read in one place: see .settings
#: the same warning (reason and message) for one job is posted at most this often
WARNING_INTERVAL_SECONDS = 300.0
PLAN_POLL_SECONDS = 0.05
#: how long a reconcile waits for the watch to deliver the status it patched
STALE_BODY_SECONDS = 30.0
#: how long a Service created here counts as there while the index does not show it yet
SERVICE_MEMORY_SECONDS = 30.0
#: how long start-up waits for the first list of worker pods (reconciles wait for it too)
POD_SYNC_SECONDS = 60.0
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
    settings.watching.server_timeout = WATCH_TIMEOUT_S
    # a watch silent for a minute past the server's own end is a dead connection: reconnect
    settings.watching.connect_timeout, settings.watching.client_timeout = WATCH_REQUEST_TIMEOUT
    # kopf removes a deleted job's finalizer only once its timer has stopped. A tick that is
    # running (or waiting for a thread) when the job is deleted would by default be looked at
    # again after 60 s, and the job, its pods and its namespace would hang that long; wait a
    # moment for the tick to end, then look again every second
    settings.background.instant_exit_timeout = 0.5
    settings.background.cancellation_polling = 1
    # Server-side filter: only the jobs' Services reach the operator (client-side handler
    # filters alone would make it parse every Service event of a shared cluster). Worker pods
    # come through the pod cache, filtered by their attempt label in the same way.
    settings.watching.label_selectors["v1", "services"] = JOB_LABEL
    # kopf's executor runs the synchronous reconciles (default: CPUs + 4 threads); more threads
    # are opt-in (TPFABRIC_HANDLER_THREADS) until they are proven under load
    if HANDLER_THREADS:
        settings.execution.max_workers = HANDLER_THREADS
    if not _waker.is_alive():
        _waker.start()
    cache = pods()
    if not cache.is_alive():
        cache.start()
    if not cache.synced.wait(POD_SYNC_SECONDS):
        log.warning("the worker pods are not listed yet; jobs wait for them before any change")


_pod_cache: PodCache | None = None


def pods() -> PodCache:
    """Return the process's view of its worker pods (made on first use)."""
    global _pod_cache  # noqa: PLW0603 - one view per operator process
    if _pod_cache is None:
        _pod_cache = PodCache(adapter().core, on_change=_waker.wake)
    return _pod_cache


@kopf.on.cleanup()
def stop_background(**_: Any) -> None:
    """Stop the pod cache and the waker with the operator, then release the Lease."""
    _waker.stop()
    if _pod_cache is not None:
        _pod_cache.stop()
    leadership.stop()


@kopf.index(GROUP, VERSION, PLURAL)
def job_objects(
    *, namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], kopf.Body]:
    """Index every job's latest object by (namespace, name): what a woken reconcile acts on.

    A small gang whose first worker waits for its plan (:mod:`.plan_waits`) has its reconcile
    woken here when the placer's answer shows.
    """
    if _placement_state(body) in PLAN_ANSWERS and _plan_waits.answered(str(body.meta.get("uid"))):
        _waker.wake((namespace or "", name))
    return {(namespace or "", name): body}


@kopf.index("nodes")
def node_resources(*, name: str, status: kopf.Status, **_: Any) -> dict[str, dict[str, int]]:
    """Index every node's allocatable extended resources by name: the input of the check that
    some node can ever run a worker (read from the watch kopf keeps on nodes anyway, never by
    listing 1,000 nodes in a burst of reconciles)."""
    return {name: extended_resources(status.get("allocatable") or {})}


@kopf.index("services", labels={JOB_LABEL: kopf.PRESENT})
def job_services(
    *, namespace: str | None, labels: kopf.Labels, meta: kopf.Meta, **_: Any
) -> dict[tuple[str, str], str]:
    """Index the jobs' headless Services by (namespace, job name): the owner's uid."""
    return {(namespace or "", str(labels[JOB_LABEL])): owner_uid(meta)}


def _now() -> float:
    return time.time()


_warned: dict[tuple[str, str, str], float] = {}
_warned_lock = threading.Lock()


def _warn(body: kopf.Body, reason: str, message: str) -> None:
    """Post a Warning Event, but the same one for the same job at most every 5 minutes."""
    key = (str(body.meta.get("uid")), reason, message)
    now = time.monotonic()
    with _warned_lock:
        if now - _warned.get(key, -WARNING_INTERVAL_SECONDS) < WARNING_INTERVAL_SECONDS:
            return
        if len(_warned) > 10_000:
            _warned.clear()
        _warned[key] = now
    kopf.warn(body, reason=reason, message=message)


def _invalid_spec(body: kopf.Body, patch: kopf.Patch, message: str) -> None:
    """Say that the spec is invalid: condition ``InvalidSpec`` True and a Warning Event.

    Not terminal: the CRD refuses at admission what the models refuse, so an invalid spec comes
    only past an older CRD, often as an edit of a running job. The job keeps its phase and its
    pods, nothing is created, deleted or charged, and the condition turns False once the spec
    is valid again (``lifecycle.job_status``).
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
        "lastTransitionTime": shown["lastTransitionTime"] if held else rfc3339(_now()),
        "observedGeneration": generation,
    }
    patch.status["conditions"] = [c for c in conditions if c is not shown] + [condition]
    _warn(body, "InvalidSpec", message)


def _shows(stored: Any, written: Any) -> bool:
    """Return whether ``stored`` shows the merge patch ``written`` (RFC 7386, as kopf and
    :meth:`KubeAdapter.patch_job_status` write a status): a None removes its key, an object is
    merged key by key (keys it leaves out keep what they had), anything else replaces."""
    if not isinstance(written, Mapping):
        return bool(stored == written)
    if not isinstance(stored, Mapping):
        return False
    return all(
        stored.get(key) is None if value is None else _shows(stored.get(key), value)
        for key, value in written.items()
    )


class _Serial:
    """One reconcile at a time per job, never on a body older than our last status patch.

    A body is older than the patch when it is the very version the patch was computed from, or
    when its status does not show what the patch wrote: kopf's view of a job lagged 25 s behind
    the API server in a burst of 100 jobs (its handler threads busy creating pods), so a tick
    could meet a body older than the one the last patch was computed from, and write the same
    status again (or charge one incident twice). Past ``STALE_BODY_SECONDS`` the body is trusted
    anyway: a patch that never landed must not hold the job forever.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[str] = set()
        # uid -> (resourceVersion patched from, when, the status it wrote)
        self._patched: dict[str, tuple[str, float, dict[str, Any]]] = {}

    def enter(self, uid: str, version: str, status: Mapping[str, Any]) -> bool:
        with self._lock:
            if uid in self._running:
                return False
            seen = self._patched.get(uid)
            if (
                seen is not None
                and time.monotonic() - seen[1] < STALE_BODY_SECONDS
                and (seen[0] == version or not _shows(status, seen[2]))
            ):
                return False  # our last patch has not come back through the watch yet
            self._running.add(uid)
            return True

    def leave(self, uid: str, version: str, written: Mapping[str, Any] | None) -> None:
        """End the reconcile; ``written``: the status it patched (None or empty: nothing)."""
        with self._lock:
            self._running.discard(uid)
            if written:
                self._patched[uid] = (version, time.monotonic(), dict(written))
            else:
                self._patched.pop(uid, None)


_serial = _Serial()


def reconcile(
    body: kopf.Body,
    patch: kopf.Patch,
    indexes: Mapping[str, Any],
    apply: Callable[[kopf.Body, kopf.Patch], None] | None = None,
) -> bool:
    """Bring the job's children and status to what ``lifecycle`` says; idempotent.

    ``apply`` writes the patch (a woken reconcile; kopf applies it after its handlers return).
    Returns False when it did not run: another reconcile of the job is running, the status it
    patched last is not back yet, or the pods are not listed yet.
    """
    uid = str(body.meta["uid"])
    version = str(body.meta.get("resourceVersion") or "")
    if body.meta.get("deletionTimestamp") or not leadership.leading():
        return True  # a follower acts on nothing (:mod:`.leadership`)
    if not pods().synced.is_set():
        return False  # never act on an empty view of the pods: a second set would be created
    if not _serial.enter(uid, version, body.get("status") or {}):
        return False
    written = False
    try:
        _reconcile(body, patch, indexes)
        if not leadership.leading():
            patch.pop("status", None)  # the lease was lost meanwhile: the new leader writes it
        if apply is not None and patch:
            apply(body, patch)  # an error: nothing written
        written = bool(patch)
    finally:
        # kopf writes its handlers' patch after they return, after an error too
        landed = written if apply is not None else bool(patch)
        _serial.leave(uid, version, dict(patch.status) if landed else None)
    return True


#: kopf's indexes (live objects) and context (its Event poster), kept from its first handler call
_kopf_state: tuple[dict[str, Any], contextvars.Context] | None = None
_INDEXES = ("node_resources", "job_services", "degraded_nodes", "job_objects")


def _remember_kopf(kwargs: Mapping[str, Any]) -> None:
    """Keep kopf's indexes (live objects) and context for reconciles run outside kopf."""
    global _kopf_state  # noqa: PLW0603 - one per operator process
    if _kopf_state is None:
        indexes = {k: kwargs[k] for k in _INDEXES if k in kwargs}
        _kopf_state = (indexes, contextvars.copy_context())


def _apply_status(body: kopf.Body, patch: kopf.Patch) -> None:
    """Write a woken reconcile's patch as kopf writes a tick's (the reconcile only ever patches
    the job's status). Not guarded by the body's resourceVersion: the body is kopf's view, the
    one every tick acts on, which lags the API server in a burst; a guarded write was refused
    (409) 411 times in a 100-job burst and left the jobs' status 18 s behind their pods at the
    median. The stale-body rule of :class:`_Serial` is what keeps a reconcile from acting twice
    on one state, here as for the ticks."""
    meta = body.meta
    adapter().patch_job_status(meta["namespace"], meta["name"], patch.status)


def reconcile_woken(job: JobKey) -> bool:
    """Reconcile ``job`` now, outside kopf: its workers changed (see :mod:`.wakeups`).

    Returns False when it must be tried again (see :func:`reconcile`); True when it ran or has
    nothing to act on (no kopf handler ran yet, the job is gone or not indexed yet: its own
    handlers cover it).
    """
    if _kopf_state is None:
        return True
    indexes, context = _kopf_state
    store = indexes["job_objects"].get(job)
    body = next(iter(store), None) if store is not None else None
    if body is None:
        return True
    if _plan_waits.heard(str(body.meta.get("uid"))) and _placement_state(body) not in PLAN_ANSWERS:
        return False  # woken by the plan, which the index has not stored yet: try again
    try:
        return bool(context.copy().run(reconcile, body, kopf.Patch(), indexes, _apply_status))
    except ApiException as err:
        if err.status == 404:  # deleted meanwhile
            return True
        raise


def reconcile_every_job() -> None:
    """Wake the reconcile of every job kopf has shown (this replica has just begun to lead)."""
    if _kopf_state is not None:
        for key in list(_kopf_state[0]["job_objects"]):
            _waker.wake(key)


#: a woken reconcile refused because kopf's view of the job is older than our last patch (it lags
#: in a burst) is retried until that view may be stale no longer, and a tick has run after it
_waker: Waker[JobKey] = Waker(reconcile_woken, give_up=STALE_BODY_SECONDS + RECONCILE_SECONDS)
#: jobs whose last creation round the API server refused (see :mod:`.create_backoff`)
_create_backoff = CreateBackoff()
#: small gangs whose first worker waits for the plan (see :func:`_create_pods`)
_plan_waits = PlanWaits(PLAN_DEFER_SECONDS)


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


class _JobPods:
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


def _listed_workers(namespace: str, name: str) -> list[tuple[str, WorkerPod]]:
    """Return (owner uid, worker) of the job's pods as the API server lists them now."""
    workers = []
    for found in adapter().list_job_pods(namespace, name):
        meta = found["metadata"]
        labels = meta.get("labels") or {}
        spec, status = found.get("spec") or {}, found.get("status") or {}
        workers.append(worker_of(meta["name"], labels, meta, spec, status))
    return workers


def _reconcile(body: kopf.Body, patch: kopf.Patch, indexes: Mapping[str, Any]) -> None:
    namespace, name = body.meta["namespace"], body.meta["name"]
    uid = body.meta["uid"]
    status = dict(body.get("status") or {})
    try:
        job = TensorParallelJob.model_validate(dict(body))
    except ValidationError as err:
        first = err.errors()[0]
        where = pydantic_error_path(tuple(first["loc"]))
        _invalid_spec(
            body,
            patch,
            f"{where}: {first['msg']}; fix the spec (meanwhile the job keeps its pods and phase, "
            "and nothing is created, restarted or charged)",
        )
        return
    pods_now = _JobPods(uid, pods().workers((namespace, name)))
    placement = dict(status.get("placement") or {})
    replanning = placement.get("state") == "Replanning"
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
        seen = adapter().read_placement(namespace, name, uid)
        if seen is None:
            return  # the job is gone
        placement, replanning = seen, seen.get("state") == "Replanning"
        memory = _memory(status, replanning)
        pods_now = _JobPods(uid, _listed_workers(namespace, name))
    owned = pods_now.owned
    now = _now()
    job = (kueue := _kueue(body, status, job, owned, memory=memory, now=now)).job
    problem = None
    if not terminal and not job.spec.suspend:
        nodes = [value for store in indexes["node_resources"].values() for value in store]
        problem = honour_problem(job, nodes)
    on_bad_nodes = fabric_health.ranks_on_degraded_nodes(owned, indexes.get("degraded_nodes", {}))
    move = fabric_health.workers_to_move(job, on_bad_nodes)
    intent = decide(
        job,
        owned,
        memory,
        now=now,
        stale=pods_now.stale,
        foreign=pods_now.foreign,
        move=move,
    )
    straggler = ""
    if on_bad_nodes and job.spec.topology.on_degraded_link != "ignore":
        straggler = fabric_health.straggler_message(on_bad_nodes)
        _warn(body, "DegradedLink", straggler)
    if problem and not memory.created_before and not intent.succeed:
        # a job that never ran and that no node can run fails at once; a running one is only
        # warned (node pools scale, and what runs proves nodes for it existed)
        intent = Intent(attempt=memory.attempt, fail=problem, fail_reason="CannotBeHonoured")
        intent.delete = [p.name for p in owned if p.active]
    elif problem:
        _warn(body, "CannotBeHonoured", problem)
    stuck = stuck_terminating(owned + pods_now.stale, now)
    stuck_words = stuck_message(stuck, now) if stuck else ""
    if stuck_words:
        _warn(body, "WorkerStuckTerminating", stuck_words)
    create_error = _apply(
        body,
        job,
        intent,
        memory=memory,
        owned=owned,
        placement=placement,
        indexes=indexes,
        now=now,
        pod_set=kueue.pod_set,
    )
    if pods_now.foreign and not create_error:
        create_error = not_owned_message(pods_now.foreign, name, namespace)
        _warn(body, "PodNotOwned", create_error)
    _write_status(
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
        straggler=straggler,
        stuck=stuck_words,
    )


def _kueue(
    body: kopf.Body,
    status: dict[str, Any],
    job: TensorParallelJob,
    owned: list[WorkerPod],
    *,
    memory: Memory,
    now: float,
) -> KueueView:
    """Return the job as Kueue's verdict wants it (:mod:`.kueue_sync`)."""
    namespace, name = body.meta["namespace"], body.meta["name"]
    return kueue_sync(
        adapter(),
        dict(body.meta),
        status,
        job,
        owned,
        memory=memory,
        worker=lambda: worker_pod(job, name, namespace, 0, INIT_IMAGE),
        now=now,
    )


def _worker_manifests(
    body: kopf.Body, job: TensorParallelJob, intent: Intent, admitted: PodSetInfo | None
) -> list[dict[str, Any]]:
    """Return the manifests of the workers ``intent`` creates, with what Kueue's admission adds
    to them, owned by the job."""
    namespace, name = body.meta["namespace"], body.meta["name"]
    manifests = []
    for index in intent.create:
        manifest = worker_pod(job, name, namespace, index, INIT_IMAGE, attempt=intent.attempt)
        if admitted is not None:
            manifest = admitted.apply(manifest)
        kopf.adopt(manifest, owner=body)
        manifests.append(manifest)
    return manifests


def _apply(  # noqa: PLR0912 - carries out one intent, step by step
    body: kopf.Body,
    job: TensorParallelJob,
    intent: Intent,
    *,
    memory: Memory,
    owned: list[WorkerPod],
    placement: Mapping[str, Any],
    indexes: Mapping[str, Any],
    now: float,
    pod_set: Callable[[], PodSetInfo] | None = None,
) -> str | None:
    """Carry out ``intent``; return why creating a child failed, if it did.

    ``pod_set``: what a Kueue admission adds to every worker (:mod:`.kueue_podsets`).

    ``placement``: the job's ``status.placement`` as this reconcile read it (the only view of it
    that the creation uses, see :func:`_reconcile`).
    """
    namespace, name, uid = body.meta["namespace"], body.meta["name"], body.meta["uid"]
    kube = adapter()
    error: str | None = None
    if intent.delete_job:
        kube.delete_job(namespace, name)
        log.info("job %s/%s: deleted after ttlSecondsAfterFinished", namespace, name)
        return None
    for pod_name in intent.delete:
        try:
            if kube.delete_pod(namespace, pod_name):
                log.info("job %s/%s: deleted pod %s", namespace, name, pod_name)
        except ApiException as err:
            error = f"deleting pod {pod_name}: {err.status} {err.reason}"
    kept = pods().failed((namespace, name))
    for pod_name in intent.keep:
        pod = next((p for p in owned if p.name == pod_name), None)
        try:
            kube.keep_failed_pod(namespace, pod_name, name)
            kept.append((uid, pod_name, pod.attempt if pod else memory.attempt))
        except ApiException as err:
            error = f"keeping failed pod {pod_name}: {err.status} {err.reason}"
    newest = max((a for o, _, a in kept if o == uid), default=None)
    for owner, pod_name, attempt in kept:
        # evidence of the last failed attempt stays; older attempts' (and old jobs') go; one
        # that no job owns is the user's (kept by --cascade=orphan) and stays too
        if (owner and owner != uid) or (owner == uid and newest is not None and attempt < newest):
            kube.delete_pod(namespace, pod_name)
    if intent.fail or intent.succeed or job.spec.suspend:
        _create_backoff.done(uid)
        return error
    if intent.create or memory.created_before:
        services = indexes["job_services"].get((namespace, name), [])
        error = _ensure_service(kube, body, services) or error
    admitted = pod_set() if pod_set is not None and intent.create else None
    if admitted is not None and admitted.conflict:
        intent.create = []
        words = f"Kueue's admission cannot be applied to the workers: {admitted.conflict}"
        _warn(body, "AdmissionConflict", words)
        return words
    manifests = _worker_manifests(body, job, intent, admitted)
    streak = _create_backoff.streak(uid)
    if manifests and streak is not None and streak.waiting(now):
        # the last round was refused: nothing is posted before the next one is due
        intent.create = []
        if streak.persisting(now):
            _give_back(body, job, intent, memory=memory, owned=owned)
            streak = _create_backoff.streak(uid) or streak
        return streak.message()
    whole = len(manifests) == job.spec.workers  # none of the gang's workers exists yet
    outcomes = _create_pods(
        kube, manifests, uid, placement, whole_gang=whole, slow_start=streak is not None
    )
    intent.create = [index for index, (ok, _) in zip(intent.create, outcomes, strict=True) if ok]
    if intent.create:
        log.info("job %s/%s: created worker pod(s) %s", namespace, name, _ranges(intent.create))
    refusal = next((why for _, why in outcomes if why), None)
    if refusal is not None:
        error = _create_backoff.refused(uid, refusal, now).message()
        _warn(body, "CreateFailed", refusal)
    elif manifests and all(ok for ok, _ in outcomes):
        _create_backoff.done(uid)
    return error


def _give_back(
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
            adapter().delete_pod(namespace, pod.name)
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
    _create_backoff.gave_back(uid, names)
    _warn(
        body,
        "PartialGangDeleted",
        f"the gang could not be created whole: its pod(s) {', '.join(names)} were deleted, "
        "uncharged, so that their quota goes back; it is created again when the backoff ends",
    )


def _ensure_service(kube: KubeAdapter, body: kopf.Body, services: list[str]) -> str | None:
    """Create the job's headless Service unless the index (``services``: owners' uids of the
    Service of that name) or this operator's memory has it; return why it failed, if it did.

    Called on every reconcile of a job whose pods exist: the index showing the Service is what
    ends this operator's memory of creating it, so that a later deletion is repaired at the next
    reconcile (not once the memory runs out).
    """
    namespace, name, uid = body.meta["namespace"], body.meta["name"], body.meta["uid"]
    if _services_made.pending(uid, shown=uid in services):
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
            _services_made.note(uid)
    except ApiException as err:
        return f"creating Service {service['metadata']['name']}: {_api_words(err)}"
    return None


class _Made:
    """The Services this operator created that its index has not shown yet.

    The index of Services lags behind a busy API server: without this, the next reconcile of a
    job created a moment ago posted its Service again (a 409 for nearly every job of a burst)
    and, had the index still shown an older job's Service of the same name, would have deleted
    the new one. A Service is trusted for ``SERVICE_MEMORY_SECONDS``; one deleted meanwhile is
    then made again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: dict[str, float] = {}  # job uid -> monotonic time of the create

    def note(self, uid: str) -> None:
        with self._lock:
            self._made[uid] = time.monotonic()

    def pending(self, uid: str, *, shown: bool) -> bool:
        """Return True while ``uid``'s Service was created here and the index does not show it
        yet; forget it once the index does (or the memory ran out)."""
        with self._lock:
            made = self._made.get(uid)
            if made is None:
                return False
            if shown or time.monotonic() - made >= SERVICE_MEMORY_SECONDS:
                del self._made[uid]
                return False
            return True


_services_made = _Made()


def _placement_state(body: kopf.Body) -> Any:
    """Return the job's ``status.placement.state`` as ``body`` shows it (None: none)."""
    return ((body.get("status") or {}).get("placement") or {}).get("state")


def _planned_for(placement: Mapping[str, Any], attempt: str) -> bool:
    """Return whether ``placement`` is the placer's plan for the gang's ``attempt``."""
    return placement.get("state") == "Planned" and str(placement.get("attempt")) == attempt


def _wait_for_plan(
    kube: KubeAdapter, namespace: str, name: str, uid: str, attempt: str
) -> Mapping[str, Any] | None:
    """Return the placer's plan of ``attempt`` once the API server has it, or None when none
    comes within PLAN_WAIT_SECONDS (read from the API server: kopf delivers no event of a job
    to the index while a handler of that job runs, and this runs inside one)."""
    deadline = time.monotonic() + PLAN_WAIT_SECONDS
    while True:
        placement = kube.read_placement(namespace, name, uid)
        if placement is None:
            return None  # the job is gone
        if _planned_for(placement, attempt):
            return placement
        if placement.get("state") in ("Waiting", "Invalid") or time.monotonic() >= deadline:
            return None  # no plan soon: the rest is created gated, released when planned
        time.sleep(PLAN_POLL_SECONDS)


def _create_pods(
    kube: KubeAdapter,
    manifests: list[dict[str, Any]],
    uid: str,
    placement: Mapping[str, Any] | None = None,
    *,
    whole_gang: bool = True,
    slow_start: bool = False,
) -> list[tuple[bool, str | None]]:
    """Return, per manifest in order, (the pod is ours now, the error that stopped it).

    A gang's pods are created together (``CREATE_CONCURRENCY`` at a time over every job): one at
    a time, a 256-worker gang spends seconds in round trips before the placer can plan it. A 409
    is ours only when the existing pod belongs to this job (an earlier reconcile). The first
    refusal ends the round: no pod is posted after it (:mod:`.create_backoff`); with
    ``slow_start`` (the job's last round was refused) the pods go out in batches of 1, 2, 4, ...

    The placer plans a gang once its first worker exists. A worker created under a plan of its
    attempt (``placement``: the job's as the reconcile saw it) is born released
    (:func:`born_released`): no release write for it. So a gang with no word from the placer yet
    makes its first worker alone:

    - a gang larger than one batch of creations waits up to PLAN_WAIT_SECONDS here for the
      plan, then creates the rest (released, or gated without a plan);
    - a smaller gang does not hold the reconcile (kopf has few threads for a burst of them): its
      other workers are left out (not ours, no error) and created by the reconcile the plan
      wakes (:mod:`.plan_waits`). The first reconcile after PLAN_DEFER_SECONDS asks the API
      server for the plan once (kopf's view of the job lags in a burst) and creates them
      released onto it, or gated without one. Only a gang of which no worker exists yet
      (``whole_gang``) begins such a wait: the rest of a gang whose creation was cut short (a
      refused worker, an operator restart) is created at once, not one worker at a time.

    A first worker that is not made (refused, or its name taken by a pod that is not ours) ends
    the round: the rest is not posted.
    """
    if not manifests:
        return []
    meta = manifests[0]["metadata"]
    labels = meta.get("labels") or {}
    namespace, name = meta["namespace"], str(labels.get(JOB_LABEL, ""))
    attempt = str(labels.get(ATTEMPT_LABEL, ""))
    plan = placement
    state = (plan or {}).get("state")

    def create(manifest: dict[str, Any]) -> tuple[bool, str | None]:
        metadata = manifest["metadata"]
        released = born_released(manifest, plan)
        if released is not None:
            manifest = released
        try:
            if kube.create(manifest):
                log.debug("job %s: created worker pod %s", metadata["namespace"], metadata["name"])
                return True, None
        except ApiException as err:
            return False, f"creating pod {metadata['name']}: {_api_words(err)}"
        # 409: ours from an earlier reconcile, or not ours (an older job's, or nobody's)
        found = kube.read_pod(metadata["namespace"], metadata["name"])
        return found is not None and owner_uid(found["metadata"]) == uid, None

    if len(manifests) <= 1:
        return [create(m) for m in manifests]
    key = (uid, attempt)
    # a small gang waits only for a first plan: under a plan (of this attempt, or of an earlier
    # one whose ranks the placer moves as replacements), a wait or a re-plan it is made at once
    if not state and len(manifests) <= CREATE_CONCURRENCY:
        phase = _plan_waits.phase(key)
        later = [(False, None)] * (len(manifests) - 1)
        if phase == "new" and whole_gang:
            first = create(manifests[0])
            if first[0]:
                _plan_waits.begin(key)
                log.info("job %s/%s: first worker made; the rest follow its plan", namespace, name)
            return [first, *later]  # made: the rest follows its plan; else the round ends
        if phase != "new":
            # past the wait: ask the API server once (kopf's view of the job lags in a burst)
            seen = None if phase == "waiting" else kube.read_placement(namespace, name, uid)
            if seen is None:  # still waiting, or the job is gone
                return [(False, None), *later]
            if _planned_for(seen, attempt):
                plan = seen
            else:
                log.info("job %s/%s: no plan yet; the rest is created gated", namespace, name)
    _plan_waits.end(key)
    first_done: list[tuple[bool, str | None]] = []
    if len(manifests) > CREATE_CONCURRENCY and state != "Planned":
        first_done = [create(manifests[0])]
        if not first_done[0][0]:  # refused (or the name is taken): the round ends
            return first_done + [(False, None)] * (len(manifests) - 1)
        plan = _wait_for_plan(kube, namespace, name, uid, attempt)
        if plan is not None:
            log.info("job %s/%s: planned; the other workers are created released", namespace, name)
        manifests = manifests[1:]
    return first_done + _post_until_refused(create, manifests, slow_start=slow_start)


def _post_until_refused(
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
        outcomes += _creator().map(guarded, manifests[len(outcomes) : len(outcomes) + size])
        size *= 2
    return outcomes


_creating: concurrent.futures.ThreadPoolExecutor | None = None
_creating_lock = threading.Lock()


def _creator() -> concurrent.futures.ThreadPoolExecutor:
    """Return the pool every reconcile's pod creations share (``CREATE_CONCURRENCY`` at once
    over all jobs: a burst of 100 jobs must not open 100 x 16 connections)."""
    global _creating  # noqa: PLW0603 - one pool per operator process
    with _creating_lock:
        if _creating is None:
            _creating = concurrent.futures.ThreadPoolExecutor(
                CREATE_CONCURRENCY, thread_name_prefix="create"
            )
        return _creating


def _ranges(indexes: list[int]) -> str:
    """Return worker indexes as short ranges: ``0-15`` or ``2,5-7``."""
    runs: list[list[int]] = []
    for index in sorted(indexes):
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _api_words(err: ApiException) -> str:
    """Return the API server's own message of an error (quota, PodSecurity, validation)."""
    import json  # noqa: PLC0415 - only on the error path

    try:
        message = str(json.loads(err.body or "{}").get("message") or "")
    except ValueError:
        message = ""
    return f"{err.status} {err.reason}: {message}" if message else f"{err.status} {err.reason}"


def _write_status(
    body: kopf.Body,
    patch: kopf.Patch,
    job: TensorParallelJob,
    intent: Intent,
    *,
    memory: Memory,
    owned: list[WorkerPod],
    placement: Mapping[str, Any],
    create_error: str | None,
    admission: Admission | None,
    now: float,
    straggler: str = "",
    stuck: str = "",
) -> None:
    status = dict(body.get("status") or {})
    spec = job.spec
    wanted: dict[str, Any] = {}
    terminal = memory.phase if memory.phase in ("Succeeded", "Failed") else None
    conditions = {str(c.get("type")): dict(c) for c in status.get("conditions") or []}
    shown: dict[str, Any] = conditions.get(terminal or "", {})
    terminal_reason = str(shown.get("reason") or "")
    terminal_message = str(shown.get("message") or "")
    restarts = memory.restarts + intent.charged
    if intent.failure is not None:
        failure = intent.failure
        wanted["lastFailureTime"] = rfc3339(now)
        wanted["lastFailure"] = {
            "worker": failure.worker,
            "reason": failure.reason,
            "message": failure.message,
            "exitCode": failure.exit_code,
            "pod": failure.pod,
            "time": rfc3339(now),
        }
        if not intent.fail:
            _warn(
                body,
                "WorkerFailed",
                f"worker {failure.worker} {failure.reason}: {failure.message}; restarting "
                + ("the gang" if spec.failure_policy.restart_strategy == "RecreateGang" else "it")
                + f" ({restarts}/{spec.failure_policy.max_restarts} restarts charged)",
            )
    if not terminal and intent.fail:
        terminal, terminal_reason, terminal_message = "Failed", intent.fail_reason, intent.fail
        _warn(body, "JobFailed", intent.fail)
    elif not terminal and intent.succeed:
        terminal, terminal_reason = "Succeeded", "SuccessPolicyMet"
        terminal_message = intent.succeed
        kopf.info(body, reason="JobSucceeded", message=intent.succeed)
    if terminal and not status.get("completionTime"):
        wanted["completionTime"] = rfc3339(now)
    restarting = set(intent.restarting) - set(intent.create)
    if intent.create and memory.restarting & set(intent.create):
        kopf.info(
            body,
            reason="WorkersRestarted",
            message=f"created attempt {intent.attempt} of worker(s) {sorted(intent.create)}",
        )
    kept = set(intent.keep) | set(intent.delete)
    alive = [p for p in owned if p.name not in kept]
    present = {p.index for p in alive if not p.deleting} | set(intent.create)
    if spec.suspend:
        wanted["workersCreated"] = False  # the placer drops the plan of a suspended job
        wanted["startTime"] = None  # the deadline counts running time, as a Job's does
    elif not terminal and present | intent.succeeded >= set(range(spec.workers)):
        wanted["workersCreated"] = True
        if intent.create and not memory.created_before and not memory.replanning:
            # once, when the gang is whole (a small gang's first worker comes a moment earlier)
            kopf.info(
                body,
                reason="WorkersCreated",
                message=f"the gang's {spec.workers} worker pods are created",
            )
    if intent.create and not status.get("startTime") and not spec.suspend:
        wanted["startTime"] = rfc3339(now)
    wanted["attempt"] = intent.attempt
    wanted["restartingWorkers"] = sorted(restarting) if not terminal else []
    wanted["succeededWorkers"] = sorted(intent.succeeded)
    outcome = Outcome(
        restarts=restarts,
        restarting=frozenset(restarting) if not terminal else frozenset(),
        terminal=terminal,  # type: ignore[arg-type]  # narrowed to the two terminal phases
        terminal_reason=terminal_reason,
        terminal_message=terminal_message,
        create_error=create_error,
        degraded_links=straggler,
        stuck=stuck,
        created_before=memory.created_before,
        admitted=(
            None
            if admission is None
            else (admission.admitted and not admission.evicted, admission.reason, admission.message)
        ),
    )
    wanted |= job_status(
        job,
        alive,
        placement=dict(placement),
        previous_conditions=list(status.get("conditions") or []),
        outcome=outcome,
        generation=int(body.meta.get("generation") or 0),
        now=now,
    )
    for key, value in wanted.items():  # an unchanged job costs no API call
        if status.get(key) != value and not (value is None and key not in status):
            patch.status[key] = value


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def on_job_change(*, body: kopf.Body, patch: kopf.Patch, **kwargs: Any) -> None:
    """Reconcile at once when a job appears, changes, or the operator starts."""
    _remember_kopf(kwargs)
    reconcile(body, patch, kwargs)


@kopf.on.delete(GROUP, VERSION, PLURAL)
def on_job_delete(*, body: kopf.Body, **_: Any) -> None:
    """Keep a deleted queued job's Kueue quota until its workers are gone (``kueue_sync``)."""
    if not leadership.leading():
        raise kopf.TemporaryError("not leading: the leader releases the job", delay=5)
    meta = dict(body.meta)
    namespace, name = meta["namespace"], meta["name"]
    owned = _JobPods(str(meta["uid"]), pods().workers((namespace, name))).owned
    release_on_delete(adapter(), meta, dict(body.get("status") or {}), owned)


@kopf.timer(GROUP, VERSION, PLURAL, interval=RECONCILE_SECONDS, initial_delay=RECONCILE_SECONDS)
def on_tick(*, body: kopf.Body, patch: kopf.Patch, **kwargs: Any) -> None:
    """Reconcile every few seconds: pods and placement change without the job changing."""
    _remember_kopf(kwargs)
    reconcile(body, patch, kwargs)
