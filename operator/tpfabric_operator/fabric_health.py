"""What a node labelled degraded is to the operator, and the ranks of a gang found on one. Pure.

The fabric agent on every node publishes ``topology.tpfabric.io/health`` and, per rail, the
``topology.tpfabric.io/fabric-health`` annotation (:mod:`tpfabric_core.fabric.link_publish`).
The operator keeps the nodes labelled ``degraded`` in a kopf index (:mod:`.node_health`, each
entry a :class:`DegradedNode` made by :func:`degraded_node`), which both halves read with a dict
lookup per pod, never a list call: :func:`on_degraded_nodes` finds the ranks of a gang on
degraded nodes (a TensorParallelJob's, :mod:`.jobs.degraded_links`; a Gang record's,
:mod:`.gangs.serving`), :func:`straggler_message` says so, and :func:`room_elsewhere` reads the
placer's answer (``status.placement.healthyRoom``) to whether the whole gang has room off them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tpfabric_core.api.models import HealthyRoom
from tpfabric_core.fabric.link_publish import (
    CONDITION_TYPE,
    DETAIL_ANNOTATION,
    RailDetail,
    bandwidth_kept,
    read_detail,
)
from tpfabric_core.labels import PREFIX

__all__ = [
    "DegradedNode",
    "RankOnDegradedNode",
    "degraded_node",
    "lookup",
    "on_degraded_nodes",
    "room_elsewhere",
    "straggler_message",
]

RAIL_PREFIX = PREFIX + "rail-"


@dataclass(frozen=True, slots=True)
class DegradedNode:
    """What the operator keeps of a node labelled degraded."""

    name: str
    uid: str
    reasons: tuple[str, ...]  # per-port reasons of its bad rails, else the condition's message
    rails: tuple[RailDetail, ...]  # its rails that are not ok
    node_labels: tuple[tuple[str, str], ...]  # its topology.tpfabric.io/rail-<i> labels


@dataclass(frozen=True, slots=True)
class RankOnDegradedNode:
    """A running rank of a job on a degraded node."""

    rank: int | None  # None: a gang pod without a rank label
    node: str
    reasons: tuple[str, ...]
    #: what its worst rail keeps of its rate: 0 for a rail that is down, the fabric agent's
    #: measured fraction for one that runs below its rate, None when not measured (errors)
    bandwidth: float | None = None


def degraded_node(
    name: str,
    uid: str | None,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    status: Mapping[str, Any],
) -> tuple[DegradedNode, str | None]:
    """Return what the operator keeps of a node labelled degraded, and why its detail annotation
    cannot be read (None: it can, or it is absent); without a readable detail the node's reason
    is the one its condition gives."""
    detail, problem = read_detail(annotations.get(DETAIL_ANNOTATION))
    rails = tuple(r for r in detail if r.state != "ok")
    reasons = tuple(reason for rail in rails for reason in rail.reasons)
    if not reasons:
        condition: Mapping[str, Any] = next(
            (c for c in status.get("conditions") or [] if c.get("type") == CONDITION_TYPE), {}
        )
        reasons = (str(condition.get("message") or "its fabric health label says degraded"),)
    rail_labels = tuple(sorted((k, str(v)) for k, v in labels.items() if k.startswith(RAIL_PREFIX)))
    return DegradedNode(name, uid or "", reasons, rails, rail_labels), problem or None


def lookup(index: Mapping[str, Iterable[DegradedNode]], node: str) -> DegradedNode | None:
    """Return what the index keeps of ``node`` (None: not degraded, or the index changed under
    the read)."""
    try:
        return next(iter(index.get(node, ())), None)
    except RuntimeError:  # the index changed under the read: the next reconcile looks again
        return None


def on_degraded_nodes(
    placed: Iterable[tuple[int | None, str | None]], index: Mapping[str, Iterable[DegradedNode]]
) -> list[RankOnDegradedNode]:
    """Return the ``(rank, node)`` pairs whose node is degraded, by rank (a pod with no rank
    label last), with the node's reasons and what its worst rail keeps; the pods of a
    TensorParallelJob (:func:`ranks_on_degraded_nodes`) and of a gang record alike."""
    found = []
    for rank, name in placed:
        node = lookup(index, name) if name is not None else None
        if node is not None and name is not None:
            found.append(RankOnDegradedNode(rank, name, node.reasons, bandwidth_kept(node.rails)))
    return sorted(found, key=lambda r: (r.rank is None, r.rank or 0, r.node))


def straggler_message(ranks: list[RankOnDegradedNode]) -> str:
    """Return the ``Degraded`` condition's and the Event's words, e.g. ``straggler risk: rank 1
    on node dgx-07: symbol errors 1,200/min on mlx5_3 port 1 (limit 24/min)``."""
    parts = [
        f"rank {r.rank if r.rank is not None else '?'} on node {r.node}: {'; '.join(r.reasons)}"
        for r in ranks
    ]
    return "straggler risk: " + " | ".join(parts)


def room_elsewhere(room: HealthyRoom | None, ranks: list[RankOnDegradedNode]) -> str:
    """Return why the job cannot move off the degraded nodes of ``ranks`` now ("" when it can):
    the placer's answer (``status.placement.healthyRoom``, read typed) must be for those nodes
    and have found room."""
    nodes = {r.node for r in ranks}
    if room is None or not nodes <= set(room.degraded_nodes):
        return "the placer has not looked for healthy room elsewhere yet"
    if not room.found:
        return room.message or "no healthy room for the whole gang"
    return ""
