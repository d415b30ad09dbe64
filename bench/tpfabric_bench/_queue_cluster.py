"""The deep-queue benchmark's cluster: the placer's store loaded with a busy fabric, and a writer
that applies the placer's writes back into that store, as the watches deliver them on a live
cluster.

The fabric is :class:`~tpfabric_bench._fake_apiserver.ClusterShape`'s (8-GPU nodes of
``uniform_fabric``: leaves of 8 nodes, spines of 4 leaves, blocks of 4 spines), its nodes as the
API server lists them (:func:`~tpfabric_bench._fake_apiserver.api_node`). Every node runs one
8-GPU worker of a running TensorParallelJob (one job of 8 per full leaf, planned and bound, the
last partial leaf too) and ``daemon_pods`` small pods of other controllers; ``finished`` jobs of
8 succeeded workers stay behind, as on a cluster that has been running a while. The backlog is
``waiting`` jobs of 8 workers x 8 GPUs that require one leaf: with every node busy, none fits.

:class:`AppliedWrites` is the placer's writer (the methods of
:class:`~tpfabric_scheduler.kube.KubeWriter` the placer calls): a status patch is applied to the
job's object (its ``test`` ops checked, as the API server does) and the object goes back into the
store; a released worker is bound at once to its planned node (kube-scheduler's part, taken as
instant) and goes back too. Each write wakes the placer loop, as a watch event does. Events are
counted, not kept.

This module measures nothing and must never be imported by the product.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from kubernetes.client.rest import ApiException

from tpfabric_bench._fake_apiserver import ClusterShape, api_node
from tpfabric_core.api import (
    ATTEMPT_LABEL,
    GANG_GATE,
    GROUP,
    JOB_LABEL,
    SCHEDULER_NAME,
    VERSION,
    WORKER_INDEX_LABEL,
    Placement,
)
from tpfabric_core.api.placement import PLANNED, placement_of_status, stored_status
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.store import (
    ClusterStore,
    JobRecord,
    NodeRecord,
    PodRecord,
    index_jobs,
    index_nodes,
    index_pods,
)

__all__ = ["GANG_WORKERS", "AppliedWrites", "QueueShape", "load_cluster"]

#: workers of a running, finished or waiting gang (one leaf's nodes)
GANG_WORKERS = 8
_GPUS = 8
_BACKLOG = "backlog"
_STREAM = "stream"


@dataclass(frozen=True)
class QueueShape:
    """What the benchmark's cluster holds (see the module)."""

    nodes: int
    waiting: int
    daemon_pods: int = 2
    #: jobs of 8 succeeded workers (None: one per 8 nodes)
    finished: int | None = None

    @property
    def finished_jobs(self) -> int:
        """Return how many finished jobs stay behind."""
        return self.nodes // GANG_WORKERS if self.finished is None else self.finished


def _uid(key: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"tpfabric-bench-queue/{key}"))


def job_object(
    namespace: str,
    name: str,
    workers: int,
    created: float,
    *,
    topology: dict[str, Any],
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Return a TensorParallelJob of ``workers`` 8-GPU workers as the API server lists it."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TensorParallelJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": _uid(f"job/{namespace}/{name}"),
            "generation": 1,
            "resourceVersion": "1",
            "creationTimestamp": rfc3339(created),
        },
        "spec": {
            "workers": workers,
            "gpusPerWorker": _GPUS,
            "tensorParallelSize": _GPUS,
            "pipelineParallelSize": 1,
            "topology": topology,
            "rdma": {"resourceName": "rdma/ib", "count": _GPUS, "gpuDirect": "preferred"},
            "template": {"spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]}},
        },
        "status": status or {},
    }


def worker_object(
    namespace: str,
    job: str,
    rank: int,
    created: float,
    *,
    node: str | None = None,
    phase: str = "Pending",
) -> dict[str, Any]:
    """Return worker ``rank`` of ``job``: gated without ``node``, else bound there."""
    resources = {
        "nvidia.com/gpu": str(_GPUS),
        "rdma/ib": str(_GPUS),
        "cpu": "96",
        "memory": "1600Gi",
    }
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER_NAME,
        "containers": [
            {"name": "trainer", "resources": {"limits": resources, "requests": resources}}
        ],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    if node is None:
        spec["schedulingGates"] = [{"name": GANG_GATE}]
    else:
        spec["nodeName"] = node
    name = f"{job}-worker-{rank}"
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": _uid(f"pod/{namespace}/{name}"),
            "resourceVersion": "1",
            "creationTimestamp": rfc3339(created),
            "labels": {JOB_LABEL: job, WORKER_INDEX_LABEL: str(rank), ATTEMPT_LABEL: "0"},
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def _daemon_pod(node: str, k: int, created: float) -> dict[str, Any]:
    resources = {"cpu": "100m", "memory": "128Mi"}
    name = f"agent-{k}-{node}"
    return {
        "metadata": {
            "name": name,
            "namespace": "monitoring",
            "uid": _uid(f"pod/monitoring/{name}"),
            "creationTimestamp": rfc3339(created),
            "labels": {"app.kubernetes.io/name": f"agent-{k}"},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "agent", "resources": {"requests": resources}}],
        },
        "status": {"phase": "Running"},
    }


def _planned(nodes: list[str], leaf: str, when: float) -> dict[str, Any]:
    placement = Placement(
        state=PLANNED,
        message=f"planned on leaf {leaf}",
        level="leaf",
        domain=leaf,
        nodes=nodes,
        hops=1,
        planned_at=rfc3339(when),
        released_at=rfc3339(when),
        attempt=0,
    )
    return stored_status(placement)


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = orjson.loads(orjson.dumps(obj))
    return copied


@dataclass(eq=False)
class AppliedWrites:
    """The objects of the benchmark's cluster and the placer's writer over them (see the
    module). Every method may be called from the placer's threads and the driver at once."""

    store: ClusterStore
    #: wakes the placer loop (as a watch event does); set by the driver
    wake: Callable[[], None] = lambda: None
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: bound, running worker pods: what the churn completes
    running: list[str] = field(default_factory=list)
    #: job key -> perf_counter time its first Planned placement was written
    planned_at: dict[str, float] = field(default_factory=dict)
    #: backlog job keys whose status says Waiting
    backlog_waiting: set[str] = field(default_factory=set)
    status_writes: int = 0
    events: int = 0
    releases: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- the placer's writer ----------------------------------------------------------------

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
        """Apply a status patch as the API server does (JSON patch ``test`` ops first; with
        ``uid`` each top-level key replaced whole, else a merge patch) and hand the job to the
        store."""
        key = f"{namespace}/{name}"
        with self._lock:
            job = self.jobs[key]
            if uid is not None and job["metadata"]["uid"] != uid:
                raise ApiException(status=422, reason="test of /metadata/uid failed")
            for test in tests or []:
                found: Any = job
                for part in test["path"].strip("/").split("/"):
                    found = found.get(part) if isinstance(found, dict) else None
                if found != test["value"]:
                    raise ApiException(status=422, reason=f"test of {test['path']} failed")
            target = job.setdefault("status", {})
            for field_name, value in status.items():
                if value is None:
                    target.pop(field_name, None)
                elif (
                    uid is None
                    and isinstance(value, dict)
                    and isinstance(target.get(field_name), dict)
                ):
                    target[field_name] = {**target[field_name], **value}
                else:
                    target[field_name] = value
            job["metadata"]["resourceVersion"] = str(int(job["metadata"]["resourceVersion"]) + 1)
            self.status_writes += 1
            placement = placement_of_status(target)
            if placement.state == PLANNED and key not in self.planned_at:
                self.planned_at[key] = time.perf_counter()
            if namespace == _BACKLOG and placement.waiting:
                self.backlog_waiting.add(key)
            copied = _copy(job)
        record = JobRecord.from_object(copied)  # the informer parses outside the store's lock
        with self.store.lock:
            self.store.put_job(record)
        self.wake()

    def job_event(self, job: Any, kind: str, reason: str, message: str) -> None:
        """Count an Event on a job."""
        with self._lock:
            self.events += 1

    def pod_event(self, pod: Any, reason: str, message: str) -> None:
        """Count an Event on a pod."""
        with self._lock:
            self.events += 1

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        """Return the pod as stored now."""
        with self._lock:
            return _copy(self.pods[f"{namespace}/{name}"])

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
        """Ungate the pod and bind it to its rank's planned node at once."""
        key = f"{namespace}/{name}"
        with self._lock:
            pod = self.pods[key]
            if resource_version and pod["metadata"]["resourceVersion"] != resource_version:
                raise ApiException(status=409, reason="the pod changed")
            spec = pod["spec"]
            if affinity is not None:
                spec["affinity"] = affinity
            pod["metadata"].setdefault("annotations", {}).update(annotations or {})
            spec["schedulingGates"] = remaining_gates
            if not remaining_gates:
                job = self.jobs[f"{namespace}/{pod['metadata']['labels'][JOB_LABEL]}"]
                nodes = placement_of_status(job.get("status")).nodes
                rank = int(pod["metadata"]["labels"][WORKER_INDEX_LABEL])
                if rank < len(nodes):
                    spec["nodeName"] = nodes[rank]
                    pod["status"]["phase"] = "Running"
                    self.running.append(key)
            pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)
            self.releases += 1
            copied = _copy(pod)
        self._put_pod(copied)

    def release_known_pod(
        self,
        pod: PodRecord,
        affinity: dict[str, Any] | None,
        remaining_gates: list[dict[str, Any]],
        *,
        annotations: dict[str, str] | None = None,
    ) -> None:
        """Release ``pod`` as the store knows it (refused if it is another pod now)."""
        with self._lock:
            current = self.pods.get(pod.key)
            if current is None or current["metadata"]["uid"] != pod.uid:
                raise ApiException(status=422, reason="test of /metadata/uid failed")
        self.release_pod(
            pod.namespace, pod.name, "", affinity, remaining_gates, annotations=annotations
        )

    def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> None:
        """Delete the pod (only incarnation ``uid`` when given)."""
        key = f"{namespace}/{name}"
        with self._lock:
            pod = self.pods.get(key)
            if pod is None or (uid is not None and pod["metadata"]["uid"] != uid):
                return
            del self.pods[key]
        with self.store.lock:
            self.store.delete_pod(key)
        self.wake()

    # -- the driver's changes ---------------------------------------------------------------

    def _put_pod(self, obj: dict[str, Any]) -> None:
        record = PodRecord.from_object(obj)  # parsed outside the store's lock, as informers do
        with self.store.lock:
            self.store.put_pod(record)
        self.wake()

    def complete(self, pick: Callable[[int], int]) -> str | None:
        """Let one running worker (``pick(len)`` of them) succeed; return its node."""
        with self._lock:
            if not self.running:
                return None
            index = pick(len(self.running))
            self.running[index], self.running[-1] = self.running[-1], self.running[index]
            key = self.running.pop()
            pod = self.pods[key]
            pod["status"]["phase"] = "Succeeded"
            pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)
            copied = _copy(pod)
        self._put_pod(copied)
        return str(copied["spec"]["nodeName"])

    def add_gang(self, name: str, workers: int, topology: dict[str, Any]) -> float:
        """Create job ``name`` of the stream and all its workers, gated; return the
        perf_counter time its last worker was in the store."""
        now = time.time()
        job = job_object(_STREAM, name, workers, now, topology=topology)
        pods = [worker_object(_STREAM, name, rank, now) for rank in range(workers)]
        with self._lock:
            self.jobs[f"{_STREAM}/{name}"] = job
            for pod in pods:
                self.pods[f"{_STREAM}/{pod['metadata']['name']}"] = pod
            copies = [_copy(job), *(_copy(p) for p in pods)]
        record = JobRecord.from_object(copies[0])
        with self.store.lock:
            self.store.put_job(record)
        for pod in copies[1:]:
            self._put_pod(pod)
        return time.perf_counter()


def _running_gangs(
    writes: AppliedWrites, shape: ClusterShape, created: float
) -> Iterable[dict[str, Any]]:
    """Add one planned, bound gang per leaf; yield its job."""
    for k, leaf in enumerate(shape.leaves):
        name = f"train-{k:05d}"
        leaf_name = shape.leaf_labels[k]
        job = job_object(
            "running",
            name,
            len(leaf),
            created,
            topology={"mode": "required", "level": "leaf"},
            status={"phase": "Running", **_planned(leaf, leaf_name, created)},
        )
        for rank, node in enumerate(leaf):
            pod = worker_object("running", name, rank, created, node=node, phase="Running")
            writes.pods[f"running/{pod['metadata']['name']}"] = pod
            writes.running.append(f"running/{pod['metadata']['name']}")
        yield job


def _finished_gangs(
    writes: AppliedWrites, shape: ClusterShape, count: int, created: float
) -> Iterable[dict[str, Any]]:
    """Add ``count`` finished gangs of 8 succeeded workers; yield their jobs."""
    full = [k for k, leaf in enumerate(shape.leaves) if len(leaf) == GANG_WORKERS]
    for k in range(count):
        leaf_index = full[k % len(full)]
        leaf = shape.leaves[leaf_index]
        name = f"done-{k:05d}"
        job = job_object(
            "finished",
            name,
            GANG_WORKERS,
            created,
            topology={"mode": "required", "level": "leaf"},
            status={
                "phase": "Succeeded",
                **_planned(leaf, shape.leaf_labels[leaf_index], created),
            },
        )
        for rank, node in enumerate(leaf):
            pod = worker_object("finished", name, rank, created, node=node, phase="Succeeded")
            writes.pods[f"finished/{pod['metadata']['name']}"] = pod
        yield job


def load_cluster(queue: QueueShape, now: float) -> AppliedWrites:
    """Return the writer over a store loaded with ``queue``'s cluster (see the module): the
    backlog created before anything else waits, in order, the oldest ``waiting`` seconds ago."""
    shape = ClusterShape(0, queue.nodes)
    store = ClusterStore()
    writes = AppliedWrites(store)
    store.install_nodes(
        index_nodes(NodeRecord.from_object(api_node(shape, k)) for k in range(queue.nodes))
    )
    long_ago = now - 86_400
    jobs = [
        *_running_gangs(writes, shape, long_ago),
        *_finished_gangs(writes, shape, queue.finished_jobs, long_ago),
    ]
    for k in range(queue.waiting):
        name = f"wait-{k:05d}"
        created = now - queue.waiting - 60 + k
        jobs.append(
            job_object(
                _BACKLOG,
                name,
                GANG_WORKERS,
                created,
                topology={"mode": "required", "level": "leaf"},
            )
        )
        for rank in range(GANG_WORKERS):
            pod = worker_object(_BACKLOG, name, rank, created)
            writes.pods[f"{_BACKLOG}/{pod['metadata']['name']}"] = pod
    for job in jobs:
        writes.jobs[f"{job['metadata']['namespace']}/{job['metadata']['name']}"] = job
    others = [
        _daemon_pod(node, k, long_ago)
        for node in shape.node_names
        for k in range(queue.daemon_pods)
    ]
    store.install_jobs(index_jobs(JobRecord.from_object(_copy(j)) for j in jobs))
    store.install_pods(
        index_pods(
            PodRecord.from_object(p) for p in (*(_copy(p) for p in writes.pods.values()), *others)
        )
    )
    return writes
