"""What the placer's store keeps of each pod and job, the indexes of them built outside the
store's lock, and which changes of them matter to the placer.

A record is parsed once per version of its object (from the watch, outside the store's lock) and
never changed. :func:`capacity_facts` and :func:`planning_facts` say what of a record the store's
generations follow (``capacity_generation``: free capacity may have changed;
``freed_generation``, :func:`frees`: capacity may have grown for a waiting gang, the only change
that plans a waiting gang again): a field of :class:`PodRecord` that changes what a pod takes must
be in :func:`capacity_facts` (a test holds every field to that choice). Pure data: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
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
from tpfabric_core.api.placement import NO_PLACEMENT, StoredPlacement, placement_of_status
from tpfabric_core.gangs import GANG_LABEL, RANK_LABEL
from tpfabric_core.input_limits import whole_number
from tpfabric_core.placement.pod_fit import host_ports, pod_requests, repels_peers
from tpfabric_core.placement.queue_order import gang_key, job_key

__all__ = [
    "JobRecord",
    "PodIndex",
    "PodRecord",
    "account",
    "capacity_facts",
    "frees",
    "gang_key",
    "holds_nodes",
    "index_jobs",
    "index_pods",
    "planning_facts",
]


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
        owner_key = job_key(namespace, job_name, gang=False) if job_name else None
        index = labels.get(WORKER_INDEX_LABEL)
        if not job_name and labels.get(GANG_LABEL):  # a pod of a gang another controller made
            job_name = labels[GANG_LABEL]
            owner_key = job_key(namespace, job_name, gang=True)
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
            job=owner_key,
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
    #: ``status.placement`` as stored, read once per version of the object
    placement: StoredPlacement = NO_PLACEMENT

    @property
    def key(self) -> str:
        """Return ``namespace/name`` (``namespace/gang:name`` for a Gang)."""
        return job_key(self.namespace, self.name, gang=self.kind == GANG_KIND)

    @property
    def plural(self) -> str:
        """Return the API resource the record is (for writes)."""
        return GANG_PLURAL if self.kind == GANG_KIND else PLURAL

    @property
    def planned_nodes(self) -> list[str]:
        """Return the persisted node of each rank (empty when there is no plan)."""
        return self.placement.nodes

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> JobRecord:
        """Return the record of a TensorParallelJob object; invalid specs are kept, flagged."""
        meta = obj["metadata"]
        kind = GANG_KIND if obj.get("kind") == GANG_KIND else KIND
        try:
            # the spec decides what to plan; the status is read tolerantly (a status this
            # version does not know must never hide a job from the placer)
            body = {k: v for k, v in obj.items() if k != "status"}
            job: TensorParallelJob | Gang | None = (
                Gang.model_validate(body)
                if kind == GANG_KIND
                else TensorParallelJob.model_validate(body)
            )
            reason = ""
        except ValidationError as err:
            job, reason = None, str(err.errors()[0]["msg"])
        status = dict(obj.get("status") or {})
        return cls(
            namespace=meta.get("namespace", "default"),
            name=meta["name"],
            uid=meta.get("uid", ""),
            generation=int(meta.get("generation") or 0),
            job=job,
            invalid_reason=reason,
            raw_status=status,
            created=str(meta.get("creationTimestamp") or ""),
            kind=kind,
            placement=placement_of_status(status),
        )


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
        account(index.used, index.ports_used, index.workers, pod, +1, in_place=True)
    return index


def index_jobs(records: Iterable[JobRecord]) -> dict[str, JobRecord]:
    """Return ``records`` by ``namespace/name`` (pure)."""
    return {job.key: job for job in records}


def account(
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


def frees(old: PodRecord, new: PodRecord) -> bool:
    """Return whether a pod's change may free capacity for a waiting gang: it left its node or
    finished, its requests shrank, or a worker bound (its rank's reservation ends, maybe on
    another node than the one it bound to)."""
    if old.node is not None and not old.terminal:
        return new.node != old.node or new.terminal or new.requests != old.requests
    return new.job is not None and new.node is not None and old.node is None


def holds_nodes(job: JobRecord) -> bool:
    """Return whether the job's stored plan holds nodes."""
    return job.placement.planned


def capacity_facts(pod: PodRecord) -> tuple[object, ...]:
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


def planning_facts(job: JobRecord) -> tuple[object, ...]:
    """Return what of a job matters to planning: its spec and plan, not other status."""
    placement = job.placement
    spec = job.job.spec.model_dump() if job.job is not None else job.invalid_reason
    return (job.uid, job.generation, spec, placement.state, placement.nodes)
