"""The scheduler plugin's one adapter to the API server: list+watch feeds and the few writes the
placer makes (job status, pod affinity, gate removal).

Each watched kind runs an informer loop in its own thread: list, then watch from the list's
resourceVersion with bookmarks; a closed stream re-watches from the last version; ``410 Gone`` or
any error relists after a short backoff. The store is never left half-updated: every event is
applied under the store's lock. Nothing here decides anything.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tpfabric_core.api import GROUP, PLURAL, VERSION
from tpfabric_scheduler.store import ClusterStore, JobRecord

__all__ = ["Informer", "KubeWriter", "start_informers"]

log = logging.getLogger("tpfabric.scheduler.kube")
WATCH_TIMEOUT_S = 240


@dataclass
class _Kind:
    name: str
    list_call: Callable[..., Any]
    replace: Callable[[list[dict[str, Any]]], None]
    upsert: Callable[[dict[str, Any]], None]
    delete: Callable[[str], None]
    namespaced: bool


class Informer(threading.Thread):
    """List+watch of one kind into the store; ``synced`` is set after the first list."""

    def __init__(self, kind: _Kind, store: ClusterStore, on_change: Callable[[], None]) -> None:
        super().__init__(name=f"informer-{kind.name}", daemon=True)
        self.kind = kind
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

    def _list(self) -> str:
        response = self.kind.list_call(_preload_content=False)
        data = orjson.loads(response.data)
        with self.store.lock:
            self.kind.replace(data.get("items") or [])
        self.synced.set()
        self.on_change()
        return str(data["metadata"]["resourceVersion"])

    def _watch_from(self, version: str) -> str:
        self._watch = watch.Watch()
        stream = self._watch.stream(
            self.kind.list_call,
            resource_version=version,
            timeout_seconds=WATCH_TIMEOUT_S,
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
            with self.store.lock:
                if kind == "DELETED":
                    self.kind.delete(self._key(obj))
                else:
                    self.kind.upsert(obj)
            self.on_change()
        return version

    def run(self) -> None:
        """Loop until stopped: list, watch, relist on errors."""
        backoff = 0.5
        while not self._stop.is_set():
            try:
                version = self._list()
                backoff = 0.5
                while not self._stop.is_set():
                    version = self._watch_from(version)
            except ApiException as err:
                if err.status != 410:
                    log.warning("watch %s failed: %s; relisting", self.kind.name, err.reason)
            except Exception as err:  # noqa: BLE001 - an informer must survive anything
                log.warning("watch %s failed: %r; relisting", self.kind.name, err)
            self._stop.wait(backoff)
            backoff = min(backoff * 2, 10.0)


def start_informers(
    api: client.ApiClient, store: ClusterStore, on_change: Callable[[], None]
) -> list[Informer]:
    """Start informers for nodes, pods and TensorParallelJobs; return them (already running)."""
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)

    def list_jobs(**kwargs: Any) -> Any:
        return custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kwargs)

    kinds = [
        _Kind(
            "nodes",
            core.list_node,
            store.replace_nodes,
            store.upsert_node,
            store.delete_node,
            namespaced=False,
        ),
        _Kind(
            "pods",
            core.list_pod_for_all_namespaces,
            store.replace_pods,
            store.upsert_pod,
            store.delete_pod,
            namespaced=True,
        ),
        _Kind(
            "tensorparalleljobs",
            list_jobs,
            store.replace_jobs,
            store.upsert_job,
            store.delete_job,
            namespaced=True,
        ),
    ]
    informers = [Informer(kind, store, on_change) for kind in kinds]
    for informer in informers:
        informer.start()
    return informers


class KubeWriter:
    """The writes of the placer, each one API call."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def patch_job_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge-patch ``status`` into the job's status subresource."""
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {"status": status}
        )

    def job_event(self, job: JobRecord, kind: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on the job (best effort: a lost event is only a lost note)."""
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace, name = job.namespace, job.name
        body = {
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "TensorParallelJob",
                "name": name,
                "namespace": namespace,
                "uid": job.uid,
            },
            "type": kind,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": "tpfabric-placer"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.core.create_namespaced_event(namespace, body)
        except ApiException as err:
            log.warning("event for %s/%s not recorded: %s", namespace, name, err.reason)

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
    ) -> None:
        """Set the gated pod's (narrowed) affinity and drop our gate, in one JSON patch.

        The ``test`` op makes it optimistic: if the pod changed since it was read, the API
        server refuses the patch (409/422) and nothing is half-applied.
        """
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version}
        ]
        if affinity is not None:  # None: a cluster-wide plan narrows nothing
            ops.append({"op": "add", "path": "/spec/affinity", "value": affinity})
        ops.append({"op": "add", "path": "/spec/schedulingGates", "value": remaining_gates})
        self.core.patch_namespaced_pod(name, namespace, ops)

    @staticmethod
    def wait_synced(informers: list[Informer], timeout: float) -> bool:
        """Return whether every informer listed once within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        return all(i.synced.wait(max(0.0, deadline - time.monotonic())) for i in informers)
