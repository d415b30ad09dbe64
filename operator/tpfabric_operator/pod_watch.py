"""A list+watch of the pods one label selects, in a thread of its own: the operator's pod views.

kopf's own watches parse every event with the standard ``json`` module on the event loop that
also runs every handler; a burst of pods put that loop seconds behind the API server. Each view
here (the jobs' worker pods, :class:`.jobs.pod_cache.PodCache`; the gangs' pods,
:class:`.gangs.pods.GangPods`; the webhook's nodes, :class:`.webhook.node_offers.NodeOffers`)
is one :class:`PodWatch`: a server-side label selector, ``orjson`` in its own thread, and only
what its owner reads kept per object, grouped by :class:`Grouped`.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

import orjson
from kubernetes import client
from kubernetes.client.rest import ApiException

from tpfabric_kube.list_watch import (
    WATCH_REQUEST_TIMEOUT,
    WATCH_TIMEOUT_S,
    list_and_watch,
    list_pages,
)
from tpfabric_kube.malformed import SKIPPED, MalformedObjects, event_writer

__all__ = ["Grouped", "PodWatch", "pod_key"]

log = logging.getLogger("tpfabric.operator.pods")

G = TypeVar("G")
E = TypeVar("E")


class Grouped(Generic[G, E]):
    """What a pod watch keeps: an entry per pod (``namespace/name``) and the pods of each group
    (a job, a gang) that ``group_of`` names. Not locked: its owner holds its own lock."""

    def __init__(self, group_of: Callable[[E], G]) -> None:
        self._group_of = group_of
        self.entries: dict[str, E] = {}
        self.keys: dict[G, set[str]] = {}

    def members(self, group: G) -> list[E]:
        """Return the entries of ``group``."""
        return [self.entries[k] for k in self.keys.get(group, ())]

    def replace(self, entries: Iterable[tuple[str, E | None]]) -> None:
        """Keep exactly ``entries`` (after a list); a None entry is a pod not kept."""
        self.entries = {k: e for k, e in entries if e is not None}
        self.keys = {}
        for key, entry in self.entries.items():
            self.keys.setdefault(self._group_of(entry), set()).add(key)

    def put(self, key: str, entry: E | None) -> E | None:
        """Keep ``entry`` for pod ``key`` (None: forget it); return the entry it replaced."""
        old = self.entries.pop(key, None)
        if old is not None:
            members = self.keys.get(self._group_of(old))
            if members is not None:
                members.discard(key)
                if not members:
                    del self.keys[self._group_of(old)]
        if entry is not None:
            self.entries[key] = entry
            self.keys.setdefault(self._group_of(entry), set()).add(key)
        return old


class PodWatch(threading.Thread):
    """A list+watch of the pods one label selects, in a thread of its own, parsed with
    ``orjson``: what each keeps of a pod, and what a change sets off, is the subclass's.

    Each pod is read on its own: one the subclass cannot read is skipped (a watch event of it
    forgets what was kept, as a list would) and reported to ``malformed``.
    """

    def __init__(
        self,
        core: client.CoreV1Api,
        selector: str,
        name: str,
        malformed: MalformedObjects | None = None,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.core = core
        self.selector = selector
        self.malformed = malformed or MalformedObjects(
            "tpfabric-operator", notify=event_writer(core)
        )
        self.synced = threading.Event()
        self._stop = threading.Event()

    def stop(self) -> None:
        """Ask the loop to end (at the latest when the current watch ends)."""
        self._stop.set()

    # -- what a subclass keeps ------------------------------------------------------------------

    def _call(self, **kwargs: Any) -> Any:
        """List (with ``watch=True``: watch) what is kept; a subclass may watch other objects."""
        return self.core.list_pod_for_all_namespaces(label_selector=self.selector, **kwargs)

    def _slim(self, obj: Mapping[str, Any]) -> tuple[str, Any]:
        """Return ("namespace/name", what is kept of the listed pod ``obj``)."""
        raise NotImplementedError

    def _replace(self, entries: list[tuple[str, Any]]) -> None:
        """Replace everything kept with ``entries`` (after a list)."""
        raise NotImplementedError

    def _event(self, key: str, obj: Mapping[str, Any] | None) -> None:
        """Keep (or with ``None`` forget) one pod that a watch event brought."""
        raise NotImplementedError

    # -- keeping it current -----------------------------------------------------------------------

    def _list(self) -> str:
        # each page is cut down to what is kept before the next one is fetched
        entries, version = list_pages(self._call, self._slim, malformed=self.malformed, kind="Pod")
        self._replace(entries)
        self.synced.set()
        return version

    def _events(self, version: str) -> Iterator[dict[str, Any]]:
        response = self._call(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_TIMEOUT_S,
            _preload_content=False,
            _request_timeout=WATCH_REQUEST_TIMEOUT,
        )
        try:
            pending = b""
            for chunk in response.stream(65536, decode_content=False):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield orjson.loads(line)
                if self._stop.is_set():
                    return
        finally:
            response.release_conn()

    def _watch_from(self, version: str) -> str:
        for event in self._events(version):
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                code = int(obj.get("code") or 0)
                raise ApiException(status=code, reason=str(obj.get("message") or "watch error"))
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind == "BOOKMARK":
                continue
            key = pod_key(obj)  # a pod that cannot be read is forgotten, as a list leaves it out
            if (
                kind == "DELETED"
                or self.malformed.parse("Pod", functools.partial(self._event, key), obj) is SKIPPED
            ):
                self._event(key, None)
        return version

    def run(self) -> None:
        """Loop until stopped: list, watch, list again after an expired version or an error."""
        list_and_watch(self._list, self._watch_from, self._stop, what=self.name, log=log)


def pod_key(obj: Mapping[str, Any]) -> str:
    """Return ``namespace/name`` of a listed or watched object."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"
