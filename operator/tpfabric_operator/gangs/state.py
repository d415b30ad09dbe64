"""What the gang half keeps between syncs, in one object kopf's memo carries: :class:`GangState`.

The API calls (:class:`.kube.GangApi`, with the answers it keeps a while), the watch of every
gang pod (:class:`.pods.GangPods`) and the threads that sync the gangs it marks
(:class:`.pods.GangSyncer`), the records seen (so that the tick also looks at a record whose pods
are all gone), kopf's index of degraded nodes, and what each sync remembers for the next: since
when a gang has had no pod (:mod:`.idle`), the group of each LeaderWorkerSet being moved off a
degraded node and where its move left it (:mod:`.serving`), and which gangs ask to be near
which (:mod:`.near`). The startup handler makes it (:mod:`tpfabric_operator.handlers`); a test
makes one on a stand-in of the API.

Everything here lives in this process's memory only: a restarted operator (or a new leader)
begins with none of it and must never need it to be correct (a record's status is its memory).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client.rest import ApiException

from tpfabric_operator.fabric_health import RankOnDegradedNode, on_degraded_nodes
from tpfabric_operator.gangs import serving
from tpfabric_operator.gangs.kube import GangApi
from tpfabric_operator.gangs.near import NearBy
from tpfabric_operator.gangs.pods import GangKey, GangPods, GangSyncer, gang_pod
from tpfabric_operator.gangs.records import GangPod

__all__ = ["GangState"]

log = logging.getLogger("tpfabric.operator.gangs")


class GangState:
    """The gang half's state between syncs (see the module's docstring).

    ``sync`` brings one gang's record in step (:func:`.sync.sync_gang`); ``sync_seconds``: how
    often a gang not found settled is looked at again, ``idle_seconds``: how long a record
    outlives its pods, ``short_notice_seconds``: how long a gang may be short of pods before its
    pods are told (:mod:`.waits`); ``wall`` and ``monotonic``: the clocks a sync reads.
    """

    def __init__(
        self,
        api: GangApi,
        sync: Callable[[GangState, GangKey], bool],
        *,
        sync_seconds: float,
        idle_seconds: float,
        short_notice_seconds: float = float("inf"),
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.wall = wall
        self.monotonic = monotonic
        self.sync_seconds = sync_seconds
        self.idle_seconds = idle_seconds
        self.short_notice_seconds = short_notice_seconds
        self._sync = sync
        #: every gang pod, by gang (None until started)
        self.watch: GangPods | None = None
        self.syncer: GangSyncer | None = None
        #: the records the operator has seen (their events), so that the tick also looks at a
        #: record whose pods are all gone (deleted after ``idle_seconds``); a kopf timer would do
        #: it, but a timer puts kopf's finalizer on every record: a write the chart's RBAC need
        #: not grant, and a record that could hold up the deletion of its namespace or of the
        #: CRD while no operator runs
        self.records: set[GangKey] = set()
        #: each record as its last event or this operator's own write showed it (None: known
        #: to be absent), so that a sync reads no record from the API server once it has one
        self.bodies: dict[GangKey, Mapping[str, Any] | None] = {}
        #: kopf's index of degraded nodes (kopf hands it to handlers only), once seen
        self.degraded_index: Mapping[str, Any] | None = None
        #: gang -> when it was first seen without a live pod (monotonic seconds)
        self.idle_since: dict[GangKey, float] = {}
        #: (namespace, LWS) -> its group being moved off a degraded node
        self.moving: dict[tuple[str, str], serving.Moving] = {}
        #: gang -> the degraded nodes its last move placed it back on (no healthy domain had
        #: room): it is not moved again while those stay its degraded nodes
        self.moved_back: dict[GangKey, frozenset[str]] = {}
        #: which gangs ask to be near which
        self.near = NearBy()
        self._locks: dict[GangKey, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    # -- the process: the watch and the syncer ------------------------------------------------

    def start(self) -> None:
        """Start the gang pods' watch and the threads that sync their records (once)."""
        if self.syncer is None:
            self.syncer = GangSyncer(self._sync_key, self.known_gangs, every=self.sync_seconds)
            self.watch = GangPods(self.api.core, gang_pod, self.syncer.dirty, self.api.malformed)
            self.syncer.start()
            self.watch.start()

    def stop(self) -> None:
        """Stop them with the operator."""
        if self.watch is not None:
            self.watch.stop()
        if self.syncer is not None:
            self.syncer.stop()

    def lock(self, key: GangKey) -> threading.Lock:
        """Return the lock that lets one sync of gang ``key`` run at a time."""
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    def _sync_key(self, key: GangKey) -> bool:
        try:
            return self._sync(self, key)
        except ApiException as err:  # looked at again at the next tick
            log.warning("gang %s/%s: sync failed: %s", key[0], key[1], err.reason)
            return False

    def known_gangs(self) -> list[GangKey]:
        """Return every gang with pods now, and every record seen."""
        with_pods = self.watch.gangs() if self.watch is not None else []
        return list(dict.fromkeys([*with_pods, *self.records]))

    def dirty(self, key: GangKey) -> None:
        """Mark gang ``key`` for a sync."""
        if self.syncer is not None:
            self.syncer.dirty(key)

    # -- what kopf's events bring ---------------------------------------------------------------

    def keep_index(self, index: Mapping[str, Any] | None) -> None:
        """Keep kopf's index of degraded nodes (kopf hands it to handlers only)."""
        if index is not None:
            self.degraded_index = index

    def on_record(self, key: GangKey, body: Mapping[str, Any] | None, *, deleted: bool) -> None:
        """A record changed (the placer's plan, a deletion by hand): its gang is looked at
        again, and so is the gang it asks to be near (whose record names those placed near it)."""
        touched = self.near.note(key, None if deleted else body)
        if self.watch is not None and self.syncer is not None and touched:
            for gang_key in self.watch.gangs():
                pods = self.watch.pods(gang_key) if gang_key[0] == key[0] else []
                if pods and (gang_key[1] in touched or pods[0].member.owner in touched):
                    self.syncer.dirty(gang_key)
        if deleted:
            self.records.discard(key)
            self.bodies[key] = None
        else:
            self.records.add(key)
            if body is not None:
                self.keep_record(key, body)
        self.dirty(key)

    def keep_record(self, key: GangKey, body: Mapping[str, Any]) -> None:
        """Keep ``body`` as record ``key`` unless a newer version of it is kept already (a
        watch event may come after this operator's own write)."""
        kept = self.bodies.get(key)
        if kept is not None and _uid(kept) == _uid(body) and _version(kept) > _version(body):
            return
        self.bodies[key] = dict(body)

    def on_degraded_node(self, name: str) -> None:
        """A node labelled degraded changed: every gang with a pod on it is looked at again."""
        if self.watch is None or self.syncer is None:
            return
        for key in self.watch.gangs():
            if any(p.node == name for p in self.watch.pods(key)):
                self.syncer.dirty(key)

    # -- what a sync reads of the state ---------------------------------------------------------

    def record(self, key: GangKey) -> Any:
        """Return the Gang record ``key`` (None: there is none) as its watch events and this
        operator's writes showed it; read from the API server only for a gang not seen yet."""
        if key in self.bodies:
            return self.bodies[key]
        record = self.api.record(key)
        if key not in self.bodies:  # an event may have come meanwhile
            self.bodies[key] = record
        return record

    def pods_of(self, key: GangKey) -> list[GangPod]:
        """Return the live pods of gang ``key``: from the pod watch once it has listed, else
        listed (the first moments of an operator)."""
        if self.watch is not None and self.watch.synced.is_set():
            return self.watch.pods(key)
        return self.api.listed_pods(key)

    def on_degraded_nodes(self, pods: list[GangPod]) -> list[RankOnDegradedNode]:
        """Return each pod of the gang on a node labelled degraded: rank, node, the agent's
        reasons."""
        index = self.degraded_index
        if index is None:
            return []
        return on_degraded_nodes(((p.rank, p.node) for p in pods), index)

    def unready_groups(
        self, namespace: str, view: serving.LwsView, first: GangPod
    ) -> serving.Unready:
        """Return the LWS's other groups that are not ready now, from the watched pods (a
        group below its replicas with no pod at all counts: it is being made again)."""
        own = serving.group_index(first.labels)
        groups: dict[int, tuple[str, bool]] = {}
        if self.watch is None:
            return serving.Unready(0)
        for key in self.watch.gangs():
            if key[0] != namespace or key[1] == first.member.gang:
                continue
            members = self.watch.pods(key)
            if not members or members[0].member.kind != "LeaderWorkerSet":
                continue
            if members[0].member.owner != view.name:
                continue
            index = serving.group_index(members[0].labels)
            size = members[0].member.size or len(members)
            if index is None:
                continue
            groups[index] = (key[1], serving.group_ready([p.ready for p in members], size))
        return serving.others_unready(view, groups, own)


def _uid(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("uid") or "")


def _version(body: Mapping[str, Any]) -> int:
    """Return the record's resourceVersion as a number (etcd's revision; 0 when unreadable),
    only to keep the newer of two versions of one record."""
    text = str((body.get("metadata") or {}).get("resourceVersion") or "")
    return int(text) if text.isdigit() else 0
