"""The extender's in-memory view of the cluster: nodes, pods and TensorParallelJobs.

Fed by list+watch (``kube.py``), read by the extender's hot path and the gang placer. Updates are
O(1) per event: per-node GPU/RDMA use is kept incrementally, so answering "what is free" never
walks the pods. All methods must be called with ``lock`` held by the caller when threads mix.
Pure data: no I/O here.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from tpfabric_core.api import GANG_GATE, JOB_LABEL, WORKER_INDEX_LABEL, TensorParallelJob

__all__ = [
    "GANG_GATE",
    "GPU_RESOURCE",
    "JOB_LABEL",
    "WORKER_INDEX_LABEL",
    "ClusterStore",
    "JobRecord",
    "NodeRecord",
    "PodRecord",
]

GPU_RESOURCE = "nvidia.com/gpu"


def parse_quantity(value: Any) -> int:
    """Return an integer count from a Kubernetes quantity of a countable resource."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    suffixes = {"k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    for suffix, factor in sorted(suffixes.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    if text.endswith("m"):
        return int(text[:-1]) // 1000
    return int(float(text))


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What placement needs of a node."""

    name: str
    labels: dict[str, str]
    allocatable: dict[str, int]
    ready: bool
    unschedulable: bool
    taints: tuple[tuple[str, str, str], ...]  # (key, value, effect)

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> NodeRecord:
        """Return the record of a Node object (a dict as the API returns it)."""
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        allocatable = {}
        for key, value in (status.get("allocatable") or {}).items():
            if "/" in key or key == "pods":
                try:
                    allocatable[key] = parse_quantity(value)
                except ValueError:
                    continue
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        return cls(
            name=meta["name"],
            labels=dict(meta.get("labels") or {}),
            allocatable=allocatable,
            ready=conditions.get("Ready") == "True",
            unschedulable=bool(spec.get("unschedulable")),
            taints=tuple(
                (t.get("key", ""), t.get("value", ""), t.get("effect", ""))
                for t in spec.get("taints") or []
            ),
        )


@dataclass(frozen=True, slots=True)
class PodRecord:
    """What placement needs of a pod: where it is and what it takes."""

    namespace: str
    name: str
    uid: str
    node: str | None
    requests: dict[str, int]
    terminal: bool
    gated: bool
    job: str | None  # "namespace/job-name" of a TensorParallelJob worker
    worker_index: int | None

    @property
    def key(self) -> str:
        """Return ``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> PodRecord:
        """Return the record of a Pod object (a dict as the API returns it)."""
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        requests: dict[str, int] = {}
        for container in spec.get("containers") or []:
            resources = container.get("resources") or {}
            merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            for key, value in merged.items():
                if "/" in key:
                    try:
                        requests[key] = requests.get(key, 0) + parse_quantity(value)
                    except ValueError:
                        continue
        labels = meta.get("labels") or {}
        job_name = labels.get(JOB_LABEL)
        index = labels.get(WORKER_INDEX_LABEL, "")
        return cls(
            namespace=meta.get("namespace", "default"),
            name=meta["name"],
            uid=meta.get("uid", ""),
            node=spec.get("nodeName") or None,
            requests=requests,
            terminal=status.get("phase") in {"Succeeded", "Failed"},
            gated=any(g.get("name") == GANG_GATE for g in spec.get("schedulingGates") or []),
            job=f"{meta.get('namespace', 'default')}/{job_name}" if job_name else None,
            worker_index=int(index) if index.isdigit() else None,
        )


@dataclass(slots=True)
class JobRecord:
    """A TensorParallelJob as the placer sees it (spec parsed, plan as persisted)."""

    namespace: str
    name: str
    uid: str
    generation: int
    job: TensorParallelJob | None  # None when the object does not validate
    invalid_reason: str = ""
    raw_status: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Return ``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @property
    def planned_nodes(self) -> list[str]:
        """Return the persisted node of each rank (empty when there is no plan)."""
        placement = self.raw_status.get("placement") or {}
        nodes = placement.get("nodes") or []
        return [str(n) for n in nodes]

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> JobRecord:
        """Return the record of a TensorParallelJob object; invalid specs are kept, flagged."""
        meta = obj["metadata"]
        try:
            job: TensorParallelJob | None = TensorParallelJob.model_validate(obj)
            reason = ""
        except ValidationError as err:
            job, reason = None, str(err.errors()[0]["msg"])
        return cls(
            namespace=meta.get("namespace", "default"),
            name=meta["name"],
            uid=meta.get("uid", ""),
            generation=int(meta.get("generation") or 0),
            job=job,
            invalid_reason=reason,
            raw_status=dict(obj.get("status") or {}),
        )


class ClusterStore:
    """Nodes, pods and jobs by key, with per-node resource use kept incrementally."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.nodes: dict[str, NodeRecord] = {}
        self.pods: dict[str, PodRecord] = {}
        self.jobs: dict[str, JobRecord] = {}
        self.used: dict[str, dict[str, int]] = {}  # node -> resource -> amount
        self.workers: dict[str, dict[str, PodRecord]] = {}  # job key -> pod key -> pod
        #: bumped whenever the node set or a node's labels change (topology must be rebuilt)
        self.topology_generation = 0
        #: bumped on every change (the placer's "something happened" signal)
        self.generation = 0

    # -- nodes -------------------------------------------------------------------------------

    def upsert_node(self, obj: dict[str, Any]) -> None:
        """Add or replace a node."""
        node = NodeRecord.from_object(obj)
        old = self.nodes.get(node.name)
        if old is None or old.labels != node.labels:
            self.topology_generation += 1
        self.nodes[node.name] = node
        self.generation += 1

    def delete_node(self, name: str) -> None:
        """Forget a node."""
        if self.nodes.pop(name, None) is not None:
            self.topology_generation += 1
            self.generation += 1

    def replace_nodes(self, objs: list[dict[str, Any]]) -> None:
        """Replace every node (after a relist)."""
        self.nodes = {n.name: n for n in map(NodeRecord.from_object, objs)}
        self.topology_generation += 1
        self.generation += 1

    # -- pods --------------------------------------------------------------------------------

    def _account(self, pod: PodRecord, sign: int) -> None:
        if pod.node is not None and not pod.terminal:
            use = self.used.setdefault(pod.node, {})
            for key, amount in pod.requests.items():
                use[key] = use.get(key, 0) + sign * amount
        if pod.job is not None:
            members = self.workers.setdefault(pod.job, {})
            if sign > 0:
                members[pod.key] = pod
            else:
                members.pop(pod.key, None)
                if not members:
                    del self.workers[pod.job]

    def upsert_pod(self, obj: dict[str, Any]) -> None:
        """Add or replace a pod, keeping per-node use current."""
        pod = PodRecord.from_object(obj)
        old = self.pods.get(pod.key)
        if old is not None:
            self._account(old, -1)
        self.pods[pod.key] = pod
        self._account(pod, +1)
        self.generation += 1

    def delete_pod(self, key: str) -> None:
        """Forget a pod."""
        old = self.pods.pop(key, None)
        if old is not None:
            self._account(old, -1)
            self.generation += 1

    def replace_pods(self, objs: list[dict[str, Any]]) -> None:
        """Replace every pod (after a relist)."""
        self.pods, self.used, self.workers = {}, {}, {}
        for obj in objs:
            pod = PodRecord.from_object(obj)
            self.pods[pod.key] = pod
            self._account(pod, +1)
        self.generation += 1

    # -- jobs --------------------------------------------------------------------------------

    def upsert_job(self, obj: dict[str, Any]) -> None:
        """Add or replace a TensorParallelJob."""
        job = JobRecord.from_object(obj)
        self.jobs[job.key] = job
        self.generation += 1

    def delete_job(self, key: str) -> None:
        """Forget a TensorParallelJob."""
        if self.jobs.pop(key, None) is not None:
            self.generation += 1

    def replace_jobs(self, objs: list[dict[str, Any]]) -> None:
        """Replace every job (after a relist)."""
        self.jobs = {j.key: j for j in map(JobRecord.from_object, objs)}
        self.generation += 1

    # -- queries -----------------------------------------------------------------------------

    def free(self, node: str, resource: str) -> int:
        """Return the amount of ``resource`` allocatable on ``node`` and not used by bound pods."""
        record = self.nodes.get(node)
        if record is None:
            return 0
        return record.allocatable.get(resource, 0) - self.used.get(node, {}).get(resource, 0)
