"""Every kopf handler of the operator, and nothing else registers one: the wiring only.

kopf calls, in the order they are registered here:

- the nodes' health: the index of the nodes labelled degraded, which both halves read, and the
  suspect rail switches (:mod:`.node_health`);
- the gang half: its start and stop, the watch of the pods the gang webhook admitted unwired
  (:mod:`.gangs.problem_pods`: an Event on each), and the events that mark a gang for a sync (a Gang
  record's change, a degraded node's); the sync itself is :func:`.gangs.sync.sync_gang`, run by
  the gang half's own threads;
- the TensorParallelJob half: create, resume, update, delete, a short reconcile timer, and the
  indexes the reconcile reads; what a handler does is :func:`.jobs.reconcile.reconcile` (or
  :func:`.jobs.kueue.quota.release_on_delete`).

Each half's state between calls is one object in kopf's memo: the jobs' is an
:class:`.jobs.operator_state.OperatorState` (``memo.state``), made by the startup handler or by
``__main__`` (which hands it to ``kopf.run(memo=...)``: the Lease's election needs it first); the
gangs' is a :class:`.gangs.state.GangState` (``memo.gangs``), made by its startup handler. kopf
gives each object a shallow copy of the operator's memo, so all handlers see the same two.
kopf puts its finalizer on every job because of the timer (kopf's timers and daemons always
require one): while the operator is down, a deleted job waits for it (docs/install.md:
"Deleting jobs without the operator"). Gang records have no timer, so no finalizer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import kopf

from tpfabric_core.api import GROUP, PLURAL, VERSION
from tpfabric_core.api.gang import GANG_PLURAL
from tpfabric_core.labels import HEALTH
from tpfabric_core.rail_ports import node_rails
from tpfabric_core.rdma_default import NodeOffer
from tpfabric_kube.list_watch import WATCH_REQUEST_TIMEOUT, WATCH_TIMEOUT_S
from tpfabric_operator import leadership, node_health
from tpfabric_operator.fabric_health import DegradedNode
from tpfabric_operator.gangs.kube import GangApi
from tpfabric_operator.gangs.problem_pods import ProblemPods
from tpfabric_operator.gangs.state import GangState
from tpfabric_operator.gangs.sync import sync_gang
from tpfabric_operator.jobs.born_released import placement_state
from tpfabric_operator.jobs.children import JOB_LABEL
from tpfabric_operator.jobs.kube import KubeAdapter, extended_resources
from tpfabric_operator.jobs.kueue.quota import release_on_delete
from tpfabric_operator.jobs.operator_state import OperatorState
from tpfabric_operator.jobs.pod_cache import owner_uid
from tpfabric_operator.jobs.reconcile import JobPods, reconcile, reconcile_woken
from tpfabric_operator.settings import (
    GANG_IDLE_SECONDS,
    GANG_SHORT_NOTICE_SECONDS,
    GANG_SYNC_SECONDS,
    HANDLER_THREADS,
    RECONCILE_SECONDS,
)

__all__ = ["adapter", "new_state"]

log = logging.getLogger("tpfabric.operator")

# the knobs (TPFABRIC_*), read in one place: see .settings
#: how long start-up waits for the first list of worker pods (reconciles wait for it too)
POD_SYNC_SECONDS = 60.0


#: the one API client of the process: the jobs' state (:func:`new_state`, made by ``__main__``
#: before kopf runs, or by :func:`configure`) and the gangs' (:func:`start_gang_pods`) share it,
#: so the process keeps one pool of connections.
_adapter: KubeAdapter | None = None
_adapter_lock = threading.Lock()


def adapter() -> KubeAdapter:
    """Return the process's API adapter (made on first use, after kopf has logged in)."""
    global _adapter  # noqa: PLW0603 - one client per operator process (see above)
    with _adapter_lock:
        if _adapter is None:
            _adapter = KubeAdapter()
        return _adapter


def new_state(**parts: Any) -> OperatorState:
    """Return a new operator state whose waker runs :func:`.reconcile.reconcile_woken`, on the
    process's API adapter unless ``parts`` (what :class:`.operator_state.OperatorState` takes
    beyond that) give one."""
    parts.setdefault("make_kube", adapter)
    return OperatorState(reconcile_woken, **parts)


def state_of(memo: kopf.Memo) -> OperatorState:
    """Return the operator's state from kopf's memo (put there by :func:`configure`)."""
    state: OperatorState = memo.state
    return state


@kopf.index("nodes", labels={HEALTH: "degraded"})
def degraded_nodes(**kwargs: Any) -> dict[str, DegradedNode]:
    """Index the nodes labelled ``topology.tpfabric.io/health=degraded`` by name: what both
    halves read of the nodes under their gangs (:func:`.node_health.degraded_nodes`)."""
    return node_health.degraded_nodes(**kwargs)


@kopf.on.event("nodes", labels={HEALTH: kopf.PRESENT})
def report_suspect_switches(**kwargs: Any) -> None:
    """Report the rail switches that became suspect, or stopped being, with this node's change."""
    index: kopf.Index[str, DegradedNode] = kwargs["degraded_nodes"]
    node_health.report_suspect_switches(index)


def gangs_of(memo: kopf.Memo) -> GangState | None:
    """Return the gang half's state from kopf's memo (None before :func:`start_gang_pods`)."""
    gangs: GangState | None = memo.get("gangs")
    return gangs


@kopf.on.startup()
def start_gang_pods(memo: kopf.Memo, **_: Any) -> None:
    """Start the gang pods' watch and the threads that sync their records."""
    if "gangs" not in memo:
        api = GangApi(adapter().core.api_client, sync_seconds=GANG_SYNC_SECONDS)
        memo.gangs = GangState(
            api,
            sync_gang,
            sync_seconds=GANG_SYNC_SECONDS,
            idle_seconds=GANG_IDLE_SECONDS,
            short_notice_seconds=GANG_SHORT_NOTICE_SECONDS,
        )
    memo.gangs.start()
    if "problem_pods" not in memo:  # every replica tells: an Event's name is fixed by its pod
        memo.problem_pods = ProblemPods(adapter().core)
        memo.problem_pods.start()


@kopf.on.cleanup()
def stop_gang_pods(memo: kopf.Memo, **_: Any) -> None:
    """Stop them with the operator."""
    if (gangs := gangs_of(memo)) is not None:
        gangs.stop()
    if (problems := memo.get("problem_pods")) is not None:
        problems.stop()


@kopf.on.event(GROUP, VERSION, GANG_PLURAL)
def on_gang_record(
    *,
    type: str | None,  # noqa: A002 - kopf's name for the watch event's type
    namespace: str | None,
    name: str,
    memo: kopf.Memo,
    body: Mapping[str, Any] | None = None,
    degraded_nodes: Mapping[str, Any] | None = None,
    **_: Any,
) -> None:
    """A record changed (the placer's plan, a deletion by hand): its gang is looked at again,
    and so is the gang it asks to be near (whose record names those placed near it)."""
    if (gangs := gangs_of(memo)) is not None:
        gangs.keep_index(degraded_nodes)
        gangs.on_record((namespace or "", name), body, deleted=type == "DELETED")


@kopf.on.event("nodes", labels={HEALTH: "degraded"})
def on_degraded_node(
    *, name: str, memo: kopf.Memo, degraded_nodes: Mapping[str, Any] | None = None, **_: Any
) -> None:
    """A node labelled degraded changed: every gang with a pod on it is looked at again."""
    if (gangs := gangs_of(memo)) is not None:
        gangs.keep_index(degraded_nodes)
        gangs.on_degraded_node(name)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Keep kopf's bookkeeping under our own annotation prefix; post Events at info level; make
    the operator's state (unless ``__main__`` gave one) and start its pod cache and waker."""
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
    if "state" not in memo:
        memo.state = new_state()
    state_of(memo).start(POD_SYNC_SECONDS)


@kopf.on.cleanup()
def stop_background(memo: kopf.Memo, **_: Any) -> None:
    """Stop the pod cache and the waker with the operator, then release the Lease."""
    if "state" in memo:
        state_of(memo).stop()
    leadership.stop()


@kopf.index(GROUP, VERSION, PLURAL)
def job_objects(
    *, namespace: str | None, name: str, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> dict[tuple[str, str], kopf.Body]:
    """Index every job's latest object by (namespace, name): what a woken reconcile acts on.

    A small gang whose first worker waits for its plan (:mod:`.born_released`) has its reconcile
    woken here when the placer's answer shows.
    """
    state = state_of(memo)
    if state.plan_waits.shown(str(body.meta.get("uid")), placement_state(body.get("status"))):
        state.waker.wake((namespace or "", name))
    return {(namespace or "", name): body}


@kopf.index("nodes")
def node_resources(
    *, name: str, labels: kopf.Labels, annotations: kopf.Annotations, status: kopf.Status, **_: Any
) -> dict[str, NodeOffer]:
    """Index what every node offers by name (its labels, its allocatable extended resources, its
    rails): the input of the check that some node can ever run a worker, of a worker's default
    RDMA devices and of the rails a worker born onto its plan is told (read from the watch kopf
    keeps on nodes anyway, never by listing 1,000 nodes in a burst of reconciles)."""
    rails = node_rails(dict(labels), dict(annotations))[0]
    resources = extended_resources(status.get("allocatable") or {})
    return {name: NodeOffer(name, dict(labels), resources, rails)}


@kopf.index("services", labels={JOB_LABEL: kopf.PRESENT})
def job_services(
    *, namespace: str | None, labels: kopf.Labels, meta: kopf.Meta, **_: Any
) -> dict[tuple[str, str], str]:
    """Index the jobs' headless Services by (namespace, job name): the owner's uid."""
    return {(namespace or "", str(labels[JOB_LABEL])): owner_uid(meta)}


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def on_job_change(*, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **kwargs: Any) -> None:
    """Reconcile at once when a job appears, changes, or the operator starts."""
    state = state_of(memo)
    state.remember_kopf(kwargs)
    reconcile(state, body, patch, kwargs)


@kopf.on.delete(GROUP, VERSION, PLURAL)
def on_job_delete(*, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Keep a deleted queued job's Kueue quota until its workers are gone
    (:func:`.jobs.kueue.quota.release_on_delete`)."""
    if not leadership.leading():
        raise kopf.TemporaryError("not leading: the leader releases the job", delay=5)
    meta = dict(body.meta)
    namespace, name = meta["namespace"], meta["name"]
    state = state_of(memo)
    owned = JobPods(str(meta["uid"]), state.pods.workers((namespace, name))).owned
    release_on_delete(state.kube, meta, dict(body.get("status") or {}), owned)


@kopf.timer(GROUP, VERSION, PLURAL, interval=RECONCILE_SECONDS, initial_delay=RECONCILE_SECONDS)
def on_tick(*, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **kwargs: Any) -> None:
    """Reconcile every few seconds: pods and placement change without the job changing."""
    state = state_of(memo)
    state.remember_kopf(kwargs)
    reconcile(state, body, patch, kwargs)
