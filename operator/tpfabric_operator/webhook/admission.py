"""The gang webhook's decision for one pod: an AdmissionReview in, its response out. Pure.

A pod that belongs to a gang (:func:`tpfabric_core.gangs.gang_of`: a LeaderWorkerSet group, a
JobSet, a labelled pod group) is given what the operator gives a TensorParallelJob's workers:

- the gang's scheduling gate and tpfabric's scheduler, so that no pod of the gang binds before
  the placer has a plan for all of them;
- the ``rdma-init`` init container (non-root, no capability) with its shared volume and
  ``NCCL_CONF_FILE`` (:mod:`tpfabric_core.pod_wiring`, the same wiring as a TensorParallelJob's;
  no privilege is added to the pod's own containers);
- the RDMA devices: what the pod asks (``tpfabric.io/rdma-count``, a container naming the RDMA
  resource), a number the chart sets, or by default (``auto``) what the nodes that could hold
  the pod offer (:mod:`tpfabric_core.rdma_default`, from the webhook's cached view of the nodes,
  :class:`.node_offers.NodeOffers`), with the decision and why on the pod (``tpfabric.io/rdma``);
- the labels the placer finds the gang's pods by (``tpfabric.io/gang``, ``tpfabric.io/rank``
  where the rank is known at creation: a LeaderWorkerSet's worker index, a JobSet's Job and
  completion index laid out by its JobSet);
- where the rank is known, the gang attempt (``tpfabric.io/attempt``) and, for a pod of the
  attempt its gang's plan was made for, that plan: it is created released onto it.

The webhook never refuses a pod: what it cannot take in (a gang label without a size, a level
that is not configured, another scheduler named) is admitted unwired, with a warning that names
the label and says what would fix it (``kubectl`` shows it to whoever created the pod), and
marked with the label ``tpfabric.io/gang-problem`` and its problems in an annotation, so that the
operator writes them into an Event on the pod (``kubectl describe pod``): a controller's pods
have no one to read the warning. A
pod wired already (a reinvocation, a pod re-created from a wired manifest) is left as it is. A
request that is not an AdmissionReview raises :class:`BadReviewError` (the server answers 400).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from tpfabric_core import labels as topology_labels
from tpfabric_core.api import ATTEMPT_LABEL, GANG_GATE, SCHEDULER_NAME
from tpfabric_core.api.placement import StoredPlacement
from tpfabric_core.gang_attempts import Stamp
from tpfabric_core.gangs import (
    GANG_LABEL,
    GANG_PROBLEM_LABEL,
    GANG_PROBLEMS_ANNOTATION,
    RANK_LABEL,
    GangMember,
    GangSettings,
    gang_of,
)
from tpfabric_core.input_limits import whole_number
from tpfabric_core.jobset_ranks import jobset_restarts
from tpfabric_core.placement.born_released import release_onto_plan
from tpfabric_core.placement.pod_fit import node_matcher, pod_gpus, resource_amount
from tpfabric_core.pod_wiring import NCCL_CONF_ENV, RdmaWiring, is_wired, wire_rdma
from tpfabric_core.rdma_default import (
    RDMA_ANNOTATION,
    NodeOffer,
    RdmaDecision,
    decide_rdma,
    with_rdma_devices,
)
from tpfabric_operator.webhook.ranks import JobSetView, rank_at_admission

__all__ = [
    "RDMA_COUNT_ANNOTATION",
    "BadReviewError",
    "GangView",
    "NodeView",
    "WebhookSettings",
    "admit",
    "default_levels",
    "mark_problems",
    "mutate_pod",
    "rdma_decision",
]

RDMA_COUNT_ANNOTATION = "tpfabric.io/rdma-count"
GPU_DIRECT_ANNOTATION = "tpfabric.io/gpu-direct"
_GPU_DIRECT = ("required", "preferred", "disabled")
_DEFAULT_SCHEDULERS = ("", "default-scheduler")
#: the most characters of problems a pod's annotation holds (a few lines, each naming a label)
_PROBLEMS_CHARACTERS = 4096
T = TypeVar("T")


class BadReviewError(ValueError):
    """The request body is not an AdmissionReview this webhook can answer."""


def default_levels() -> dict[str, str]:
    """Return tpfabric's own levels and their node label keys."""
    return {name: topology_labels.level_key(name) for name in ("leaf", "spine", "block")}


class NodeView(Protocol):
    """What the webhook reads of the nodes (:class:`.node_offers.NodeOffers`, or a test's)."""

    def remember(self, key: Any, compute: Callable[[tuple[NodeOffer, ...]], T]) -> T:
        """Return ``compute(offers)``, computed once per state of the nodes for ``key``."""
        ...


class GangView(JobSetView, Protocol):
    """What the webhook reads of the gangs (:class:`.gang_plans.GangPlans`, or a test's): the
    JobSets too (:class:`.ranks.JobSetView`)."""

    def stamp(
        self, namespace: str, gang: str, rank: int, restart: int | None = None
    ) -> tuple[Stamp, StoredPlacement | None]:
        """Return the attempt of the gang's pod of ``rank`` admitted now (noting it seen) and
        the gang's plan (``restart``: the owner's restart count on the pod, where it has one)."""
        ...


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """The chart's values the webhook needs."""

    init_image: str
    gangs: GangSettings = field(default_factory=lambda: GangSettings(levels=default_levels()))
    scheduler_name: str = SCHEDULER_NAME
    rdma_resource: str = "rdma/ib"
    #: RDMA devices a pod is given when it names none; None (``auto``): what the nodes offer
    rdma_count: int | None = None
    gpu_direct: str = "preferred"
    #: the fabric's contract as rdma-init reads it (``tpfabric_core.fabric_profile``), or None
    fabric_profile: str | None = None
    #: the nodes, for ``auto`` (None: no view, as if no node offered RDMA devices)
    nodes: NodeView | None = None
    #: the gangs' plans and the ranks seen (None: no pod is born released, none is numbered)
    plans: GangView | None = None


def _problems(pod: Mapping[str, Any], member: GangMember, settings: WebhookSettings) -> list[str]:
    """Return why the pod is admitted unwired (empty: it is wired)."""
    problems = [p.words() for p in member.problems]
    spec = pod.get("spec") or {}
    scheduler = str(spec.get("schedulerName") or "")
    if scheduler not in (*_DEFAULT_SCHEDULERS, settings.scheduler_name):
        problems.append(
            f"spec.schedulerName: the pod names {scheduler!r}; two schedulers cannot place one "
            f"gang (drop the field, or set {settings.scheduler_name!r})"
        )
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    count = annotations.get(RDMA_COUNT_ANNOTATION)
    if count is not None and not ((n := whole_number(count)) is not None and n <= 64):
        problems.append(f"{RDMA_COUNT_ANNOTATION}: {count!r} is not a whole number up to 64")
    direct = annotations.get(GPU_DIRECT_ANNOTATION)
    if direct is not None and direct not in _GPU_DIRECT:
        problems.append(f"{GPU_DIRECT_ANNOTATION}: {direct!r} is none of {', '.join(_GPU_DIRECT)}")
    return problems


def _named_rdma(containers: list[dict[str, Any]], resource: str) -> int | None:
    """Return the RDMA devices the pod's containers name themselves (the most of any), None
    when none names ``resource``."""
    amounts = []
    for container in containers:
        resources = container.get("resources") or {}
        amount = (resources.get("limits") or {}).get(resource)
        if amount is None:
            amount = (resources.get("requests") or {}).get(resource)
        if amount is not None:
            try:
                amounts.append(resource_amount(resource, amount))
            except ValueError:
                continue
    return max(amounts) if amounts else None


def rdma_decision(
    annotations: Mapping[str, Any],
    spec: Mapping[str, Any],
    member: GangMember,
    settings: WebhookSettings,
    gpus: int,
) -> RdmaDecision:
    """Return the RDMA devices of a gang pod of ``gpus`` GPUs and why
    (:mod:`tpfabric_core.rdma_default`)."""
    resource = settings.rdma_resource
    containers = list(spec.get("containers") or [])
    count_text = annotations.get(RDMA_COUNT_ANNOTATION)
    named = _named_rdma(containers, resource)
    asked: int | None = None
    asked_by = ""
    if count_text is not None:
        asked, asked_by = int(count_text), f"annotation {RDMA_COUNT_ANNOTATION}"
    elif named is not None:
        asked, asked_by = named, f"the pod's {resource} limit"
    elif settings.rdma_count is not None:
        asked, asked_by = settings.rdma_count, "the chart's gangWebhook.rdmaCount"

    def decide(offers: tuple[NodeOffer, ...]) -> RdmaDecision:
        return decide_rdma(
            resource=resource,
            pod_gpus=gpus,
            gang_size=member.size,
            asked=asked,
            asked_by=asked_by,
            nodes=offers,
            eligible=node_matcher(spec),
            fabric_keys=tuple(settings.gangs.levels.values()),
        )

    if asked is not None or settings.nodes is None:
        return decide(())
    # pods of one shape in one state of the nodes share one pass over them
    shape = json.dumps(
        [gpus, member.size, spec.get("nodeSelector"), spec.get("affinity")],
        sort_keys=True,
        default=str,
    )
    return settings.nodes.remember(shape, decide)


def mutate_pod(
    pod: Mapping[str, Any], member: GangMember, settings: WebhookSettings
) -> dict[str, Any]:
    """Return the pod as the gang needs it: labels, gate, scheduler, RDMA wiring and why (the
    ``tpfabric.io/rdma`` annotation); a new dict."""
    meta = dict(pod.get("metadata") or {})
    annotations = meta.get("annotations") or {}
    spec = dict(pod.get("spec") or {})
    gpus = pod_gpus(spec)
    rdma = rdma_decision(annotations, spec, member, settings, gpus)
    containers = list(spec.get("containers") or [])
    if rdma.count:
        containers = with_rdma_devices(containers, rdma.resource, rdma.count)
    meta["annotations"] = {**annotations, RDMA_ANNOTATION: rdma.annotation()}
    wiring = RdmaWiring(
        init_image=settings.init_image,
        gpus=gpus,
        rdma_resource=rdma.resource,
        rdma_count=rdma.count,
        gpu_direct=str(annotations.get(GPU_DIRECT_ANNOTATION) or settings.gpu_direct),
        annotations=annotations,
        fabric_profile=settings.fabric_profile,
    )
    spec = wire_rdma({**spec, "containers": containers}, wiring, [dict(NCCL_CONF_ENV)])
    spec["schedulerName"] = settings.scheduler_name
    gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != GANG_GATE]
    spec["schedulingGates"] = [*gates, {"name": GANG_GATE}]
    labels = {**(meta.get("labels") or {}), GANG_LABEL: member.gang}
    if member.rank is not None:
        labels[RANK_LABEL] = str(member.rank)
    meta["labels"] = labels
    wired = {**pod, "metadata": meta, "spec": spec}
    return _onto_plan(wired, member, settings) if settings.plans is not None else wired


def _onto_plan(
    pod: dict[str, Any], member: GangMember, settings: WebhookSettings
) -> dict[str, Any]:
    """Return the wired ``pod`` ranked and numbered with its gang attempt, and released onto
    the gang's plan when that plan was made for its attempt (:mod:`tpfabric_core.gang_attempts`).

    Only a pod whose rank is known at admission is numbered (:func:`.ranks.rank_at_admission`): the
    placer plans such a gang from its first pods. The others carry no attempt and are planned
    once every pod exists.
    """
    if settings.plans is None:
        return pod
    rank = rank_at_admission(pod, member, settings.plans, settings.gangs.max_size)
    if rank is None:
        return pod
    labels = pod["metadata"]["labels"]
    labels[RANK_LABEL] = str(rank)
    restart = jobset_restarts(labels) if member.kind == "JobSet" else None
    given, plan = settings.plans.stamp(member.namespace, member.gang, rank, restart)
    labels[ATTEMPT_LABEL] = str(given.attempt)
    if not given.born_released or plan is None:
        return pod
    nodes = (
        settings.nodes.remember(_BY_NAME, lambda offers: {o.name: o for o in offers})
        if settings.nodes is not None
        else None
    )
    return release_onto_plan(pod, plan, rank, nodes) or pod


#: the key of the nodes' offers by name in the node view's memo
_BY_NAME = ("offers by node name",)


def mark_problems(pod: Mapping[str, Any], problems: list[str]) -> dict[str, Any]:
    """Return the pod, unwired, marked as admitted with ``problems`` (the label
    ``tpfabric.io/gang-problem`` and the problems in an annotation, one a line); a new dict."""
    meta = dict(pod.get("metadata") or {})
    meta["labels"] = {**(meta.get("labels") or {}), GANG_PROBLEM_LABEL: "true"}
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        GANG_PROBLEMS_ANNOTATION: "\n".join(problems)[:_PROBLEMS_CHARACTERS],
    }
    return {**pod, "metadata": meta}


def _patch(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return the JSON patch from ``before`` to ``after`` on the pod's labels, annotations and
    spec fields."""
    old_meta, new_meta = before.get("metadata") or {}, after.get("metadata") or {}
    ops: list[dict[str, Any]] = [
        {"op": "add", "path": f"/metadata/{key}", "value": new_meta[key]}
        for key in ("labels", "annotations")
        if old_meta.get(key) != new_meta.get(key)
    ]
    old_spec, new_spec = before.get("spec") or {}, after.get("spec") or {}
    # "add" on an object's member replaces it; the spec's top-level keys need no escaping
    ops.extend(
        {"op": "add", "path": f"/spec/{key}", "value": value}
        for key, value in new_spec.items()
        if old_spec.get(key) != value
    )
    # a pod born released may drop a field the pod came with (its only gate, ours)
    ops.extend({"op": "remove", "path": f"/spec/{key}"} for key in old_spec if key not in new_spec)
    return ops


def admit(review: Mapping[str, Any], settings: WebhookSettings) -> dict[str, Any]:
    """Return the AdmissionReview answering ``review`` (raises :class:`BadReviewError`)."""
    request = review.get("request") if isinstance(review, Mapping) else None
    if not isinstance(request, Mapping) or not request.get("uid"):
        raise BadReviewError("not an AdmissionReview: request.uid is missing")
    api_version = str(review.get("apiVersion") or "admission.k8s.io/v1")
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    answer = {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}
    pod = request.get("object")
    kind = (request.get("kind") or {}).get("kind")
    if kind != "Pod" or request.get("operation") != "CREATE":
        return answer  # the configuration sends pod creations only; anything else passes
    if not isinstance(pod, Mapping):
        raise BadReviewError("request.object is not a pod")
    member = gang_of(
        pod.get("metadata") or {},
        settings.gangs,
        namespace=str(request.get("namespace") or ""),
        spec=pod.get("spec") or {},
    )
    if member is None or is_wired(pod.get("spec") or {}):
        return answer
    problems = _problems(pod, member, settings)
    if problems:
        response["warnings"] = [
            f"tpfabric: pod admitted unwired, not placed as gang {member.gang!r}: {p}"
            for p in problems
        ]
        # marked, so that the operator tells the pod itself (an Event): a controller's pods
        # have no one to read the warning
        response["patchType"] = "JSONPatch"
        ops = _patch(pod, mark_problems(pod, problems))
        response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        return answer
    ops = _patch(pod, mutate_pod(pod, member, settings))
    if ops:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
    return answer
