"""A node's record as placement reads it, with its fabric health: its health label (degraded too
while its RoCE settings are off the fabric's contract), what its worst rail keeps, its rails and
its ``FabricHealthy`` condition. Pure data: no I/O here."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tpfabric_core.fabric.link_publish import (
    CONDITION_TYPE,
    DETAIL_ANNOTATION,
    bandwidth_kept,
    read_detail,
)
from tpfabric_core.fabric.roce_contract import CONTRACT_CONDITION
from tpfabric_core.labels import HEALTH
from tpfabric_core.placement.pod_fit import resource_amount
from tpfabric_core.rail_ports import node_rails

__all__ = ["NodeRecord", "index_nodes"]


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What placement needs of a node."""

    name: str
    #: the node's labels; ``topology.tpfabric.io/health`` reads ``degraded`` too while its
    #: ``FabricContractMet`` condition is False
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
        if conditions.get(CONTRACT_CONDITION) == "False":
            # RoCE settings off the fabric's contract (PFC or ECN off on the lossless priority,
            # trust pcp): as slow as a degraded link for a collective, so placed like one
            node_labels[HEALTH] = "degraded"
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


def index_nodes(records: Iterable[NodeRecord]) -> dict[str, NodeRecord]:
    """Return ``records`` by node name (pure)."""
    return {node.name: node for node in records}
