"""Gang (``tpfabric.io/v1alpha1``): the record of a gang another controller made.

A LeaderWorkerSet group, a JobSet or a labelled pod group has no tpfabric object of its own; the
operator makes one Gang per such gang (named as :func:`tpfabric_core.gangs.record_name` names
it), owned by the gang's owner where it has one, so that garbage collection removes it. The
placer plans a Gang exactly as a TensorParallelJob: the spec holds what planning reads (the same
field names), the status holds the plan (``placement``) and what the operator sees of the pods.
Its pods carry ``tpfabric.io/gang: <name>`` and ``tpfabric.io/rank``.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import ConfigDict, Field

from tpfabric_core.api.models import (
    API_VERSION,
    Condition,
    Placement,
    RdmaSpec,
    TopologyPolicy,
    _Model,
)

__all__ = [
    "GANG_KIND",
    "GANG_PLURAL",
    "MAX_GANG_WORKERS",
    "Gang",
    "GangNear",
    "GangOwner",
    "GangSpec",
    "GangStatus",
]

GANG_KIND: Final = "Gang"
GANG_PLURAL: Final = "gangs"
#: the most pods one Gang record holds (a TensorParallelJob's ``workers`` has the same bound)
MAX_GANG_WORKERS: Final = 1024


class GangOwner(_Model):
    """What made the gang's pods."""

    kind: Literal["LeaderWorkerSet", "JobSet", "PodGroup", "WorkloadPodGroup"]
    """`LeaderWorkerSet` (one group), `JobSet` (the JobSet, or one child Job), `WorkloadPodGroup`
    (a `scheduling.k8s.io` PodGroup its pods name in `spec.schedulingGroup`), or `PodGroup`
    (pods labelled `tpfabric.io/gang-name`, or Kueue's `pod-group-name`)."""
    name: Annotated[str, Field(max_length=253)]
    """The owner's name (for a pod group: its label's value)."""
    role: Annotated[str, Field(max_length=63)] | None = None
    """The role its pods play in a DisaggregatedSet (`disaggregatedset.x-k8s.io/role`, e.g.
    `prefill`), which `near` may name."""
    disaggregated_set: Annotated[str, Field(max_length=253)] | None = None
    """The DisaggregatedSet its pods belong to (`disaggregatedset.x-k8s.io/name`)."""


class GangNear(_Model):
    """Place the gang near another gang (``tpfabric.io/near``)."""

    target: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]
    """The other gang: its owner's name (a LeaderWorkerSet, a JobSet, a pod group), its Gang
    record's name, or a DisaggregatedSet role (`disaggregatedset.x-k8s.io/role`, in the same
    DisaggregatedSet when the gang is in one), in the same namespace."""
    level: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,62}$")] = "spine"
    """The level whose one domain holds both, e.g. `spine` (a few switch hops apart)."""
    mode: Literal["required", "preferred"] = "preferred"
    """`required`: only inside such a domain (the gang waits for one, and for the other gang to
    be placed); `preferred`: there when it fits, else where the topology request puts it."""


class GangSpec(_Model):
    """What planning reads: the size, each pod's GPUs and the topology request."""

    owner: GangOwner
    """What made the gang's pods."""
    workers: Annotated[int, Field(ge=1, le=MAX_GANG_WORKERS)]
    """Pods in the gang; the placer plans once all of them exist."""
    gpus_per_worker: Annotated[int, Field(ge=0, le=64)] = 8
    """GPUs each pod takes (its containers' `nvidia.com/gpu`)."""
    tensor_parallel_size: Annotated[int, Field(ge=1, le=65536)] = 8
    """GPUs of one tensor-parallel group (rails are kept aligned within it)."""
    pipeline_parallel_size: Annotated[int, Field(ge=1, le=1024)] = 1
    """Pipeline stages."""
    topology: TopologyPolicy = Field(default_factory=TopologyPolicy)
    """Where the gang may go in the fabric (from the owner's annotations, else the chart's
    default)."""
    rdma: RdmaSpec = Field(default_factory=RdmaSpec)
    """Not used: the gang's pods carry their RDMA devices themselves (the gang webhook gives
    them), and the placer plans what each pod asks."""
    suspend: bool = False
    """Never set by the operator; a suspended gang is not planned."""
    near: GangNear | None = None
    """Place the gang near another gang (from the pods' `tpfabric.io/near` annotations)."""


class GangStatus(_Model):
    """The plan (written by the placer) and the pods as the operator sees them."""

    model_config = ConfigDict(extra="ignore")

    phase: Literal["Pending", "Waiting", "Placed", "Running", "Invalid"] | None = None
    """`Pending` until every pod exists, `Waiting` for room, `Placed` once planned, `Running`
    when every pod runs; `Invalid` when the pods' labels say something the record cannot be."""
    ready: str | None = None
    """Ready pods over the gang's size, e.g. `3/4` (for `kubectl get`)."""
    pods: int = 0
    """Pods of the gang that exist now (not terminating)."""
    problems: list[str] = Field(default_factory=list)
    """What is wrong with the pods' labels, each naming the label."""
    placement: Placement | None = None
    """The persisted gang plan, or why the gang waits."""
    conditions: list[Condition] = Field(default_factory=list)
    """`Ready` (every pod of the group exists and is Ready: the leader and each worker),
    `PodsCreated` (every pod of the gang exists; False, reason `PodsMissing`, while some do not:
    how many exist and which ranks are missing, since the transition time),
    `Degraded` (a node under the group is degraded: rank, node and the fabric agent's reasons),
    `Surge` (an extra group of an LWS rolling update, deleted when the update ends), `Moving`
    (with `tpfabric.io/on-degraded-link: restart-elsewhere`: whether and why the group is moved
    off a degraded node now) and `RDMA` (whether the pods got RDMA devices, and why: `Requested`,
    `NodesOffer`; False: `NotRequested`, `NodesOfferNone`, the message naming the resource and
    what to do)."""
    near_by: list[str] = Field(default_factory=list)
    """Gangs placed near this one (their `spec.near` names it): each record's name and where."""


class Gang(_Model):
    """A gang of pods another controller made, placed together in the fabric by tpfabric."""

    model_config = ConfigDict(extra="ignore")

    api_version: Literal["tpfabric.io/v1alpha1"] = API_VERSION
    kind: Literal["Gang"] = GANG_KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: GangSpec
    status: GangStatus | None = None
