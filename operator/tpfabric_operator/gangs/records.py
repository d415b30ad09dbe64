"""The Gang records of gangs other controllers make: what each record says. Pure.

The gang webhook labels a gang's pods (``tpfabric.io/gang``, and ``tpfabric.io/rank`` where the
rank is known at creation); the operator keeps one Gang record per gang (:mod:`.sync`), and
the placer plans the record as it plans a TensorParallelJob. This module decides, from the
gang's pods as they are (who owns the gang and how large it is: :mod:`.owners`):

- the record: its size, each pod's GPUs, the topology request, the owner reference that lets
  garbage collection remove it with its owner (:func:`record_manifest`);
- the ranks still to write, once every pod exists: a pod that names its own rank
  (:attr:`~tpfabric_core.gangs.GangMember.rank`) takes it, the others the free ranks in their
  owner's order (a JobSet's job index then completion index), then by creation
  (:func:`ranks_to_write`);
- the status the operator writes beside the placer's ``placement`` (:func:`record_status`);
- what is wrong with the pods themselves: two owners claiming one name (:func:`owners_problem`),
  a pod group split over namespaces (:func:`elsewhere_problem`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpfabric_core.api import API_VERSION
from tpfabric_core.api.gang import GANG_KIND
from tpfabric_core.api.placement import StoredPlacement, read_placement, with_gang_problems
from tpfabric_core.gangs import (
    GANG_NAME_LABEL,
    KUEUE_POD_GROUP,
    RANK_LABEL,
    GangMember,
)
from tpfabric_core.input_limits import whole_number
from tpfabric_core.jobset_ranks import jobset_job, jobset_rank
from tpfabric_core.rdma_default import RdmaDecision

__all__ = [
    "GangPod",
    "OwnerRef",
    "elsewhere_problem",
    "owners_problem",
    "ranks_to_write",
    "record_manifest",
    "record_status",
]


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


def ranks_to_write(
    pods: Sequence[GangPod], size: int, layout: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Return pod name -> rank for the pods that carry none, once the gang is whole (else {}).

    A pod that names its own rank (:attr:`GangMember.rank`: ``tpfabric.io/rank``, an Indexed
    Job's completion index; the webhook labels it so, unless it admitted the pod before it read
    that rank) takes it. A JobSet's pods take ``layout``'s first rank of their Job plus their
    completion index; others take the ranks no pod holds, in their owner's order, then by
    creation and name. Two pods with one rank keep it (the record reports them); the gang waits
    for its owner.
    """
    if len(pods) < size or all(p.rank is not None for p in pods):
        return {}
    result = {p.name: p.member.rank for p in pods if p.rank is None and p.member.rank is not None}
    taken = {p.rank for p in pods if p.rank is not None} | set(result.values())
    missing = sorted(
        (p for p in pods if p.rank is None and p.name not in result),
        key=lambda p: (p.member.order, p.created, p.name),
    )
    if layout is not None:
        for pod in missing:
            if not pod.member.order:
                continue
            rank = jobset_rank(layout, jobset_job(pod.labels), pod.member.order[-1])
            if rank is not None:
                result[pod.name] = rank
        return result
    free = (rank for rank in range(size) if rank not in taken)
    for pod, rank in zip(missing, free, strict=False):
        result[pod.name] = rank
    return result


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
    pods: Sequence[GangPod],
    size: int,
    placement: StoredPlacement | Mapping[str, Any],
    problems: Sequence[str],
) -> dict[str, Any]:
    """Return what the operator writes into a record's status (the placer owns ``placement``,
    read here typed)."""
    ready = sum(1 for p in pods if p.ready)
    ranks = [p.rank for p in pods if p.rank is not None]
    problems = list(problems)
    if len(set(ranks)) < len(ranks):
        twice = sorted({r for r in ranks if ranks.count(r) > 1})
        problems.append(f"{RANK_LABEL}: ranks {twice} are held by more than one pod")
    if problems:
        phase = "Invalid"
    elif len(pods) >= size and all(p.phase == "Running" for p in pods):
        phase = "Running"
    elif read_placement(placement).planned:
        phase = "Placed"
    elif len(pods) < size:
        phase = "Pending"
    else:
        phase = "Waiting"
    return with_gang_problems(
        {"phase": phase, "ready": f"{ready}/{size}", "pods": len(pods)}, problems
    )
