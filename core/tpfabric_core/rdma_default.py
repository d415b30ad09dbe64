"""The RDMA devices a gang pod gets when it names none, and why. Pure.

One rule for the gang webhook (pods other controllers make) and the operator (the workers of a
TensorParallelJob whose ``spec.rdma.count`` is unset): a pod that takes GPUs, in a gang of more
than one pod, gets the cluster's RDMA resource (a setting: ``rdma/ib``, the network operator's
``rdma/rdma_shared_device_a`` ...) in the amount the nodes that could hold it offer.

Why what the nodes offer, and not what the plan picks: a pod's resources are fixed when it is
created, and a gang of another controller is admitted pod by pod before its plan exists. So:

- the candidates are the GPU nodes that could hold the pod: enough allocatable GPUs, its node
  selector and required node affinity match; of those, the nodes of the labelled fabric (any of
  the configured level labels) when some are labelled;
- each candidate offers its allocatable RDMA devices scaled to the pod's share of its GPUs
  (8 GPUs of 8: all of them; 4 of 8: half, at least one when it has any);
- the default is the most common offer (a tie: the smaller one); zero when no candidate offers
  any: the pod runs without RDMA, and its decision says so.

What a pod asks itself always wins: the ``tpfabric.io/rdma-count`` annotation, a container that
names the RDMA resource, a job's ``spec.rdma.count`` (``0`` means TCP), or a number the chart
sets in place of ``auto``. Pods without GPUs and gangs of one pod get no RDMA by default (their
traffic never crosses the fabric).

The decision is written on the pod (:data:`RDMA_ANNOTATION`, compact JSON) so that the job's or
Gang record's ``RDMA`` condition, ``tpfabric explain`` and ``rdma-init``'s report all say the
same thing. Nothing here reads the cluster: the callers keep a cached view of the nodes
(:class:`NodeOffer`) and hand it in.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tpfabric_core.placement.pod_fit import container_gpus, resource_amount
from tpfabric_core.rail_ports import node_rails

__all__ = [
    "NODES_OFFER",
    "NODES_OFFER_NONE",
    "NOT_REQUESTED",
    "RDMA_ANNOTATION",
    "RDMA_CONDITION",
    "REQUESTED",
    "NodeOffer",
    "RdmaDecision",
    "decide_rdma",
    "offered_count",
    "parse_decision",
    "rdma_condition",
    "with_rdma_devices",
]

GPU_RESOURCE = "nvidia.com/gpu"
#: the pod annotation that carries the decision (written by the webhook and the operator)
RDMA_ANNOTATION = "tpfabric.io/rdma"
#: the condition type on a TensorParallelJob or a Gang record
RDMA_CONDITION = "RDMA"
#: the pod names its RDMA devices (annotation, resources, spec.rdma, the chart's number)
REQUESTED = "Requested"
#: the default: what the nodes that could hold the pod offer
NODES_OFFER = "NodesOffer"
#: no RDMA asked: an explicit 0, a pod without GPUs, a gang of one pod
NOT_REQUESTED = "NotRequested"
#: the default found no candidate node offering the RDMA resource
NODES_OFFER_NONE = "NodesOfferNone"
_REASONS = (REQUESTED, NODES_OFFER, NOT_REQUESTED, NODES_OFFER_NONE)
_MESSAGE_LIMIT = 512


@dataclass(frozen=True, slots=True)
class NodeOffer:
    """What one node offers a pod: its labels and allocatable extended resources."""

    name: str
    labels: Mapping[str, str]
    #: allocatable extended resources (``nvidia.com/gpu``, the RDMA resource, ...), whole counts
    resources: Mapping[str, int]
    #: its rails in order, each with its port GUID where its rail map gives one
    #: (:func:`tpfabric_core.rail_ports.node_rails`): what a pod planned onto it is told
    rails: tuple[tuple[int, str | None], ...] = ()

    @classmethod
    def from_node(cls, obj: Mapping[str, Any]) -> NodeOffer | None:
        """Return the offer of a Node object (a dict as the API returns it); None when it has
        no name. A quantity that cannot be read counts as absent, never as an error."""
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
            return None
        status = obj.get("status")
        allocatable = status.get("allocatable") if isinstance(status, Mapping) else None
        resources: dict[str, int] = {}
        for key, value in (allocatable if isinstance(allocatable, Mapping) else {}).items():
            if "/" not in str(key):
                continue  # cpu, memory, pods: not what a default is made of
            try:
                resources[str(key)] = resource_amount(str(key), value)
            except ValueError:
                continue
        labels = meta.get("labels")
        node_labels = (
            {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
        )
        annotations = meta.get("annotations")
        rails, _ = node_rails(node_labels, annotations if isinstance(annotations, Mapping) else {})
        return cls(name=meta["name"], labels=node_labels, resources=resources, rails=rails)


@dataclass(frozen=True, slots=True)
class RdmaDecision:
    """The RDMA devices of a pod, and why: ``reason`` is one of the four reasons above."""

    resource: str
    count: int
    reason: str
    message: str

    @property
    def transport(self) -> str:
        """Return ``rdma`` when the pod gets RDMA devices, else ``tcp``."""
        return "rdma" if self.count > 0 else "tcp"

    def annotation(self) -> str:
        """Return the value of :data:`RDMA_ANNOTATION` (compact JSON)."""
        return json.dumps(
            {
                "resource": self.resource,
                "count": self.count,
                "reason": self.reason,
                "message": self.message[:_MESSAGE_LIMIT],
            },
            separators=(",", ":"),
            sort_keys=True,
        )


def parse_decision(text: object) -> RdmaDecision | None:
    """Return the decision a pod's :data:`RDMA_ANNOTATION` carries; None when it is absent or
    is not one (never raises: anyone may write a pod's annotations)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    count, reason = data.get("count"), data.get("reason")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        return None
    if reason not in _REASONS:
        return None
    return RdmaDecision(
        resource=str(data.get("resource") or ""),
        count=count,
        reason=str(reason),
        message=str(data.get("message") or "")[:_MESSAGE_LIMIT],
    )


def _share(rdma: int, node_gpus: int, pod_gpus: int) -> int:
    """Return the RDMA devices of a node that go with ``pod_gpus`` of its ``node_gpus``."""
    if rdma <= 0:
        return 0
    if pod_gpus >= node_gpus:
        return rdma
    return max(1, rdma * pod_gpus // node_gpus)


def with_rdma_devices(
    containers: list[dict[str, Any]], resource: str, count: int
) -> list[dict[str, Any]]:
    """Return ``containers`` with ``count`` RDMA devices (their limit of ``resource``) on each
    that takes GPUs (else the first); a container that names the resource already keeps its own
    amount. New dicts where changed; ``containers`` is left as it was."""
    takers = [i for i, c in enumerate(containers) if container_gpus(c)] or [0]
    result = []
    for index, container in enumerate(containers):
        resources = dict(container.get("resources") or {})
        limits = dict(resources.get("limits") or {})
        requests = resources.get("requests") or {}
        if index in takers and resource not in limits and resource not in requests:
            limits[resource] = str(count)
            resources["limits"] = limits
            result.append({**container, "resources": resources})
        else:
            result.append(container)
    return result


def offered_count(
    pod_gpus: int,
    resource: str,
    nodes: Iterable[NodeOffer],
    *,
    eligible: Callable[[str, Mapping[str, str]], bool] | None = None,
    fabric_keys: Iterable[str] = (),
) -> tuple[int, int]:
    """Return (the RDMA devices most candidate nodes offer a pod of ``pod_gpus`` GPUs, the
    number of candidates). See the module docstring for who is a candidate; a tie between two
    offers goes to the smaller one."""
    keys = tuple(fabric_keys)
    candidates = [
        node
        for node in nodes
        if node.resources.get(GPU_RESOURCE, 0) >= max(pod_gpus, 1)
        and (eligible is None or eligible(node.name, node.labels))
    ]
    labelled = [n for n in candidates if any(k in n.labels for k in keys)]
    chosen = labelled or candidates
    offers = Counter(
        _share(n.resources.get(resource, 0), n.resources.get(GPU_RESOURCE, 0), pod_gpus)
        for n in chosen
    )
    if not offers:
        return 0, 0
    count = min(offers.items(), key=lambda item: (-item[1], item[0]))[0]
    return count, len(chosen)


def decide_rdma(
    *,
    resource: str,
    pod_gpus: int,
    gang_size: int | None,
    asked: int | None = None,
    asked_by: str = "",
    nodes: Iterable[NodeOffer] = (),
    eligible: Callable[[str, Mapping[str, str]], bool] | None = None,
    fabric_keys: Iterable[str] = (),
) -> RdmaDecision:
    """Return the RDMA devices of a pod and why.

    ``asked``: what the pod (or its job, or the chart's number) names, with ``asked_by`` saying
    where (``annotation tpfabric.io/rdma-count``); None: the default applies. ``gang_size``: the
    pods of its gang (None: not known from the pod, a JobSet's: counted as more than one).
    """
    if asked is not None:
        if asked > 0:
            return RdmaDecision(
                resource, asked, REQUESTED, f"{asked} {resource} per pod, as {asked_by} asks"
            )
        return RdmaDecision(
            resource,
            0,
            NOT_REQUESTED,
            f"{asked_by} asks 0 {resource}: the gang runs over TCP sockets; drop it (or give a "
            "count) to run over RDMA",
        )
    if pod_gpus <= 0:
        return RdmaDecision(
            resource,
            0,
            NOT_REQUESTED,
            f"the pod takes no GPUs, so it gets no {resource} by default; annotate it "
            "tpfabric.io/rdma-count to give it RDMA devices",
        )
    if gang_size is not None and gang_size <= 1:
        return RdmaDecision(
            resource,
            0,
            NOT_REQUESTED,
            f"a gang of one pod sends nothing over the fabric, so it gets no {resource} by "
            "default; annotate it tpfabric.io/rdma-count (a job: spec.rdma.count) to give it RDMA "
            "devices",
        )
    count, candidates = offered_count(
        pod_gpus, resource, nodes, eligible=eligible, fabric_keys=fabric_keys
    )
    if count > 0:
        return RdmaDecision(
            resource,
            count,
            NODES_OFFER,
            f"{count} {resource} per pod: what most of the {candidates} GPU node(s) that could "
            f"hold it offer for {pod_gpus} GPU(s)",
        )
    where = (
        f"none of the {candidates} GPU node(s) that could hold the pod offers {resource}"
        if candidates
        else f"no GPU node with {pod_gpus} allocatable GPU(s) matches the pod"
    )
    return RdmaDecision(
        resource,
        0,
        NODES_OFFER_NONE,
        f"{where}, so the gang runs over TCP sockets; if the nodes' RDMA device plugin "
        "advertises another resource, set the chart's rdma.resourceName to it",
    )


def rdma_condition(decisions: Iterable[RdmaDecision | None]) -> dict[str, str] | None:
    """Return the ``RDMA`` condition (type, status, reason, message) of a gang from its pods'
    decisions: ``False`` with the reason of a pod that runs without RDMA when one does, else
    ``True``; None when no pod carries a decision (made by an older tpfabric, or none yet)."""
    known = [d for d in decisions if d is not None]
    if not known:
        return None
    without = [d for d in known if d.count == 0]
    if without:
        worst = without[0]
        return {
            "type": RDMA_CONDITION,
            "status": "False",
            "reason": worst.reason,
            "message": worst.message,
        }
    first = known[0]
    counts = sorted({d.count for d in known})
    message = first.message if len(counts) == 1 else (
        f"{'/'.join(str(c) for c in counts)} {first.resource} per pod ({first.message})"
    )  # fmt: skip
    return {"type": RDMA_CONDITION, "status": "True", "reason": first.reason, "message": message}
