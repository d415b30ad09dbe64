"""The scheduler plugin's one adapter to the API server: list+watch feeds and the few writes the
placer makes (job status, pod affinity, gate removal).

Each watched kind runs an informer loop in its own thread: list, then watch from the list's
resourceVersion with bookmarks; a closed stream re-watches from the last version; ``410 Gone`` or
any error relists after a short backoff. The store is never left half-updated: every event is
applied under the store's lock. Nothing here decides anything.

A list is read in pages of ``LIST_PAGE_SIZE`` (``limit``/``continue``: one consistent snapshot of
the API server). Each page's objects are cut down to the fields the store's records read
(:func:`slim_pod`, :func:`slim_node`, :func:`slim_job`) before the next page is fetched, so at most
one page of raw objects (and its response body) is alive at a time, and the store is replaced in
one step, under its lock, once the last page has arrived: a 50,000-pod cluster never holds 50,000
raw pod dicts, and the lock is never held across a network call.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
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
    "KubeWriter",
    "informer_kinds",
    "list_pages",
    "slim_job",
    "slim_node",
    "slim_pod",
    "start_informers",
]

log = logging.getLogger("tpfabric.scheduler.kube")
#: pods listed per page: parsing a page holds the interpreter for its whole length (about
#: 0.25 ms a 7 KB pod on a slow core), and the extender answers kube-scheduler meanwhile
POD_PAGE_SIZE = 25
JSON_PATCH = "application/json-patch+json"
_UNPROCESSABLE = 422

#: annotations nothing of ours reads that can be as large as the object itself
_BULKY_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)
_POD_SPEC_BULK = frozenset({"volumes", "ephemeralContainers"})
_POD_STATUS_BULK = frozenset(
    {"containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses", "conditions"}
)
_NODE_STATUS_BULK = frozenset({"images", "volumesInUse", "volumesAttached"})


def _slim_meta(meta: dict[str, Any]) -> dict[str, Any]:
    slim = {k: v for k, v in meta.items() if k != "managedFields"}
    annotations = slim.get("annotations")
    if annotations and any(a in annotations for a in _BULKY_ANNOTATIONS):
        slim["annotations"] = {k: v for k, v in annotations.items() if k not in _BULKY_ANNOTATIONS}
    return slim


def slim_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """Return ``obj`` without the bulk no pod record reads (managed fields, volumes, env, ...).

    Metadata, the scheduling fields of the spec and the status phase stay whole; of each
    container only its name, resources and (init containers) restart policy.
    """
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    slim_spec = {k: v for k, v in spec.items() if k not in _POD_SPEC_BULK}
    for key in ("containers", "initContainers"):
        if key in spec:
            # restartPolicy marks a sidecar (an init container that keeps running): it changes
            # the pod's requests (kube-scheduler's arithmetic in pod_fit.pod_requests)
            slim_spec[key] = [
                {
                    "name": c.get("name"),
                    "resources": c.get("resources") or {},
                    **({"restartPolicy": c["restartPolicy"]} if c.get("restartPolicy") else {}),
                    # host ports are a filter of their own (NodePorts)
                    **(
                        {"ports": [p for p in c["ports"] if p.get("hostPort")]}
                        if any(p.get("hostPort") for p in c.get("ports") or [])
                        else {}
                    ),
                }
                for c in spec[key] or []
            ]
    slim_status = {k: v for k, v in status.items() if k not in _POD_STATUS_BULK}
    unscheduled = [
        c
        for c in status.get("conditions") or []
        if c.get("type") == "PodScheduled" and c.get("status") == "False"
    ]
    if unscheduled:  # why kube-scheduler could not bind it: pending pods only, few
        slim_status["conditions"] = unscheduled
    return {
        "metadata": _slim_meta(obj.get("metadata") or {}),
        "spec": slim_spec,
        "status": slim_status,
    }


def slim_node(obj: dict[str, Any]) -> dict[str, Any]:
    """Return ``obj`` without the bulk no node record reads (managed fields, images, ...)."""
    status = obj.get("status") or {}
    return {
        "metadata": _slim_meta(obj.get("metadata") or {}),
        "spec": obj.get("spec") or {},
        "status": {k: v for k, v in status.items() if k not in _NODE_STATUS_BULK},
    }


def slim_job(obj: dict[str, Any]) -> dict[str, Any]:
    """Return ``obj`` without its managed fields (jobs are few; spec and status stay whole)."""
    return {**obj, "metadata": _slim_meta(obj.get("metadata") or {})}


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


def _pointer(key: str) -> str:
    """Return ``key`` as one JSON pointer (RFC 6901) segment."""
    return key.replace("~", "~0").replace("/", "~1")


class KubeWriter:
    """The writes of the placer, each one API call."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.coordination = client.CoordinationV1Api(api)

    def patch_job_status(
        self,
        namespace: str,
        name: str,
        status: dict[str, Any],
        *,
        uid: str | None = None,
        tests: list[dict[str, Any]] | None = None,
        plural: str = PLURAL,
    ) -> None:
        """Write ``status`` into the job's status subresource; None values remove keys.

        ``plural``: the record's resource (a Gang's ``gangs``).

        Without ``uid``: a merge patch (nested maps merge). With ``uid``: only this incarnation
        of the job is written, and each top-level key of ``status`` is replaced whole (no stale
        keys of an earlier placement survive). A merge patch cannot do that: the status
        subresource ignores ``metadata.uid`` in a patch (checked against kube-apiserver 1.37), so
        this is a JSON patch led by a ``test`` of the uid; the API server refuses it (422) when a
        job of the same name was created since. ``tests``: more JSON patch ``test`` ops that must
        hold (the placer's fence: the placement it computed from is still there). A job without
        any status yet gets it whole, guarded by a ``test`` that it still has none.
        """
        if not uid:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, plural, name, {"status": status}
            )
            return
        same_job: dict[str, Any] = {"op": "test", "path": "/metadata/uid", "value": uid}
        ops = [same_job, *(tests or [])] + [
            {"op": "add", "path": f"/status/{_pointer(key)}", "value": value}
            for key, value in status.items()
        ]
        try:
            self._json_patch_status(namespace, name, ops, plural)
        except ApiException as err:
            if err.status != _UNPROCESSABLE:
                raise
            # another job, or no /status to add into: the first status, if it still has none
            first: list[dict[str, Any]] = [
                same_job,
                {"op": "test", "path": "/status", "value": None},
                {"op": "add", "path": "/status", "value": status},
            ]
            self._json_patch_status(namespace, name, first, plural)

    def _json_patch_status(
        self, namespace: str, name: str, ops: list[dict[str, Any]], plural: str
    ) -> None:
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, plural, name, ops, _content_type=JSON_PATCH
        )

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete the pod, only its incarnation ``uid`` (a delete precondition; the chart's
        admission policy refuses this account a delete that names none); one already gone, or
        made again under that name, is fine."""
        try:
            self.core.delete_namespaced_pod(name, namespace, body={"preconditions": {"uid": uid}})
        except ApiException as err:
            if err.status not in {404, 409}:  # 409: the uid precondition, a newer pod
                raise

    def job_event(self, job: JobRecord, kind: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on the job (best effort: a lost event is only a lost note)."""
        involved = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": job.kind,
            "name": job.name,
            "namespace": job.namespace,
            "uid": job.uid,
        }
        self._event(involved, kind, reason, message)

    def pod_event(self, pod: PodRecord, reason: str, message: str) -> None:
        """Record a Normal Event on a worker pod (best effort, as :meth:`job_event`):
        ``kubectl describe pod`` shows it under Events."""
        involved = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod.name,
            "namespace": pod.namespace,
            "uid": pod.uid,
        }
        self._event(involved, "Normal", reason, message)

    def _event(self, involved: dict[str, str], kind: str, reason: str, message: str) -> None:
        """Create a core/v1 Event about ``involved``; a refusal is logged, never raised."""
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace, name = involved["namespace"], involved["name"]
        body = {
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": involved,
            "type": kind,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": "tpfabric-placer"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.core.create_namespaced_event(namespace, body, _preload_content=False).read()
        except ApiException as err:
            log.warning(
                "event for %s %s/%s not recorded: %s", involved["kind"], namespace, name, err.reason
            )

    def read_lease_renewal(self, namespace: str, name: str) -> str | None:
        """Return a Lease's ``renewTime`` as the API server has it now (None: no Lease)."""
        try:
            response = self.coordination.read_namespaced_lease(
                name, namespace, _preload_content=False
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        spec = orjson.loads(response.data).get("spec") or {}
        renewed = spec.get("renewTime") or spec.get("acquireTime")
        return str(renewed) if renewed else None

    def patch_fabric_condition(self, node: str, condition: dict[str, Any]) -> None:
        """Set ``node``'s ``FabricHealthy`` condition (a strategic merge on the condition's
        type: every other condition stays as it is)."""
        self.core.patch_node_status(
            node,
            {"status": {"conditions": [condition]}},
            field_manager="tpfabric-placer",
            _content_type="application/strategic-merge-patch+json",
        )

    def read_job(self, namespace: str, name: str) -> dict[str, Any]:
        """Return the job as stored now (for a consistent read before writing a plan)."""
        result: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name
        )
        return result

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        """Return the pod as stored now."""
        response = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
        result: dict[str, Any] = orjson.loads(response.data)
        return result

    def release_pod(
        self,
        namespace: str,
        name: str,
        resource_version: str,
        affinity: dict[str, Any] | None,
        remaining_gates: list[dict[str, Any]],
        *,
        annotations: Mapping[str, str] | None = None,
        annotated: bool = True,
    ) -> None:
        """Set the gated pod's (narrowed) affinity, write the plan's ``annotations`` (its rails,
        its plan level) and drop our gate, in one JSON patch; ``annotated``: whether the pod has
        annotations already (as read).

        The ``test`` op makes it optimistic: if the pod changed since it was read, the API
        server refuses the patch (409/422) and nothing is half-applied.
        """
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
            *_annotation_ops(annotations or {}, annotated=annotated),
        ]
        if affinity is not None:  # None: a cluster-wide plan narrows nothing
            ops.append({"op": "add", "path": "/spec/affinity", "value": affinity})
        ops.append({"op": "add", "path": "/spec/schedulingGates", "value": remaining_gates})
        # the answer is not read into a client model (a burst releases thousands of pods)
        self.core.patch_namespaced_pod(name, namespace, ops, _preload_content=False).read()

    def release_known_pod(
        self,
        pod: PodRecord,
        affinity: dict[str, Any] | None,
        remaining_gates: list[dict[str, Any]],
        *,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """Release ``pod`` as the store knows it, in one write and without reading it first;
        ``annotations`` (the plan's rails and level) are added to the ones it has.

        ``test`` ops make it exact: the patch applies only to that pod (uid) with exactly the
        gates and affinity the store holds; anything else is refused (422) and nothing changes,
        and the caller falls back to :meth:`read_pod` + :meth:`release_pod` (so does a pod
        without any annotation, which a key cannot be added to).
        """
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/uid", "value": pod.uid},
            {"op": "test", "path": "/spec/schedulingGates", "value": list(pod.gates)},
            *_annotation_ops(annotations or {}, annotated=True),
        ]
        before = pod.scheduling.get("affinity")
        if before is not None:
            ops.append({"op": "test", "path": "/spec/affinity", "value": before})
        if affinity is not None:
            ops.append({"op": "add", "path": "/spec/affinity", "value": affinity})
        ops.append({"op": "add", "path": "/spec/schedulingGates", "value": remaining_gates})
        self.core.patch_namespaced_pod(pod.name, pod.namespace, ops, _preload_content=False).read()

    @staticmethod
    def wait_synced(informers: list[Informer], timeout: float) -> bool:
        """Return whether every informer listed once within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        return all(i.synced.wait(max(0.0, deadline - time.monotonic())) for i in informers)


def _annotation_ops(annotations: Mapping[str, str], *, annotated: bool) -> list[dict[str, Any]]:
    """Return the JSON patch ops that add ``annotations``: one per key to a pod that has
    annotations (``/`` escaped as ``~1``), else the whole map."""
    if not annotations:
        return []
    if not annotated:
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(annotations)}]
    return [
        {
            "op": "add",
            "path": "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1"),
            "value": value,
        }
        for key, value in annotations.items()
    ]
