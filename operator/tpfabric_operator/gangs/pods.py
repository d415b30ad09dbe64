"""The pods of gangs other controllers make, as the operator keeps them: one list+watch of every
pod labelled ``tpfabric.io/gang`` in a thread of its own, and the threads that bring a gang's
record in step when its pods change.

kopf delivered these pods' events on its event loop and each one cost a LIST of the gang's pods
in a handler thread; in a burst of 100 LeaderWorkerSet groups (800 pods, ``tpfabric bench
gangs``) the record timers took every handler thread, 31 groups never got a record, and nothing
looked at them again (a gang without a record has no timer). Here every change of a gang's pods
marks the gang dirty; :class:`GangSyncer`'s threads sync each dirty gang once however many of
its pods changed meanwhile, from the cached pods, at most once a second, and every ``every``
seconds each gang whose last sync did not find it settled (:meth:`GangSyncer.settled`) is
marked again: a gang whose record could not be made, a write that failed.
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client

from tpfabric_core.api import GANG_GATE
from tpfabric_core.gangs import GANG_LABEL, gang_of
from tpfabric_core.placement.pod_fit import pod_gpus
from tpfabric_core.rdma_default import RDMA_ANNOTATION, parse_decision
from tpfabric_kube.malformed import MalformedObjects
from tpfabric_operator.gangs.owners import GANG_SETTINGS
from tpfabric_operator.gangs.records import GangPod
from tpfabric_operator.pod_watch import Grouped, PodWatch

__all__ = ["GangKey", "GangPods", "GangSyncer", "gang_pod"]

log = logging.getLogger("tpfabric.operator.gangs")

GangKey = tuple[str, str]  # (namespace, gang record name)
_Entry = tuple[GangKey, GangPod | None]


def gang_pod(pod: Mapping[str, Any]) -> GangPod | None:
    """Return what the operator keeps of a listed or watched gang pod (None: not a live gang
    pod: terminating, finished, or its labels name no gang)."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return None
    member = gang_of(meta, GANG_SETTINGS, spec=pod.get("spec") or {})
    if member is None:
        return None
    conditions = status.get("conditions") or []
    controller = next(
        (
            f"{ref.get('kind')}/{ref.get('name')}"
            for ref in meta.get("ownerReferences") or []
            if ref.get("controller")
        ),
        "",
    )
    return GangPod(
        name=str(meta.get("name")),
        member=member,
        created=str(meta.get("creationTimestamp") or ""),
        labels=meta.get("labels") or {},
        phase=str(status.get("phase") or "Pending"),
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
        gpus=pod_gpus(pod.get("spec") or {}),
        gated=any(
            g.get("name") == GANG_GATE for g in (pod.get("spec") or {}).get("schedulingGates") or []
        ),
        controller=controller,
        node=(pod.get("spec") or {}).get("nodeName") or None,
        uid=str(meta.get("uid") or ""),
        rdma=parse_decision((meta.get("annotations") or {}).get(RDMA_ANNOTATION)),
    )


def _gang_key(obj: Mapping[str, Any]) -> GangKey | None:
    meta = obj.get("metadata") or {}
    gang = (meta.get("labels") or {}).get(GANG_LABEL)
    return (str(meta.get("namespace") or ""), str(gang)) if gang else None


class GangPods(PodWatch):
    """Every gang pod by gang; ``on_change(key)`` for each gang whose pods changed."""

    def __init__(
        self,
        core: client.CoreV1Api,
        read: Callable[[Mapping[str, Any]], GangPod | None],
        on_change: Callable[[GangKey], None],
        malformed: MalformedObjects | None = None,
    ) -> None:
        super().__init__(core, GANG_LABEL, "gang-pods", malformed)
        self._read = read
        self._on_change = on_change
        self._lock = threading.Lock()
        #: per pod: its gang, and the pod while it lives
        self._pods: Grouped[GangKey, _Entry] = Grouped(lambda entry: entry[0])

    def pods(self, key: GangKey) -> list[GangPod]:
        """Return the live pods of gang ``key`` (neither terminating nor finished)."""
        with self._lock:
            entries = self._pods.members(key)
        return [pod for _, pod in entries if pod is not None]

    def gangs(self) -> list[GangKey]:
        """Return every gang that has a pod now."""
        with self._lock:
            return list(self._pods.keys)

    def _slim(self, obj: Mapping[str, Any]) -> tuple[str, _Entry | None]:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        gang = _gang_key(obj)
        return key, ((gang, self._read(obj)) if gang is not None else None)

    def _replace(self, entries: list[tuple[str, Any]]) -> None:
        with self._lock:
            self._pods.replace(entries)
            gangs = list(self._pods.keys)
        for gang in gangs:  # after a list (start, a lost watch): every gang is looked at
            self._on_change(gang)

    def _event(self, key: str, obj: Mapping[str, Any] | None) -> None:
        entry = self._slim(obj)[1] if obj is not None else None
        with self._lock:
            old = self._pods.put(key, entry)
        for gang in {e[0] for e in (old, entry) if e is not None}:
            self._on_change(gang)


class GangSyncer:
    """Threads that sync dirty gangs, each once per batch of changes, and look again every
    ``every`` seconds at the gangs a sync did not find settled.

    A gang synced less than ``batch`` seconds ago is synced again only once ``batch`` seconds
    have passed since: the changes meanwhile (a LeaderWorkerSet group's pods created and made
    ready one after another, the record's own watch events) make one sync and at most one
    status write, as kube-controller-manager's Job controller batches a Job's pod events
    (``syncJobBatchPeriod``, one second). A gang's first change, or one after a quiet
    ``batch``, is synced at once: its record is made without delay.
    """

    def __init__(
        self,
        sync: Callable[[GangKey], bool],
        gangs: Callable[[], list[GangKey]],
        *,
        every: float,
        threads: int = 4,
        batch: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sync = sync
        self._gangs = gangs
        self._every = every
        self._batch = batch
        self._clock = clock
        self._cond = threading.Condition()
        self._dirty: dict[GangKey, None] = {}  # an ordered set: first changed, first synced
        #: gang -> when it may be synced again (dirty within ``batch`` of its last sync), and the
        #: same as a heap of (when, gang), soonest first
        self._later: dict[GangKey, float] = {}
        self._due: list[tuple[float, GangKey]] = []
        #: gang -> when its last sync began (kept ``batch`` seconds)
        self._synced: dict[GangKey, float] = {}
        self._settled: set[GangKey] = set()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._work, name=f"gang-sync-{i}", daemon=True)
            for i in range(threads)
        ]
        self._threads.append(threading.Thread(target=self._tick, name="gang-tick", daemon=True))

    def start(self) -> None:
        """Start the threads."""
        for thread in self._threads:
            thread.start()

    def is_alive(self) -> bool:
        """Return whether the threads run."""
        return any(t.is_alive() for t in self._threads)

    def stop(self) -> None:
        """Ask every thread to end."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def dirty(self, key: GangKey) -> None:
        """Mark gang ``key`` for a sync (its pods or its record changed): at once, or once
        ``batch`` seconds have passed since its last sync."""
        with self._cond:
            self._settled.discard(key)
            if key in self._dirty or key in self._later:
                return
            due = self._synced.get(key, -math.inf) + self._batch
            if due > self._clock():
                self._later[key] = due
                heapq.heappush(self._due, (due, key))
            else:
                self._dirty[key] = None
            self._cond.notify()

    def settled(self, key: GangKey) -> bool:
        """Return whether the last sync of ``key`` found nothing to do and nothing pending."""
        return key in self._settled

    def _take(self) -> GangKey | None:
        with self._cond:
            while not self._stop.is_set():
                now = self._clock()
                while self._due and self._due[0][0] <= now:
                    due, key = heapq.heappop(self._due)
                    if self._later.get(key) == due:
                        del self._later[key]
                        self._dirty[key] = None
                if self._dirty:
                    key = next(iter(self._dirty))
                    del self._dirty[key]
                    self._synced[key] = now
                    return key
                self._cond.wait(self._due[0][0] - now if self._due else None)
            return None

    def _work(self) -> None:
        while (key := self._take()) is not None:
            try:
                settled = self._sync(key)
            except Exception:  # a sync that fails is tried again at the next tick
                log.exception("gang %s/%s: sync failed", *key)
                settled = False
            with self._cond:
                if settled and key not in self._dirty and key not in self._later:
                    self._settled.add(key)

    def _tick(self) -> None:
        while not self._stop.wait(self._every):
            with self._cond:  # forget the syncs too old to hold a gang back
                now = self._clock()
                for key in [k for k, t in self._synced.items() if now - t >= self._batch]:
                    del self._synced[key]
            for key in self._gangs():
                if key not in self._settled:
                    self.dirty(key)
