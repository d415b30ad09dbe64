"""The gang placer's test world: a store, a writer that applies the placer's writes to the store
as the watches would (no API server), a hand-set clock and builders of leaves and gangs."""

from __future__ import annotations

import copy
from typing import Any

from builders import a_job, a_node, a_worker
from kubernetes.client.rest import ApiException

from tpfabric_core.api import JOB_LABEL
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.store import ClusterStore

__all__ = [
    "NOW",
    "Clock",
    "RecordingWriter",
    "a_job",
    "a_node",
    "a_worker",
    "add_worker",
    "first_worker_only",
    "gang",
    "half_node_gang",
    "make_workers",
    "placement",
    "two_leaves",
]

NOW = 1_800_000_000.0


class RecordingWriter:
    """Applies the placer's writes to the store, as the watches would, and records them."""

    def __init__(self, store: ClusterStore) -> None:
        self.store = store
        self.status_writes: list[tuple[str, dict[str, Any]]] = []
        self.events: list[tuple[str, str, str]] = []
        self.pod_events: list[tuple[str, str, str]] = []
        self.released: list[str] = []
        self.deleted: list[str] = []
        self.deleted_by_uid: list[tuple[str, str | None]] = []
        self.pods: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.lagging = False  # releases reach the API server but not (yet) the store

    def add_pod(self, obj: dict[str, Any]) -> None:
        obj["metadata"].setdefault("resourceVersion", "1")
        obj["metadata"].setdefault("creationTimestamp", rfc3339(NOW - 100))
        self.pods[f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"] = obj
        with self.store.lock:
            self.store.upsert_pod(copy.deepcopy(obj))

    def add_job(self, obj: dict[str, Any]) -> None:
        obj["metadata"].setdefault("creationTimestamp", rfc3339(NOW - 100))
        gang = "gang:" if obj.get("kind") == "Gang" else ""
        self.jobs[f"{obj['metadata']['namespace']}/{gang}{obj['metadata']['name']}"] = obj
        with self.store.lock:
            self.store.upsert_job(copy.deepcopy(obj))

    def patch_job_status(
        self,
        namespace: str,
        name: str,
        status: dict[str, Any],
        *,
        uid: str | None = None,
        tests: list[dict[str, Any]] | None = None,
        plural: str = "tensorparalleljobs",
    ) -> None:
        job = self.jobs[f"{namespace}/{'gang:' if plural == 'gangs' else ''}{name}"]
        assert uid in (None, job["metadata"]["uid"])
        for test in tests or []:  # JSON patch test ops, a missing member reading as null
            found: Any = job
            for part in test["path"].strip("/").split("/"):
                found = found.get(part) if isinstance(found, dict) else None
            if found != test["value"]:
                raise ApiException(status=422, reason=f"test of {test['path']} failed")
        # the API server serialises maps with sorted keys (Go): so does this writer
        status = _sorted_maps(status)
        self.status_writes.append((name, copy.deepcopy(status)))
        _merge_patch(job.setdefault("status", {}), copy.deepcopy(status))
        with self.store.lock:
            self.store.upsert_job(copy.deepcopy(job))

    def job_event(self, job: Any, kind: str, reason: str, message: str) -> None:
        self.events.append((job.name, reason, message))

    def pod_event(self, pod: Any, reason: str, message: str) -> None:
        self.pod_events.append((pod.name, reason, message))

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.pods[f"{namespace}/{name}"])

    def release_pod(
        self,
        namespace: str,
        name: str,
        resource_version: str,
        affinity: dict[str, Any] | None,
        remaining_gates: list[dict[str, Any]],
        *,
        annotations: dict[str, str] | None = None,
        annotated: bool = True,
    ) -> None:
        pod = self.pods[f"{namespace}/{name}"]
        if affinity is not None:
            pod["spec"]["affinity"] = affinity
        pod["metadata"].setdefault("annotations", {}).update(annotations or {})
        pod["spec"]["schedulingGates"] = remaining_gates
        self.released.append(name)
        if not self.lagging:
            with self.store.lock:
                self.store.upsert_pod(copy.deepcopy(pod))

    def release_known_pod(
        self,
        pod: Any,
        affinity: dict[str, Any] | None,
        remaining_gates: list[dict[str, Any]],
        *,
        annotations: dict[str, str] | None = None,
    ) -> None:
        current = self.pods[f"{pod.namespace}/{pod.name}"]
        if current["metadata"]["uid"] != pod.uid or current["spec"].get("schedulingGates") != list(
            pod.gates
        ):
            raise ApiException(status=422, reason="test failed")
        self.release_pod(
            pod.namespace, pod.name, "", affinity, remaining_gates, annotations=annotations
        )

    def delete_job_pods(self, namespace: str, job_name: str, label: str = JOB_LABEL) -> None:
        for pod in list(self.pods.values()):
            if (
                pod["metadata"]["namespace"] == namespace
                and pod["metadata"]["labels"].get(label) == job_name
            ):
                self.delete_pod(namespace, pod["metadata"]["name"])

    def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> None:
        self.deleted.append(name)
        self.deleted_by_uid.append((name, uid))
        self.pods.pop(f"{namespace}/{name}")
        with self.store.lock:
            self.store.delete_pod(f"{namespace}/{name}")

    def bind(self, name: str, node: str, namespace: str = "ns") -> None:
        pod = self.pods[f"{namespace}/{name}"]
        pod["spec"]["nodeName"] = node
        pod["status"]["phase"] = "Running"
        with self.store.lock:
            self.store.upsert_pod(copy.deepcopy(pod))


def _sorted_maps(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted_maps(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_maps(v) for v in value]
    return value


def _merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """Apply a JSON merge patch (RFC 7386): null deletes, objects merge."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge_patch(target[key], value)
        else:
            target[key] = value


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def two_leaves(store: ClusterStore, per_leaf: int = 4, **node_args: Any) -> list[str]:
    names = []
    for leaf in ("leaf-a", "leaf-b"):
        for i in range(per_leaf):
            name = f"{leaf}-n{i}"
            with store.lock:
                store.upsert_node(a_node(name, leaf, **node_args))
            names.append(name)
    return names


def gang(writer: RecordingWriter, name: str, workers: int, **job_args: Any) -> None:
    job = a_job(name, workers)
    job["spec"]["topology"] = {"mode": "required", "level": "leaf"}
    for key, value in job_args.items():
        if key == "created":
            job["metadata"]["creationTimestamp"] = value
        elif key == "topology":
            job["spec"]["topology"].update(value)
        elif key != "priority":
            job["spec"][key] = value
    writer.add_job(job)
    extra = {"priority": job_args["priority"]} if "priority" in job_args else {}
    make_workers(writer, name, workers, **extra)


def make_workers(
    writer: RecordingWriter, name: str, workers: int, *, gpus: int = 8, **pod_spec: Any
) -> None:
    """Create the gated worker pods of gang ``name``, each with ``gpus`` GPUs and as many RDMA
    devices, ``pod_spec`` added to its spec (also what the operator does after a re-plan)."""
    for index in range(workers):
        pod = a_worker(name, index, gpus=gpus)
        pod["spec"]["containers"][0]["resources"]["limits"]["rdma/ib"] = str(gpus)
        pod["spec"].update(copy.deepcopy(pod_spec))
        writer.add_pod(pod)


def half_node_gang(writer: RecordingWriter, name: str, workers: int, **pod_spec: Any) -> None:
    """A gang of ``workers`` workers of 4 GPUs and 4 RDMA devices each (half an 8-GPU node)."""
    job = a_job(name, workers)
    job["spec"].update(gpusPerWorker=4, tensorParallelSize=4)
    job["spec"]["topology"] = {"mode": "required", "level": "leaf"}
    writer.add_job(job)
    make_workers(writer, name, workers, gpus=4, **pod_spec)


def add_worker(
    writer: RecordingWriter, name: str, index: int, created: float, attempt: int | None = 0
) -> None:
    """Add worker ``index`` of gang ``name``, gated, created at ``created``."""
    worker = a_worker(name, index, attempt=attempt)
    worker["metadata"]["creationTimestamp"] = rfc3339(created)
    worker["spec"]["containers"][0]["resources"]["limits"]["rdma/ib"] = "8"
    writer.add_pod(worker)


def first_worker_only(writer: RecordingWriter, name: str, workers: int) -> None:
    """A gang of ``workers`` of which the operator has created worker 0 so far."""
    gang(writer, name, 1)
    writer.jobs[f"ns/{name}"]["spec"]["workers"] = workers
    writer.add_job(writer.jobs[f"ns/{name}"])


def placement(writer: RecordingWriter, name: str) -> dict[str, Any]:
    return dict(writer.jobs[f"ns/{name}"].get("status", {}).get("placement") or {})
