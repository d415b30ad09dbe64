"""List+watch feeds of the store, one informer loop per watched kind.

Each watched kind runs an informer loop in its own thread: list, then watch from the list's
resourceVersion with bookmarks; a closed stream re-watches from the last version; ``410 Gone`` or
any error relists after a short backoff. The store is never left half-updated: every event is
applied under the store's lock. Nothing here decides anything.

A list is read in pages of ``LIST_PAGE_SIZE`` (``limit``/``continue``: one consistent snapshot of
the API server). Each page's objects are cut down to the fields the store's records read
(:mod:`.slim`) before the next page is fetched, so at most one page of raw objects (and its
response body) is alive at a time, and the store is replaced in one step, under its lock, once
the last page has arrived: a 50,000-pod cluster never holds 50,000 raw pod dicts, and the lock is
never held across a network call.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tpfabric_core.api import GROUP, PLURAL, VERSION
from tpfabric_core.api.gang import GANG_KIND, GANG_PLURAL
from tpfabric_core.fabric.agent_heartbeat import HEARTBEAT_LABEL, heartbeat_lease
from tpfabric_core.fabric.link_publish import DETAIL_ANNOTATION
from tpfabric_core.gangs import NAMESPACE_OPT_IN
from tpfabric_kube.list_watch import (
    LIST_PAGE_SIZE,
    WATCH_REQUEST_TIMEOUT,
    WATCH_TIMEOUT_S,
    list_and_watch,
    list_pages,
)
from tpfabric_kube.malformed import SKIPPED, MalformedObjects, event_writer
from tpfabric_scheduler.kube.slim import slim_job, slim_node, slim_pod
from tpfabric_scheduler.store import (
    ClusterStore,
    JobRecord,
    NodeRecord,
    PodIndex,
    PodRecord,
    gang_key,
    index_jobs,
    index_nodes,
    index_pods,
)

__all__ = [
    "LIST_PAGE_SIZE",
    "POD_PAGE_SIZE",
    "Informer",
    "InformerKind",
    "informer_kinds",
    "list_pages",
    "start_informers",
]

log = logging.getLogger("tpfabric.scheduler.kube")
#: pods listed per page: parsing a page holds the interpreter for its whole length (about
#: 0.25 ms a 7 KB pod on a slow core), and the extender answers kube-scheduler meanwhile
POD_PAGE_SIZE = 25


@dataclass
class InformerKind:
    """One watched kind: how to list it, and how its objects become records of the store.

    ``record`` cuts an object down and parses it (outside the store's lock), ``index`` builds
    the store's view of a whole list (outside the lock too), ``install`` swaps that view in,
    ``put`` and ``delete`` apply one watch event (under the lock, O(1)).
    """

    name: str
    list_call: Callable[..., Any]
    record: Callable[[dict[str, Any]], Any]
    index: Callable[[list[Any]], Any]
    install: Callable[[Any], Any]
    put: Callable[[Any], None]
    delete: Callable[[str], None]
    namespaced: bool
    page_size: int = LIST_PAGE_SIZE
    #: the objects' kind, as reports of a malformed one name it
    object_kind: str = ""


def informer_kinds(
    store: ClusterStore,
    list_calls: dict[str, Callable[..., Any]],
    malformed: MalformedObjects | None = None,
) -> list[InformerKind]:
    """Return the three kinds the store is fed with (``nodes``, ``pods``,
    ``tensorparalleljobs``), listed by ``list_calls`` (the API client's, or a benchmark's), and
    those of ``list_calls`` that are optional: ``gangs``, ``namespaces`` (opted in to gangs),
    ``leases`` (the fabric agents' heartbeats).

    ``malformed``: where a node field the record ignores is reported (the fabric-health
    annotation a node's record could not read).
    """

    def node_record(obj: dict[str, Any]) -> NodeRecord:
        record = NodeRecord.from_object(slim_node(obj))
        if record.detail_problem and malformed is not None:
            malformed.field("Node", obj, DETAIL_ANNOTATION, record.detail_problem)
        return record

    return [
        InformerKind(
            "nodes",
            list_calls["nodes"],
            node_record,
            index_nodes,
            store.install_nodes,
            store.put_node,
            store.delete_node,
            namespaced=False,
            object_kind="Node",
        ),
        InformerKind(
            "pods",
            list_calls["pods"],
            lambda obj: PodRecord.from_object(slim_pod(obj)),
            index_pods,
            store.install_pods,
            store.put_pod,
            store.delete_pod,
            namespaced=True,
            page_size=POD_PAGE_SIZE,
            object_kind="Pod",
        ),
        InformerKind(
            "tensorparalleljobs",
            list_calls["tensorparalleljobs"],
            lambda obj: JobRecord.from_object(slim_job(obj)),
            index_jobs,
            store.install_jobs,
            store.put_job,
            store.delete_job,
            namespaced=True,
            object_kind="TensorParallelJob",
        ),
        *(
            [
                InformerKind(
                    GANG_PLURAL,
                    list_calls[GANG_PLURAL],
                    # a list's items may lack their kind: a Gang's record is told so
                    lambda obj: JobRecord.from_object({**slim_job(obj), "kind": GANG_KIND}),
                    index_jobs,
                    lambda jobs: store.install_jobs(jobs, GANG_KIND),
                    store.put_job,
                    lambda key: store.delete_job(gang_key(*key.split("/", 1))),
                    namespaced=True,
                    object_kind=GANG_KIND,
                )
            ]
            if GANG_PLURAL in list_calls
            else []
        ),
        *(
            [
                InformerKind(
                    "leases",
                    list_calls["leases"],
                    heartbeat_lease,
                    list,
                    store.install_heartbeats,
                    store.put_heartbeat,
                    store.delete_heartbeat,
                    namespaced=True,
                    object_kind="Lease",
                )
            ]
            if "leases" in list_calls
            else []
        ),
        *(
            [
                InformerKind(
                    "namespaces",
                    list_calls["namespaces"],
                    lambda obj: str(obj["metadata"]["name"]),
                    frozenset,
                    store.install_gang_namespaces,
                    store.put_gang_namespace,
                    store.delete_gang_namespace,
                    namespaced=False,
                    object_kind="Namespace",
                )
            ]
            if "namespaces" in list_calls
            else []
        ),
    ]


_listing = 0
_listing_lock = threading.Lock()
_thresholds = gc.get_threshold()


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Hold off Python's full garbage collections while a list is read, then move what lives
    into the collector's permanent generation.

    A list makes a record of every object (50,000 pods), and each automatic full collection
    meanwhile traverses them all: pauses of 100 ms and more, for every thread, the extender's
    answers too. Young collections go on (what other threads leave behind is still
    collected); once the list is in, the records leave the collector's generations
    (``gc.freeze``): they hold no reference cycles (a replaced record is freed by its
    reference count), and later collections traverse only what changed since.
    """
    global _listing  # noqa: PLW0603 - one collector per process, shared by the informers
    with _listing_lock:
        _listing += 1
        gc.set_threshold(_thresholds[0], _thresholds[1], 1_000_000_000)
    try:
        yield
    finally:
        with _listing_lock:
            _listing -= 1
            if not _listing:
                gc.freeze()
                gc.set_threshold(*_thresholds)


def _free_gradually(replaced: Any) -> None:
    """Free what a relist replaced one entry at a time (a loop other threads can interrupt):
    dropping a dict of 50,000 records at once is one deallocation that holds the interpreter
    for a third of a second."""
    maps = (
        [getattr(replaced, name) for name in PodIndex.__slots__]
        if isinstance(replaced, PodIndex)
        else [replaced]
    )
    for entries in maps:
        while isinstance(entries, dict) and entries:
            entries.popitem()


class Informer(threading.Thread):
    """List+watch of one kind into the store; ``synced`` is set after the first list."""

    def __init__(
        self,
        kind: InformerKind,
        store: ClusterStore,
        on_change: Callable[[], None],
        malformed: MalformedObjects | None = None,
    ) -> None:
        super().__init__(name=f"informer-{kind.name}", daemon=True)
        self.kind = kind
        #: where an object the informer cannot read is reported (it is skipped)
        self.malformed = malformed or MalformedObjects("tpfabric-scheduler")
        self.store = store
        self.on_change = on_change
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None

    def stop(self) -> None:
        """Ask the loop to end (the current watch is closed)."""
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()

    def _key(self, obj: dict[str, Any]) -> str:
        meta = obj["metadata"]
        return f"{meta.get('namespace')}/{meta['name']}" if self.kind.namespaced else meta["name"]

    def relist(self) -> str:
        """List every object again and install the list in the store; return its
        resourceVersion (the watch loop calls it at start and after an expired watch; the
        benchmarks call it to measure a relist)."""
        # every page is cut down and parsed as it arrives, and the store's view is built, all
        # outside the lock: the extender's requests never wait for a relist (50,000 pods)
        with _collector_paused():
            records, version = list_pages(
                self.kind.list_call,
                self.kind.record,
                page_size=self.kind.page_size,
                malformed=self.malformed,
                kind=self.kind.object_kind or self.kind.name,
            )
            view = self.kind.index(records)
            del records
            with self.store.lock:
                replaced = self.kind.install(view)
            del view
            _free_gradually(replaced)
        self.synced.set()
        self.on_change()
        return version

    def _watch_from(self, version: str) -> str:
        self._watch = watch.Watch()
        stream = self._watch.stream(
            self.kind.list_call,
            resource_version=version,
            timeout_seconds=WATCH_TIMEOUT_S,
            _request_timeout=WATCH_REQUEST_TIMEOUT,
            allow_watch_bookmarks=True,
            deserialize=False,
        )
        for event in stream:
            if self._stop.is_set():
                break
            kind, obj = event.get("type"), event.get("object") or {}
            version = obj.get("metadata", {}).get("resourceVersion", version)
            if kind == "BOOKMARK":
                continue
            # parsed (a job validated) outside the lock; one that cannot be read is forgotten,
            # as a list would leave it out
            record = (
                SKIPPED
                if kind == "DELETED"
                else self.malformed.parse(self.kind.object_kind, self.kind.record, obj)
            )
            if record is SKIPPED:
                with self.store.lock:
                    self.kind.delete(self._key(obj))
            else:
                with self.store.lock:
                    self.kind.put(record)
            self.on_change()
        return version

    def run(self) -> None:
        """Loop until stopped: list, watch, relist on errors."""
        list_and_watch(
            self.relist,
            self._watch_from,
            self._stop,
            what=self.kind.name,
            log=log,
        )


def start_informers(
    api: client.ApiClient,
    store: ClusterStore,
    on_change: Callable[[], None],
    *,
    agent_namespace: str = "",
) -> list[Informer]:
    """Start informers for nodes, pods, TensorParallelJobs, (where the CRD is installed) Gangs
    and (with ``agent_namespace``) the fabric agents' heartbeat Leases; return them (already
    running)."""
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)

    def list_jobs(**kwargs: Any) -> Any:
        return custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kwargs)

    def list_gangs(**kwargs: Any) -> Any:
        return custom.list_cluster_custom_object(GROUP, VERSION, GANG_PLURAL, **kwargs)

    calls = {
        "nodes": core.list_node,
        "pods": core.list_pod_for_all_namespaces,
        "tensorparalleljobs": list_jobs,
    }
    try:
        list_gangs(limit=1)
        calls[GANG_PLURAL] = list_gangs
    except ApiException as err:
        if err.status not in (403, 404):
            raise
        log.warning(
            "Gang records (%s.%s) cannot be listed (%s): gangs other controllers make are not "
            "placed (install the chart's CRDs and RBAC, or `kubectl apply -f crds/`, and "
            "restart)",
            GANG_PLURAL,
            GROUP,
            "not installed" if err.status == 404 else "forbidden",
        )
    if agent_namespace:
        coordination = client.CoordinationV1Api(api)

        def list_heartbeats(**kwargs: Any) -> Any:
            return coordination.list_namespaced_lease(
                agent_namespace, label_selector=HEARTBEAT_LABEL, **kwargs
            )

        try:
            list_heartbeats(limit=1)
            calls["leases"] = list_heartbeats
        except ApiException as err:
            if err.status != 403:
                raise
            log.warning(
                "the fabric agents' heartbeats cannot be read (leases of namespace %s: "
                "forbidden): a silent agent goes unnoticed and nodes are judged by their health "
                "label alone; grant the scheduler's account get, list and watch on leases there "
                "(the chart does with fabricAgent.enabled) and restart",
                agent_namespace,
            )
    malformed = MalformedObjects("tpfabric-scheduler", notify=event_writer(core))
    if GANG_PLURAL in calls:
        calls.update(_gang_namespaces_call(core, store))
    kinds = informer_kinds(store, calls, malformed)
    informers = [Informer(kind, store, on_change, malformed) for kind in kinds]
    for informer in informers:
        informer.start()
    return informers


def _gang_namespaces_call(
    core: client.CoreV1Api, store: ClusterStore
) -> dict[str, Callable[..., Any]]:
    """Return the list call of the namespaces opted in to gangs (``tpfabric.io/gangs=enabled``,
    a server-side selector: a namespace that drops the label leaves the watch as deleted), or
    none when namespaces cannot be listed: then no Gang record is planned at all."""

    def list_namespaces(**kwargs: Any) -> Any:
        return core.list_namespace(label_selector=NAMESPACE_OPT_IN, **kwargs)

    try:
        list_namespaces(limit=1)
    except ApiException as err:
        if err.status != 403:
            raise
        log.warning(
            "namespaces cannot be listed (forbidden): no gang of another controller is placed, "
            "since no namespace is known to have opted in (%s); grant the scheduler's account "
            "list and watch on namespaces (the chart does) and restart",
            NAMESPACE_OPT_IN,
        )
        store.gang_namespaces = frozenset()
        return {}
    return {"namespaces": list_namespaces}
