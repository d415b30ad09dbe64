"""The Gang records of gangs other controllers make: what each record says. Pure.

The gang webhook labels a gang's pods (``tpfabric.io/gang``, and ``tpfabric.io/rank`` where the
rank is known at creation); the operator keeps one Gang record per gang (:mod:`.gang_sync`), and
the placer plans the record as it plans a TensorParallelJob. This module decides, from the
gang's pods as they are:

- the record: its size, each pod's GPUs, the topology request, the owner reference that lets
  garbage collection remove it with its owner (:func:`record_manifest`);
- the ranks still to write, once every pod exists: pods without a rank take the free ranks in
  their owner's order (a JobSet's job index then completion index), then by creation
  (:func:`ranks_to_write`);
- the status the operator writes beside the placer's ``placement`` (:func:`record_status`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpfabric_core.api import API_VERSION
from tpfabric_core.api.gang import GANG_KIND, MAX_GANG_WORKERS
from tpfabric_core.gangs import (
    GANG_NAME_LABEL,
    JOBSET_EXCLUSIVE,
    JOBSET_JOB_INDEX,
    JOBSET_REPLICATED_JOB,
    KUEUE_POD_GROUP,
    RANK_LABEL,
    GangMember,
    TopologyAsk,
)
from tpfabric_core.input_limits import whole_number
from tpfabric_core.pod_wiring import GPU_RESOURCE
from tpfabric_core.rdma_default import RdmaDecision

__all__ = [
    "GangPod",
    "OwnerRef",
    "elsewhere_problem",
    "jobset_layout",
    "owners_problem",
    "pod_group_gang",
    "ranks_to_write",
    "record_manifest",
    "record_status",
    "too_large_problem",
]

LWS_API = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet")
#: the upstream Workload API's PodGroup: beta in Kubernetes 1.37, alpha (v1alpha3) before
PODGROUP_GROUP = "scheduling.k8s.io"
PODGROUP_PLURAL = "podgroups"
PODGROUP_VERSIONS = ("v1beta1", "v1alpha3")
JOBSET_API = ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")


@dataclass(frozen=True, slots=True)
class GangPod:
    """One pod of a gang, as the operator reads it."""

    name: str
    member: GangMember
    created: str  # metadata.creationTimestamp (RFC 3339 sorts as text)
    labels: Mapping[str, str]
    phase: str = "Pending"
    ready: bool = False
    gpus: int = 0
    gated: bool = True
    #: the pod's controller, ``Kind/name`` of its controlling owner reference ("" when none)
    controller: str = ""
    #: the node it is bound to (None: not yet)
    node: str | None = None
    #: metadata.uid (a pod made again under the same name is another pod)
    uid: str = ""
    #: the RDMA devices the gang webhook gave it, and why (None: it says nothing)
    rdma: RdmaDecision | None = None

    @property
    def rank(self) -> int | None:
        """Return the rank the pod carries (None: not written yet)."""
        return whole_number(self.labels.get(RANK_LABEL))


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """The object that owns the gang's pods, for the record's ``ownerReferences``."""

    api_version: str
    kind: str
    name: str
    uid: str


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """Return the GPUs a pod's containers take (the largest limit: the gang's unit)."""
    best = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        amount = (resources.get("limits") or {}).get(GPU_RESOURCE) or (
            resources.get("requests") or {}
        ).get(GPU_RESOURCE)
        best = max(best, whole_number(str(amount or "0")) or 0)
    return best


def _count(value: object) -> int:
    """Return a replicated Job's ``replicas`` or ``parallelism`` (1 when unset, 0 or unreadable)."""
    return whole_number(value) or 1


def jobset_layout(jobset: Mapping[str, Any], replicated_job: str | None) -> dict[str, int] | None:
    """Return, for a JobSet's gang, each child Job's first rank by ``<replicatedJob>/<index>``
    and the gang's size under ``""`` (None when the JobSet does not say).

    The whole JobSet (``replicated_job`` None): its replicated Jobs in order, each Job's pods
    after the previous Job's. One child Job (per-Job placement): the Job's own pods.

    A gang of more than :data:`MAX_GANG_WORKERS` pods is given by its size alone (``{"": size}``,
    counted, not laid out): no Gang record holds it (:func:`too_large_problem` says so), and a
    ``replicas`` of 2^31 is never walked Job by Job.
    """
    jobs = [
        (
            str(replicated.get("name") or ""),
            _count(replicated.get("replicas")),
            _count((((replicated.get("template") or {}).get("spec")) or {}).get("parallelism")),
        )
        for replicated in (jobset.get("spec") or {}).get("replicatedJobs") or []
        if isinstance(replicated, Mapping)
    ]
    if replicated_job is not None:
        name, _, index_text = replicated_job.rpartition("/")
        index = whole_number(index_text)
        if index is None or str(index) != index_text:
            return None
        for job_name, replicas, parallelism in jobs:
            if job_name == name and index < replicas:
                return {"": parallelism, replicated_job: 0}
        return None
    if not jobs:
        return None
    size = sum(replicas * parallelism for _, replicas, parallelism in jobs)
    if size > MAX_GANG_WORKERS:
        return {"": size}
    layout: dict[str, int] = {}
    offset = 0
    for job_name, replicas, parallelism in jobs:
        for index in range(replicas):
            layout[f"{job_name}/{index}"] = offset
            offset += parallelism
    layout[""] = offset
    return layout


def too_large_problem(kind: str, owner: str, size: int) -> str:
    """Return why a gang of ``size`` pods (more than :data:`MAX_GANG_WORKERS`) gets no record."""
    words = (
        f"the {kind} {owner!r} makes a gang of {size} pods; a Gang record holds at most "
        f"{MAX_GANG_WORKERS}: make its gangs smaller (fewer replicas, a smaller size or "
        "parallelism)"
    )
    if kind == "JobSet":
        words += f", or place each of its Jobs as a gang of its own ({JOBSET_EXCLUSIVE})"
    return words


def _jobset_job(pod: GangPod) -> str:
    return f"{pod.labels.get(JOBSET_REPLICATED_JOB, '')}/{pod.labels.get(JOBSET_JOB_INDEX, '')}"


def ranks_to_write(
    pods: Sequence[GangPod], size: int, layout: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Return pod name -> rank for the pods that carry none, once the gang is whole (else {}).

    A JobSet's pods take ``layout``'s first rank of their Job plus their completion index;
    others take the ranks no pod holds, in their owner's order, then by creation and name.
    Two pods with one rank keep it (the record reports them); the gang waits for its owner.
    """
    if len(pods) < size or all(p.rank is not None for p in pods):
        return {}
    taken = {p.rank for p in pods if p.rank is not None}
    missing = sorted(
        (p for p in pods if p.rank is None), key=lambda p: (p.member.order, p.created, p.name)
    )
    result: dict[str, int] = {}
    if layout is not None:
        for pod in missing:
            first = layout.get(_jobset_job(pod))
            if first is not None and pod.member.order:
                result[pod.name] = first + pod.member.order[-1]
        return result
    free = (rank for rank in range(size) if rank not in taken)
    for pod, rank in zip(missing, free, strict=False):
        result[pod.name] = rank
    return result


def pod_group_gang(
    pod_group: Mapping[str, Any], levels: Mapping[str, str]
) -> tuple[int | None, TopologyAsk | None, list[str]]:
    """Return what a ``scheduling.k8s.io`` PodGroup says of its gang: the size (its gang
    policy's ``minCount``), the topology it asks for (its first topology constraint's node label
    key, mapped onto the level with that key: required) and what is wrong, each naming the field.
    """
    spec = pod_group.get("spec") or {}
    name = str((pod_group.get("metadata") or {}).get("name") or "")
    problems = []
    gang = (spec.get("schedulingPolicy") or {}).get("gang") or {}
    size = gang.get("minCount")
    if not isinstance(size, int) or size < 1:
        problems.append(
            f"spec.schedulingPolicy.gang.minCount: the PodGroup {name!r} has no gang policy "
            "with a size; tpfabric places gangs (give it schedulingPolicy.gang.minCount)"
        )
        size = None
    topology = None
    constraints = (spec.get("schedulingConstraints") or {}).get("topology") or []
    if constraints:
        key = str((constraints[0] or {}).get("key") or "")
        level = {label: level for level, label in levels.items()}.get(key)
        if level is None:
            known = ", ".join(sorted(levels.values())) or "none"
            problems.append(
                f"spec.schedulingConstraints.topology[0].key: no level has the node label "
                f"{key!r} (keys: {known})"
            )
        else:
            topology = TopologyAsk(level=level, mode="required", source="PodGroup")
    return size, topology, problems


def _name_label(pod: GangPod) -> str:
    """Return the label that named the pod's gang (a plain pod group's)."""
    return GANG_NAME_LABEL if GANG_NAME_LABEL in pod.labels else KUEUE_POD_GROUP


def owners_problem(pods: Sequence[GangPod]) -> str | None:
    """Return what is wrong when pods of two controllers claim one pod group's name (None: not).

    A LeaderWorkerSet's or JobSet's gang is named after its owner and cannot be claimed twice;
    a pod group is named by a label, which two Jobs (or Deployments...) may both carry.
    """
    if not pods or pods[0].member.kind != "PodGroup":
        return None
    owners = sorted({p.controller for p in pods if p.controller})
    if len(owners) < 2:  # one owner, or pods without any: one gang
        return None
    shown = ", ".join(owners[:3]) + (", ..." if len(owners) > 3 else "")
    return (
        f"{_name_label(pods[0])}: {pods[0].member.owner!r} is claimed by pods of "
        f"{len(owners)} owners ({shown}): give each owner's pods a gang name of their own"
    )


def elsewhere_problem(pods: Sequence[GangPod], size: int, namespaces: Sequence[str]) -> str | None:
    """Return what is wrong when a pod group lacks pods here while its name has a record in
    other ``namespaces`` too (None: not): a gang's pods are all in one namespace.

    The other namespaces are never named: they may be other tenants', and a Gang's status is
    read by whoever can read this namespace.
    """
    if not pods or len(pods) >= size or not namespaces or pods[0].member.kind != "PodGroup":
        return None
    first = pods[0].member
    return (
        f"{_name_label(pods[0])}: {len(pods)} of {size} pods of {first.owner!r} are in "
        f"namespace {first.namespace!r}, and another namespace has a gang of that name too: a "
        "gang's pods must all be in one namespace"
    )


def record_manifest(
    first: GangPod,
    size: int,
    owner: OwnerRef | None,
    *,
    default_level: str = "leaf",
    default_mode: str = "preferred",
) -> dict[str, Any]:
    """Return the Gang record of the gang ``first`` belongs to."""
    member = first.member
    ask = member.topology
    topology: dict[str, Any] = {
        "level": ask.level or default_level,
        "mode": ask.mode or default_mode,
    }
    if ask.max_wait_seconds is not None:
        topology["maxWaitSeconds"] = ask.max_wait_seconds
    gpus = first.gpus
    owner_spec: dict[str, Any] = {"kind": member.kind, "name": member.owner}
    if member.role:
        owner_spec["role"] = member.role
    if member.role_set:
        owner_spec["disaggregatedSet"] = member.role_set
    spec: dict[str, Any] = {
        "owner": owner_spec,
        "workers": size,
        "gpusPerWorker": gpus,
        "tensorParallelSize": max(gpus, 1),
        "topology": topology,
    }
    if member.near is not None:
        spec["near"] = {
            "target": member.near.target,
            "level": member.near.level,
            "mode": member.near.mode,
        }
    metadata: dict[str, Any] = {
        "name": member.gang,
        "namespace": member.namespace,
        "labels": {"app.kubernetes.io/managed-by": "tpfabric"},
    }
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": owner.api_version,
                "kind": owner.kind,
                "name": owner.name,
                "uid": owner.uid,
            }
        ]
    return {
        "apiVersion": API_VERSION,
        "kind": GANG_KIND,
        "metadata": metadata,
        "spec": spec,
    }


def record_status(
    pods: Sequence[GangPod], size: int, placement: Mapping[str, Any], problems: Sequence[str]
) -> dict[str, Any]:
    """Return what the operator writes into a record's status (the placer owns ``placement``)."""
    ready = sum(1 for p in pods if p.ready)
    ranks = [p.rank for p in pods if p.rank is not None]
    problems = list(problems)
    if len(set(ranks)) < len(ranks):
        twice = sorted({r for r in ranks if ranks.count(r) > 1})
        problems.append(f"{RANK_LABEL}: ranks {twice} are held by more than one pod")
    state = placement.get("state")
    if problems:
        phase = "Invalid"
    elif len(pods) >= size and all(p.phase == "Running" for p in pods):
        phase = "Running"
    elif state == "Planned":
        phase = "Placed"
    elif len(pods) < size:
        phase = "Pending"
    else:
        phase = "Waiting"
    return {"phase": phase, "ready": f"{ready}/{size}", "pods": len(pods), "problems": problems}
