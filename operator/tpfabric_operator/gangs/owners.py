"""Who owns a gang another controller made, and how large it is: what the owner says. Pure.

A LeaderWorkerSet's group, a JobSet (or one of its Jobs) or a ``scheduling.k8s.io`` PodGroup
owns its pods; a plain pod group (``tpfabric.io/gang-name``, Kueue's pod-group labels) has no
owner object. A sync reads the owner only when it needs it (:func:`owner_needed`): to make the
gang's record (the owner's uid, so that garbage collection removes the record with it; a JobSet's
or a PodGroup's size) or to rank a JobSet's pods the gang webhook could not rank (its Jobs' layout,
:mod:`tpfabric_core.jobset_ranks`); every other pod event costs no read of it.
:func:`identify` makes of the pods, the record and what was read of the owner the gang's
:class:`Identity`: its first pod, size, rank layout, owner reference, and what is wrong, each
named with its field and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tpfabric_core.api.gang import MAX_GANG_WORKERS
from tpfabric_core.gangs import (
    GANG_SIZE_LABEL,
    JOBSET_EXCLUSIVE,
    JOBSET_NAME,
    KUEUE_POD_GROUP_TOTAL,
    LWS_SIZE,
    GangMember,
    GangSettings,
    TopologyAsk,
)
from tpfabric_core.jobset_ranks import member_layout
from tpfabric_operator.gangs.records import GangPod, OwnerRef
from tpfabric_operator.webhook.admission import default_levels

__all__ = [
    "GANG_SETTINGS",
    "JOBSET_API",
    "LWS_API",
    "Identity",
    "OwnerRead",
    "first_pod",
    "identify",
    "owner_apis",
    "owner_needed",
    "pod_group_gang",
    "record_size",
    "too_large_problem",
]

#: how the operator reads a gang pod's labels: tpfabric's own levels, gangs of up to 1,024 pods
GANG_SETTINGS = GangSettings(levels=default_levels(), max_size=1024)
#: the labels and annotations that give a gang's size on its pods
SIZE_KEYS = (LWS_SIZE, GANG_SIZE_LABEL, KUEUE_POD_GROUP_TOTAL)
LWS_API = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet")
#: the upstream Workload API's PodGroup: beta in Kubernetes 1.37, alpha (v1alpha3) before
PODGROUP_GROUP = "scheduling.k8s.io"
PODGROUP_PLURAL = "podgroups"
PODGROUP_VERSIONS = ("v1beta1", "v1alpha3")
JOBSET_API = ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")


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


@dataclass(frozen=True, slots=True)
class OwnerRead:
    """What a sync read of the gang's owner: its reference and the object (both None for a pod
    group, which has no owner object, or when the owner is gone)."""

    ref: OwnerRef | None = None
    body: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a gang is, as its pods, its record and its owner say: what its record is made of."""

    #: the gang's first pod (lowest rank, then oldest), its topology ask completed from a PodGroup
    first: GangPod
    #: how many pods the gang has (None: nothing gives it, or more than a record holds)
    size: int | None
    #: a JobSet's first rank of each child Job (:mod:`tpfabric_core.jobset_ranks`), when its
    #: owner was read
    layout: dict[str, int] | None
    #: the owner, for the record's ``ownerReferences`` (None: not read, a pod group, or gone)
    owner: OwnerRef | None
    #: what is wrong, each naming its field and the fix
    problems: list[str]


def first_pod(pods: Sequence[GangPod]) -> GangPod:
    """Return the gang's first pod: the lowest rank, then the oldest."""
    return min(pods, key=lambda p: (p.rank if p.rank is not None else 1 << 30, p.created))


def owner_apis(member: GangMember) -> list[tuple[str, str, str, str]]:
    """Return where the owner of ``member``'s gang may be read, as (group, version, plural,
    kind), newest first (none for a pod group)."""
    if member.kind == "PodGroup":
        return []
    if member.kind == "WorkloadPodGroup":  # the versions the cluster may serve, newest first
        return [(PODGROUP_GROUP, v, PODGROUP_PLURAL, "PodGroup") for v in PODGROUP_VERSIONS]
    return [LWS_API if member.kind == "LeaderWorkerSet" else JOBSET_API]


def owner_needed(first: GangPod, pods: Sequence[GangPod], record: Any) -> bool:
    """Return whether a sync must read the owner: to make the record, or to rank a JobSet's
    pods that carry no rank yet."""
    jobset_ranks = first.member.kind == "JobSet" and any(p.rank is None for p in pods)
    return record is None or jobset_ranks


def record_size(record: Mapping[str, Any], size: int | None) -> int:
    """Return the gang's size as its record says it (``size``, what the pods and owner say,
    where the record says nothing)."""
    return int((record.get("spec") or {}).get("workers") or size or 0)


def _size_of(
    first: GangPod, owner: Mapping[str, Any] | None
) -> tuple[int | None, dict[str, int] | None]:
    """Return the gang's size and, for a JobSet, its rank layout."""
    member = first.member
    if member.kind == "WorkloadPodGroup":
        return (pod_group_gang(owner, GANG_SETTINGS.levels)[0] if owner else None), None
    if member.kind != "JobSet":
        return member.size, None
    if owner is None:
        return None, None
    layout = member_layout(member, first.labels, owner)
    return (layout[""] if layout else None), layout


def identify(first: GangPod, record: Any, owner: OwnerRead | None) -> Identity:
    """Return who the gang of ``first`` is (see :class:`Identity`); ``owner``: what was read of
    its owner (None: not read, :func:`owner_needed`), ``record``: its Gang record (None: none)."""
    layout: dict[str, int] | None = None
    if owner is not None:
        size, layout = _size_of(first, owner.body)
    else:
        size = int((record.get("spec") or {}).get("workers") or 0) or None
    problems = [p.words() for p in first.member.problems]
    if first.member.kind == "WorkloadPodGroup" and owner is not None and owner.ref is not None:
        size, asked, said = pod_group_gang(owner.body or {}, GANG_SETTINGS.levels)
        problems.extend(said)
        if asked is not None and first.member.topology.level is None:  # the pod's own wins
            first = replace(first, member=replace(first.member, topology=asked))
    if size is not None and size > MAX_GANG_WORKERS:
        # no record can hold it: said on the pods (NoGangRecord), never tried (a 422 each sync)
        said = [p.words() for p in first.member.problems if p.key in SIZE_KEYS]
        problems.append(
            said[0] if said else too_large_problem(first.member.kind, first.member.owner, size)
        )
        size, layout = None, None
    elif size is None:
        problems.append(_no_size(first))
    return Identity(first, size, layout, owner.ref if owner is not None else None, problems)


def _no_size(first: GangPod) -> str:
    """Return why the gang of ``first`` has no size (its owner object does not give one)."""
    member = first.member
    if member.kind == "WorkloadPodGroup":
        return (
            f"spec.schedulingGroup.podGroupName: the PodGroup {member.owner!r} does not exist "
            "or gives no gang size"
        )
    if member.kind == "JobSet":
        return f"{JOBSET_NAME}: the JobSet {member.owner!r} does not give the size"
    said = [p.words() for p in member.problems if p.key in SIZE_KEYS]
    return said[0] if said else f"{member.kind} {member.owner!r}: its pods do not give the size"
