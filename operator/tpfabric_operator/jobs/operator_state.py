"""What one operator process keeps between reconciles, in one object passed through kopf's memo.

:class:`OperatorState` holds the API adapter, the pod cache, the waker of reconciles outside
kopf, the per-job memories (the reconcile running, the status last patched, creation refusals,
small gangs waiting for their plan, Services made, warnings posted) and the pool every job's pod
creations share. kopf's startup handler makes it (:func:`.handlers.configure`), or ``__main__``
does and hands it to ``kopf.run(memo=...)``, since the Lease's election needs it first; every
handler finds it as ``memo.state``, and every reconcile function takes it as an argument. A test
makes one with its own adapter, pod cache and clock.

Everything here lives in this process's memory only: a restarted operator (or a new leader)
begins with none of it, and must never need it to be correct (names are deterministic, status is
the job's memory). It never talks to the API server itself.
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

from tpfabric_operator.jobs.born_released import PlanWaits
from tpfabric_operator.jobs.create_backoff import CreateBackoff
from tpfabric_operator.jobs.kube import KubeAdapter
from tpfabric_operator.jobs.pod_cache import JobKey, PodCache
from tpfabric_operator.jobs.wakeups import Waker
from tpfabric_operator.settings import (
    CREATE_CONCURRENCY,
    PLAN_DEFER_SECONDS,
    PLAN_WAIT_SECONDS,
    RECONCILE_SECONDS,
)

__all__ = [
    "SERVICE_MEMORY_SECONDS",
    "STALE_BODY_SECONDS",
    "WARNING_INTERVAL_SECONDS",
    "OperatorState",
    "Serial",
    "ServicesMade",
]

log = logging.getLogger("tpfabric.operator")

#: the same warning (reason and message) for one job is posted at most this often
WARNING_INTERVAL_SECONDS = 300.0
#: how long a reconcile waits for the watch to deliver the status it patched
STALE_BODY_SECONDS = 30.0
#: how long a Service created here counts as there while the index does not show it yet
SERVICE_MEMORY_SECONDS = 30.0
#: kopf's indexes that reconciles run outside kopf read
KOPF_INDEXES = ("node_resources", "job_services", "degraded_nodes", "job_objects")


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


class Serial:
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
        """Return whether the job's reconcile may run now on this body (then it runs)."""
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


class ServicesMade:
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
        """Note that ``uid``'s Service was created now."""
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


class OperatorState:
    """The operator process's state between reconciles (see the module's docstring).

    ``woken`` is the reconcile the waker runs for a job whose workers changed
    (:func:`.reconcile.reconcile_woken`); ``kube`` (by ``make_kube``) and ``pods`` are made on
    first use (after kopf has logged in) unless given; ``clock`` is the wall clock of every
    reconcile.
    """

    def __init__(
        self,
        woken: Callable[[OperatorState, JobKey], bool],
        *,
        kube: KubeAdapter | None = None,
        make_kube: Callable[[], KubeAdapter] = KubeAdapter,
        pods: PodCache | None = None,
        plan_waits: PlanWaits | None = None,
        clock: Callable[[], float] = time.time,
        plan_wait_seconds: float = PLAN_WAIT_SECONDS,
    ) -> None:
        self._kube = kube
        self._make_kube = make_kube
        self._pods = pods
        self.clock = clock
        #: how long a big gang's reconcile waits for its plan after its first worker
        self.plan_wait_seconds = plan_wait_seconds
        self.serial = Serial()
        self.services_made = ServicesMade()
        #: jobs whose last creation round the API server refused (see :mod:`.create_backoff`)
        self.create_backoff = CreateBackoff()
        #: small gangs whose first worker waits for the plan (see :mod:`.born_released`)
        self.plan_waits = plan_waits if plan_waits is not None else PlanWaits(PLAN_DEFER_SECONDS)
        #: a woken reconcile refused because kopf's view of the job is older than our last patch
        #: (it lags in a burst) is retried until that view may be stale no longer, and a tick has
        #: run after it
        self.waker: Waker[JobKey] = Waker(
            lambda key: woken(self, key), give_up=STALE_BODY_SECONDS + RECONCILE_SECONDS
        )
        #: kopf's indexes (live objects) and context (its Event poster), kept from its first
        #: handler call, for reconciles run outside kopf
        self.kopf_state: tuple[dict[str, Any], contextvars.Context] | None = None
        self._lock = threading.Lock()
        self._warned: dict[tuple[str, str, str], float] = {}
        self._creating: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def kube(self) -> KubeAdapter:
        """Return the process's API adapter (made on first use, after kopf has logged in)."""
        with self._lock:
            if self._kube is None:
                self._kube = self._make_kube()
            return self._kube

    @property
    def pods(self) -> PodCache:
        """Return the process's view of its worker pods (made on first use)."""
        if self._pods is None:
            core = self.kube.core
            with self._lock:
                if self._pods is None:
                    self._pods = PodCache(core, on_change=self.waker.wake)
        return self._pods

    def now(self) -> float:
        """Return the wall-clock time a reconcile acts at."""
        return self.clock()

    def start(self, sync_seconds: float) -> None:
        """Start the waker and the pod cache; wait up to ``sync_seconds`` for the first list."""
        if not self.waker.is_alive():
            self.waker.start()
        cache = self.pods
        if not cache.is_alive():
            cache.start()
        if not cache.synced.wait(sync_seconds):
            log.warning("the worker pods are not listed yet; jobs wait for them before any change")

    def stop(self) -> None:
        """Stop the waker and the pod cache (runs already started finish)."""
        self.waker.stop()
        if self._pods is not None:
            self._pods.stop()

    def remember_kopf(self, kwargs: Mapping[str, Any]) -> None:
        """Keep kopf's indexes (live objects) and context for reconciles run outside kopf."""
        with self._lock:
            if self.kopf_state is None:
                indexes = {k: kwargs[k] for k in KOPF_INDEXES if k in kwargs}
                self.kopf_state = (indexes, contextvars.copy_context())

    def warn(self, body: kopf.Body, reason: str, message: str) -> None:
        """Post a Warning Event, but the same one for the same job at most every 5 minutes."""
        key = (str(body.meta.get("uid")), reason, message)
        now = time.monotonic()
        with self._lock:
            if now - self._warned.get(key, -WARNING_INTERVAL_SECONDS) < WARNING_INTERVAL_SECONDS:
                return
            if len(self._warned) > 10_000:
                self._warned.clear()
            self._warned[key] = now
        kopf.warn(body, reason=reason, message=message)

    def creator(self) -> concurrent.futures.ThreadPoolExecutor:
        """Return the pool every reconcile's pod creations share (``CREATE_CONCURRENCY`` at once
        over all jobs: a burst of 100 jobs must not open 100 x 16 connections)."""
        with self._lock:
            if self._creating is None:
                self._creating = concurrent.futures.ThreadPoolExecutor(
                    CREATE_CONCURRENCY, thread_name_prefix="create"
                )
            return self._creating
