"""The extender's in-memory view of the cluster: nodes, pods and TensorParallelJobs.

Fed by list+watch (``kube.py``), read by the extender's hot path and the gang placer. Updates are
O(1) per event: per-node GPU/RDMA use is kept incrementally, so answering "what is free" never
walks the pods. All methods must be called with ``lock`` held by the caller when threads mix.
Pure data: no I/O here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from tpfabric_core.api import (
    ATTEMPT_LABEL,
    GANG_GATE,
    JOB_LABEL,
    KIND,
    PLURAL,
    WORKER_INDEX_LABEL,
    TensorParallelJob,
)
from tpfabric_core.api.gang import GANG_KIND, GANG_PLURAL, Gang
from tpfabric_core.fabric.agent_heartbeat import HeartbeatLease, Heartbeats, node_of_lease
from tpfabric_core.fabric.link_publish import (
    CONDITION_TYPE,
    DETAIL_ANNOTATION,
    bandwidth_kept,
    read_detail,
)
from tpfabric_core.gangs import GANG_LABEL, RANK_LABEL
from tpfabric_core.input_limits import whole_number
from tpfabric_core.labels import HEALTH
from tpfabric_core.placement.pod_fit import host_ports, pod_requests, repels_peers, resource_amount
from tpfabric_core.pod_wiring import GPU_RESOURCE
from tpfabric_core.rail_ports import node_rails

__all__ = [
    "GANG_GATE",
    "GANG_KEY",
    "GPU_RESOURCE",
    "JOB_LABEL",
    "WORKER_INDEX_LABEL",
    "ClusterStore",
    "JobRecord",
    "NodeRecord",
    "PodIndex",
    "PodRecord",
    "gang_key",
    "index_jobs",
    "index_nodes",
    "index_pods",
]


#: a Gang record's key is ``namespace/gang:name``: ``:`` is in no object name, so a Gang and a
#: TensorParallelJob of the same name never share a key
GANG_KEY = "gang:"


def gang_key(namespace: str, name: str) -> str:
    """Return the store's key of a Gang record (its pods' ``PodRecord.job``)."""
    return f"{namespace}/{GANG_KEY}{name}"


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What placement needs of a node."""

    name: str
    labels: dict[str, str]
    allocatable: dict[str, int]
    ready: bool
    unschedulable: bool
    taints: tuple[tuple[str, str, str], ...]  # (key, value, effect)
    #: of a node labelled degraded, what its worst rail keeps of its rate, as the fabric agent
    #: measured it (None: unmeasured, or not degraded)
    kept: float | None = None
    #: why the node's fabric-health annotation could not be read ("" when it could)
    detail_problem: str = ""
    #: its rails in order, each with its port GUID where its rail map gives one (the pods'
    #: ``tpfabric.io/rails``); a map that cannot be used leaves the GUIDs out
    rails: tuple[tuple[int, str | None], ...] = ()
    #: its ``FabricHealthy`` condition's status, reason and lastTransitionTime (empty: none)
    fabric_condition: tuple[str, str, str] | tuple[()] = ()

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> NodeRecord:
        """Return the record of a Node object (a dict as the API returns it)."""
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        allocatable = {}
        for key, value in (status.get("allocatable") or {}).items():
            try:
                allocatable[key] = resource_amount(key, value)
            except ValueError:
                continue  # a quantity we cannot read counts as absent (never a crash)
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        fabric = next(
            (c for c in status.get("conditions") or [] if c.get("type") == CONDITION_TYPE), None
        )
        node_labels = dict(meta.get("labels") or {})
        annotations = meta.get("annotations") or {}
        kept, problem = None, ""
        if node_labels.get(HEALTH) == "degraded":
            health_rails, problem = read_detail(annotations.get(DETAIL_ANNOTATION))
            kept = bandwidth_kept(health_rails)
        rails, _ = node_rails(node_labels, annotations)  # the fabric agent reports a bad map
        return cls(
            name=meta["name"],
            labels=node_labels,
            allocatable=allocatable,
            ready=conditions.get("Ready") == "True",
            unschedulable=bool(spec.get("unschedulable")),
            taints=tuple(
                (t.get("key", ""), t.get("value", ""), t.get("effect", ""))
                for t in spec.get("taints") or []
            ),
            kept=kept,
            detail_problem=problem,
            rails=rails,
            fabric_condition=(
                (
                    str(fabric.get("status") or ""),
                    str(fabric.get("reason") or ""),
                    str(fabric.get("lastTransitionTime") or ""),
                )
                if fabric
                else ()
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
    #: "namespace/job-name" of a TensorParallelJob's worker, "namespace/gang:name" of a Gang's pod
    job: str | None
    worker_index: int | None
    priority: int = 0
    deleting: bool = False
    created: str = ""  # metadata.creationTimestamp
    #: a worker's nodeSelector, affinity and tolerations (empty for other pods: kept slim)
    scheduling: dict[str, Any] = field(default_factory=dict)
    #: a worker's scheduling gates as the API server has them (to release it in one write)
    gates: tuple[dict[str, Any], ...] = ()
    #: the gang attempt a worker was created for (its ``tpfabric.io/attempt`` label)
    attempt: int | None = None
    #: (protocol, hostPort) the pod takes on its node (any pod: the NodePorts filter)
    host_ports: frozenset[tuple[str, int]] = frozenset()
    #: a worker whose required pod anti-affinity keeps its gang's workers one per node
    repels_peers: bool = False
    #: a worker kube-scheduler could not bind: its PodScheduled=False (Unschedulable) message
    unschedulable: str = ""

    @property
    def key(self) -> str:
        """Return ``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> PodRecord:
        """Return the record of a Pod object (a dict as the API returns it)."""
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        try:
            requests = pod_requests(spec)
        except ValueError:
            requests = {"pods": 1}  # the API server validated it; never crash on a quantity
        labels = meta.get("labels") or {}
        namespace = meta.get("namespace", "default")
        job_name = labels.get(JOB_LABEL)
        job_key = f"{namespace}/{job_name}" if job_name else None
        index = labels.get(WORKER_INDEX_LABEL)
        if not job_name and labels.get(GANG_LABEL):  # a pod of a gang another controller made
            job_name = labels[GANG_LABEL]
            job_key = gang_key(namespace, job_name)
            index = labels.get(RANK_LABEL)
        scheduling = (
            {k: spec[k] for k in ("nodeSelector", "affinity", "tolerations") if spec.get(k)}
            if job_name
            else {}
        )
        attempt = labels.get(ATTEMPT_LABEL)
        peers = {k: v for k, v in labels.items() if k != WORKER_INDEX_LABEL}
        return cls(
            namespace=namespace,
            name=meta["name"],
            uid=meta.get("uid", ""),
            node=spec.get("nodeName") or None,
            requests=requests,
            terminal=status.get("phase") in {"Succeeded", "Failed"},
            gated=any(g.get("name") == GANG_GATE for g in spec.get("schedulingGates") or []),
            job=job_key,
            worker_index=whole_number(index),
            priority=int(spec.get("priority") or 0),
            deleting=meta.get("deletionTimestamp") is not None,
            created=str(meta.get("creationTimestamp") or ""),
            scheduling=scheduling,
            gates=tuple(spec.get("schedulingGates") or ()) if job_name else (),
            attempt=whole_number(attempt) if job_name else None,
            host_ports=host_ports(spec),
            repels_peers=bool(job_name) and repels_peers(spec, namespace, peers),
            unschedulable=_unschedulable(status) if job_name else "",
        )


def _unschedulable(status: dict[str, Any]) -> str:
    """Return kube-scheduler's message of a pod it could not bind ("" when it did not say so)."""
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return str(condition.get("message") or "Unschedulable")
    return ""


@dataclass(slots=True)
class JobRecord:
    """A gang as the placer sees it (spec parsed, plan as persisted): a TensorParallelJob, or the
    Gang record of pods another controller made (``kind``); both plan alike."""

    namespace: str
    name: str
    uid: str
    generation: int
    job: TensorParallelJob | Gang | None  # None when the object does not validate
    invalid_reason: str = ""
    raw_status: dict[str, Any] = field(default_factory=dict)
    created: str = ""  # metadata.creationTimestamp (RFC 3339 sorts as text)
    kind: str = KIND

    @property
    def key(self) -> str:
        """Return ``namespace/name`` (``namespace/gang:name`` for a Gang)."""
        if self.kind == GANG_KIND:
            return gang_key(self.namespace, self.name)
        return f"{self.namespace}/{self.name}"

    @property
    def plural(self) -> str:
        """Return the API resource the record is (for writes)."""
        return GANG_PLURAL if self.kind == GANG_KIND else PLURAL

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
        kind = GANG_KIND if obj.get("kind") == GANG_KIND else KIND
        try:
            # the spec decides what to plan; the status is read raw (a status this version does
            # not know must never hide a job from the placer)
            body = {k: v for k, v in obj.items() if k != "status"}
            job: TensorParallelJob | Gang | None = (
                Gang.model_validate(body)
                if kind == GANG_KIND
                else TensorParallelJob.model_validate(body)
            )
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
            created=str(meta.get("creationTimestamp") or ""),
            kind=kind,
        )


class ClusterStore:
    """Nodes, pods and jobs by key, with per-node resource use kept incrementally."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.nodes: dict[str, NodeRecord] = {}
        self.pods: dict[str, PodRecord] = {}
        self.jobs: dict[str, JobRecord] = {}
        #: the kinds of record ``jobs`` may hold (TensorParallelJob, Gang)
        self._kinds: set[str] = set()
        self.used: dict[str, dict[str, int]] = {}  # node -> resource -> amount
        self.workers: dict[str, dict[str, PodRecord]] = {}  # job key -> pod key -> pod
        #: node -> (protocol, hostPort) -> pods holding it (only nodes where some pod has one)
        self.ports_used: dict[str, dict[tuple[str, int], int]] = {}
        #: bumped whenever the node set or a node's labels change (topology must be rebuilt)
        self.topology_generation = 0
        #: bumped on every change (the placer's "something happened" signal)
        self.generation = 0
        #: bumped when free capacity may have changed: nodes, pods bound/unbound/gone, plans
        self.capacity_generation = 0
        #: bumped only when capacity may have grown for a waiting gang: a bound pod finished or
        #: went, a node changed, a plan's reservations went, a worker bound (its rank's
        #: reservation elsewhere ends). A pod binding or a new plan never lets a waiting gang
        #: fit, so it is not re-planned for those (in a busy cluster, most changes)
        self.freed_generation = 0
        #: plans written by the placer that the job watch has not delivered yet: job uid -> plan
        self.fresh_plans: dict[str, dict[str, Any]] = {}
        #: the namespaces that opted in to gangs of other controllers (``tpfabric.io/gangs=
        #: enabled``); None while they are not watched (every namespace counts as opted in)
        self.gang_namespaces: frozenset[str] | None = None
        #: monotonic time the placer loop last finished a cycle (liveness); None before the first
        self.placer_heartbeat: float | None = None
        #: the fabric agents' heartbeats (their Leases, as this process saw them renewed)
        self.heartbeats = Heartbeats()
        #: the nodes whose fabric agent is silent: their link health is unknown, and new plans
        #: treat them as degraded (set by :mod:`.agent_silence`)
        self.silent_nodes: frozenset[str] = frozenset()
        #: the clock heartbeats are timed by (monotonic seconds)
        self.clock: Callable[[], float] = time.monotonic
        self._reservations: tuple[int, dict[str, tuple[tuple[str, int], ...]]] = (-1, {})

    def view(self) -> ClusterStore:
        """Return a copy of the store to read without its lock (call with the lock held).

        O(nodes + jobs) references: the inner maps (a node's use, a job's workers) are shared,
        and the store replaces them rather than changing them (:func:`_account`); records are
        never changed. The placer plans on a view, so that the extender's answers (which take
        the lock) never wait for a cycle's reading of 5,000 nodes and every job. A view holds
        no pods by key (the placer reads a job's pods from ``workers``), and nobody writes to
        it but what it caches itself.
        """
        copy = ClusterStore()
        copy.nodes = dict(self.nodes)
        copy.jobs = dict(self.jobs)
        copy._kinds = set(self._kinds)
        copy.used = dict(self.used)
        copy.workers = dict(self.workers)
        copy.ports_used = dict(self.ports_used)
        copy.fresh_plans = dict(self.fresh_plans)
        copy.gang_namespaces = self.gang_namespaces
        copy.silent_nodes = self.silent_nodes
        copy.topology_generation = self.topology_generation
        copy.generation = self.generation
        copy.capacity_generation = self.capacity_generation
        copy.freed_generation = self.freed_generation
        copy._reservations = self._reservations  # immutable once made
        return copy

    # -- nodes -------------------------------------------------------------------------------

    def upsert_node(self, obj: dict[str, Any]) -> None:
        """Add or replace a node."""
        self.put_node(NodeRecord.from_object(obj))

    def put_node(self, node: NodeRecord) -> None:
        """Add or replace a node record (parsed outside the lock)."""
        old = self.nodes.get(node.name)
        if old is None or old.labels != node.labels:
            self.topology_generation += 1
        if old != node:
            self.capacity_generation += 1
            self.freed_generation += 1
        self.nodes[node.name] = node
        self.generation += 1

    def delete_node(self, name: str) -> None:
        """Forget a node."""
        if self.nodes.pop(name, None) is not None:
            self.topology_generation += 1
            self.capacity_generation += 1
            self.freed_generation += 1  # a domain changed shape: what could fit is asked again
            self.generation += 1

    # -- fabric agents' heartbeats ---------------------------------------------------------

    def install_heartbeats(self, leases: list[HeartbeatLease]) -> None:
        """Replace every heartbeat (after a list of the agents' Leases)."""
        self.heartbeats.replace(leases, self.clock())

    def put_heartbeat(self, lease: HeartbeatLease) -> None:
        """Note a heartbeat Lease as its watch delivered it."""
        self.heartbeats.observe(lease, self.clock())

    def delete_heartbeat(self, key: str) -> None:
        """Forget the heartbeat of the Lease ``namespace/name`` (deleted)."""
        node = node_of_lease(key.split("/", 1)[-1])
        if node is not None:
            self.heartbeats.forget(node)

    def mark_silent(self, nodes: frozenset[str]) -> bool:
        """Set the nodes whose agent is silent; return whether that changed (the snapshot's
        health changes with it: what may fit is looked at again)."""
        if nodes == self.silent_nodes:
            return False
        self.silent_nodes = nodes
        self.capacity_generation += 1
        self.freed_generation += 1
        self.generation += 1
        return True

    def replace_nodes(self, objs: list[dict[str, Any]]) -> None:
        """Replace every node (after a relist)."""
        self.install_nodes(index_nodes(map(NodeRecord.from_object, objs)))

    # -- namespaces opted in to gangs ---------------------------------------------------------

    def gangs_allowed_in(self, namespace: str) -> bool:
        """Return whether Gang records of ``namespace`` may be planned (it opted in)."""
        return self.gang_namespaces is None or namespace in self.gang_namespaces

    def install_gang_namespaces(self, names: frozenset[str]) -> frozenset[str] | None:
        """Replace the opted-in namespaces (after a list); return the set replaced."""
        old, self.gang_namespaces = self.gang_namespaces, names
        self.generation += 1
        self.capacity_generation += 1
        return old

    def put_gang_namespace(self, name: str) -> None:
        """Note a namespace that opted in."""
        self.gang_namespaces = (self.gang_namespaces or frozenset()) | {name}
        self.generation += 1
        self.capacity_generation += 1

    def delete_gang_namespace(self, name: str) -> None:
        """Forget a namespace that opted out (or was deleted)."""
        self.gang_namespaces = (self.gang_namespaces or frozenset()) - {name}
        self.generation += 1

    def install_nodes(self, nodes: dict[str, NodeRecord]) -> dict[str, NodeRecord]:
        """Replace every node with ``nodes`` (from :func:`index_nodes`): O(1) under the lock.

        Return the nodes replaced, for the caller to free outside the lock.
        """
        old, self.nodes = self.nodes, nodes
        self.topology_generation += 1
        self.capacity_generation += 1
        self.freed_generation += 1
        self.generation += 1
        return old

    # -- pods --------------------------------------------------------------------------------

    def _account(self, pod: PodRecord, sign: int) -> None:
        _account(self.used, self.ports_used, self.workers, pod, sign)

    def upsert_pod(self, obj: dict[str, Any]) -> None:
        """Add or replace a pod, keeping per-node use current."""
        self.put_pod(PodRecord.from_object(obj))

    def put_pod(self, pod: PodRecord) -> None:
        """Add or replace a pod record (parsed outside the lock), keeping per-node use current."""
        old = self.pods.get(pod.key)
        if old is not None:
            self._account(old, -1)
        self.pods[pod.key] = pod
        self._account(pod, +1)
        if old is None or _placement_facts(old) != _placement_facts(pod):
            self.capacity_generation += 1
            if old is not None and _frees(old, pod):
                self.freed_generation += 1
        self.generation += 1

    def delete_pod(self, key: str) -> None:
        """Forget a pod."""
        old = self.pods.pop(key, None)
        if old is not None:
            self._account(old, -1)
            self.capacity_generation += 1
            if old.node is not None and not old.terminal:
                self.freed_generation += 1
            self.generation += 1

    def replace_pods(self, objs: list[dict[str, Any]]) -> None:
        """Replace every pod (after a relist)."""
        self.install_pods(index_pods(map(PodRecord.from_object, objs)))

    def install_pods(self, index: PodIndex) -> PodIndex:
        """Replace every pod with ``index`` (from :func:`index_pods`, built outside the lock):
        O(1) under the lock, so a relist of 50,000 pods never holds the extender's requests.

        Return the index replaced: freeing 50,000 records at once is one long deallocation that
        holds the interpreter, so the caller frees it outside the lock, piece by piece.
        """
        old = PodIndex(self.pods, self.used, self.workers, self.ports_used)
        self.pods, self.used = index.pods, index.used
        self.workers, self.ports_used = index.workers, index.ports_used
        self.capacity_generation += 1
        self.freed_generation += 1
        self.generation += 1
        return old

    # -- jobs --------------------------------------------------------------------------------

    def upsert_job(self, obj: dict[str, Any]) -> None:
        """Add or replace a TensorParallelJob."""
        self.put_job(JobRecord.from_object(obj))

    def put_job(self, job: JobRecord) -> None:
        """Add or replace a TensorParallelJob record (parsed and validated outside the lock)."""
        old = self.jobs.get(job.key)
        self.jobs[job.key] = job
        self._kinds.add(job.kind)
        if old is None or _job_facts(old) != _job_facts(job):
            self.capacity_generation += 1
            if old is not None and _holds(old) and not _holds(job):
                self.freed_generation += 1  # its plan's reservations went
        self.generation += 1

    def delete_job(self, key: str) -> None:
        """Forget a TensorParallelJob."""
        old = self.jobs.pop(key, None)
        if old is not None:
            self.fresh_plans.pop(old.uid, None)
            self.capacity_generation += 1
            self.freed_generation += 1
            self.generation += 1

    def replace_jobs(self, objs: list[dict[str, Any]]) -> None:
        """Replace every job (after a relist)."""
        self.install_jobs(index_jobs(map(JobRecord.from_object, objs)))

    def install_jobs(self, jobs: dict[str, JobRecord], kind: str = KIND) -> dict[str, JobRecord]:
        """Replace every record of ``kind`` with ``jobs`` (from :func:`index_jobs`).

        O(1) under the lock while the store holds one kind only; with TensorParallelJobs and
        Gangs both, the other kind's records are copied over. Return the records replaced, for
        the caller to free outside the lock.
        """
        old = self.jobs
        if self._kinds <= {kind}:
            self.jobs = jobs
        else:
            self.jobs = {**{k: j for k, j in old.items() if j.kind != kind}, **jobs}
        # may name a kind no record has any more (a later install then copies, nothing else)
        self._kinds = (self._kinds - {kind}) | ({kind} if jobs else set())
        self.capacity_generation += 1
        self.freed_generation += 1
        self.generation += 1
        return old

    # -- plans -------------------------------------------------------------------------------

    def record_plan(self, job: JobRecord, placement: dict[str, Any] | None) -> None:
        """Remember a placement just written for ``job`` until its watch event arrives.

        Keyed by the job's uid, so a job deleted and created again under the same name never
        sees the old job's plan. ``None`` records that the plan was dropped.
        """
        self.fresh_plans[job.uid] = dict(placement) if placement else {}
        self.generation += 1
        self.capacity_generation += 1
        if not placement or placement.get("state") != "Planned":
            self.freed_generation += 1

    def placement_of(self, job: JobRecord) -> dict[str, Any]:
        """Return the job's placement: the placer's fresh write if the watch lags, else stored."""
        stored: dict[str, Any] = job.raw_status.get("placement") or {}
        fresh = self.fresh_plans.get(job.uid)
        if fresh is None:
            return stored
        if _same_plan(stored, fresh):
            del self.fresh_plans[job.uid]  # the watch caught up
            return stored
        return fresh

    def holding_plans(self) -> Iterator[tuple[str, JobRecord, dict[str, Any]]]:
        """Yield (key, job, placement) of every job whose plan holds nodes: valid, not
        suspended, not finished (a finished job holds nothing, whatever its plan says)."""
        for key, job in self.jobs.items():
            if job.job is None or job.job.spec.suspend:
                continue
            if job.raw_status.get("phase") in ("Succeeded", "Failed"):
                continue
            placement = self.placement_of(job)
            if placement.get("state") == "Planned":
                yield key, job, placement

    def reservations(self) -> dict[str, tuple[tuple[str, int], ...]]:
        """Return node -> every (job key, rank) of a planned job not bound yet that the plan
        puts there, in job and rank order.

        A planned rank holds its node until its pod binds there (or the plan is dropped), also
        while the rank's pod is missing (a replacement in its backoff). Every rank counts:
        ranks of a gang whose workers take part of a node (4-GPU workers on 8-GPU nodes) share
        it, each holding its own demand. Cached per ``capacity_generation``: O(planned ranks)
        once per change, O(1) after that.
        """
        generation, cached = self._reservations
        if generation == self.capacity_generation:
            return cached
        held: dict[str, list[tuple[str, int]]] = {}
        for key, _, placement in self.holding_plans():
            # a rank holds its node unless its pod is bound there or has finished
            settled = {
                pod.worker_index
                for pod in self.workers.get(key, {}).values()
                if pod.node is not None or pod.terminal
            }
            for rank, node in enumerate(placement.get("nodes") or []):
                if rank not in settled:
                    held.setdefault(str(node), []).append((key, rank))
        frozen = {node: tuple(holders) for node, holders in held.items()}
        self._reservations = (self.capacity_generation, frozen)
        return frozen

    # -- queries -----------------------------------------------------------------------------

    def free(self, node: str, resource: str) -> int:
        """Return the amount of ``resource`` allocatable on ``node`` and not used by bound pods."""
        record = self.nodes.get(node)
        if record is None:
            return 0
        return record.allocatable.get(resource, 0) - self.used.get(node, {}).get(resource, 0)


@dataclass(frozen=True, slots=True)
class PodIndex:
    """Every pod by key and what the store derives from them (per-node use, workers by job,
    host ports by node): built by :func:`index_pods` outside the store's lock."""

    pods: dict[str, PodRecord]
    used: dict[str, dict[str, int]]
    workers: dict[str, dict[str, PodRecord]]
    ports_used: dict[str, dict[tuple[str, int], int]]


def index_pods(records: Iterable[PodRecord]) -> PodIndex:
    """Return the :class:`PodIndex` of ``records`` (pure: no store, no lock)."""
    index = PodIndex({}, {}, {}, {})
    for pod in records:
        index.pods[pod.key] = pod
        _account(index.used, index.ports_used, index.workers, pod, +1, in_place=True)
    return index


def index_nodes(records: Iterable[NodeRecord]) -> dict[str, NodeRecord]:
    """Return ``records`` by node name (pure)."""
    return {node.name: node for node in records}


def index_jobs(records: Iterable[JobRecord]) -> dict[str, JobRecord]:
    """Return ``records`` by ``namespace/name`` (pure)."""
    return {job.key: job for job in records}


def _account(
    used: dict[str, dict[str, int]],
    ports_used: dict[str, dict[tuple[str, int], int]],
    workers: dict[str, dict[str, PodRecord]],
    pod: PodRecord,
    sign: int,
    *,
    in_place: bool = False,
) -> None:
    """Add (``sign`` +1) or take away (-1) ``pod``'s use of its node, its host ports and its
    membership of its job's workers.

    The inner maps (one node's use, one job's workers) are replaced, never changed, unless
    ``in_place`` (an index nobody else holds yet): a :meth:`ClusterStore.view` shares them.
    """

    def own(inner: dict[Any, Any] | None) -> dict[Any, Any]:
        if inner is None:
            return {}
        return inner if in_place else dict(inner)

    if pod.node is not None and not pod.terminal:
        use = own(used.get(pod.node))
        for key, amount in pod.requests.items():
            use[key] = use.get(key, 0) + sign * amount
        used[pod.node] = use
        if pod.host_ports:
            ports = own(ports_used.get(pod.node))
            for port in pod.host_ports:
                ports[port] = ports.get(port, 0) + sign
                if not ports[port]:
                    del ports[port]
            if ports:
                ports_used[pod.node] = ports
            else:
                ports_used.pop(pod.node, None)
    if pod.job is not None:
        members = own(workers.get(pod.job))
        if sign > 0:
            members[pod.key] = pod
        else:
            members.pop(pod.key, None)
        if members:
            workers[pod.job] = members
        else:
            workers.pop(pod.job, None)


def _frees(old: PodRecord, new: PodRecord) -> bool:
    """Return whether a pod's change may free capacity for a waiting gang: it left its node or
    finished, its requests shrank, or a worker bound (its rank's reservation ends, maybe on
    another node than the one it bound to)."""
    if old.node is not None and not old.terminal:
        return new.node != old.node or new.terminal or new.requests != old.requests
    return new.job is not None and new.node is not None and old.node is None


def _holds(job: JobRecord) -> bool:
    """Return whether the job's stored plan holds nodes."""
    return (job.raw_status.get("placement") or {}).get("state") == "Planned"


def _placement_facts(pod: PodRecord) -> tuple[object, ...]:
    """Return what of a pod matters to capacity and plans (not its phase while it runs)."""
    return (
        pod.node,
        pod.terminal,
        pod.gated,
        pod.requests,
        pod.deleting,
        pod.priority,
        pod.host_ports,
    )


def _job_facts(job: JobRecord) -> tuple[object, ...]:
    """Return what of a job matters to planning: its spec and plan, not other status."""
    placement = job.raw_status.get("placement") or {}
    spec = job.job.spec.model_dump() if job.job is not None else job.invalid_reason
    return (job.uid, job.generation, spec, placement.get("state"), placement.get("nodes"))


def _same_plan(stored: dict[str, Any], fresh: dict[str, Any]) -> bool:
    """Return whether the stored placement is the fresh one (or a later write of the placer)."""
    if not fresh:
        return not stored or stored.get("state") != "Planned"
    return stored.get("state") == fresh.get("state") and stored.get("nodes") == fresh.get("nodes")
