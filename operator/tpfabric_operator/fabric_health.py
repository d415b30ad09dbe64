"""Live fabric health in the operator: the nodes labelled degraded, and suspect rail switches.

The fabric agent on every node publishes ``topology.tpfabric.io/health`` and, per rail, the
``topology.tpfabric.io/fabric-health`` annotation (:mod:`tpfabric_core.fabric.link_publish`).
The kopf index of the nodes labelled ``degraded`` (registered by :mod:`.handlers`, each entry
made by :func:`degraded_nodes`; kopf drops a node from it as soon as the label says otherwise)
is read by both halves of the operator with a dict lookup per pod, never a list call:

- :func:`on_degraded_nodes` finds the ranks of a gang (a TensorParallelJob's,
  :mod:`.jobs.degraded_links`; a Gang record's, :mod:`.gangs.serving`) on degraded nodes, and
  :func:`straggler_message` says so; :func:`room_elsewhere` reads the placer's answer
  (``status.placement.healthyRoom``) to whether the whole gang has room off them.
- :func:`report_suspect_switches` runs on node events: when at least
  :data:`SUSPECT_MIN_NODES` nodes under one rail leaf switch are degraded on that rail at once,
  the switch is reported (a Warning Event ``SuspectRailSwitch`` on each of those nodes, and a
  log line), once per change of the suspect set. The operator does this, not the placer: it
  already watches cluster-wide, it is the component that writes Events for people, and the
  extender's hot path must not grow per-node bookkeeping.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from tpfabric_core.fabric.link_publish import (
    CONDITION_TYPE,
    DETAIL_ANNOTATION,
    RailDetail,
    SuspectSwitch,
    bandwidth_kept,
    read_detail,
    suspect_rail_switches,
)
from tpfabric_core.labels import PREFIX
from tpfabric_kube.malformed import MalformedObjects
from tpfabric_operator import leadership
from tpfabric_operator.settings import SUSPECT_SWITCH_NODES

__all__ = [
    "SUSPECT_MIN_NODES",
    "DegradedNode",
    "RankOnDegradedNode",
    "degraded_nodes",
    "lookup",
    "on_degraded_nodes",
    "report_suspect_switches",
    "room_elsewhere",
    "straggler_message",
]

log = logging.getLogger("tpfabric.operator")

#: nodes of one rail switch degraded on its rail at once that make the switch suspect
SUSPECT_MIN_NODES = SUSPECT_SWITCH_NODES
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


#: the degraded nodes whose detail the index cannot read: counted and logged once per version of
#: the node, with no Event: the extender, which the chart always installs beside the operator,
#: reads the same annotation of the same node version and tells it on the node (one Event
#: ``MalformedObject``, named per version and field, shared by its replicas); a second Event in
#: the same words from the operator would only double what ``kubectl describe node`` shows
_unreadable_details = MalformedObjects("tpfabric-operator")


def degraded_nodes(
    *,
    name: str,
    uid: str | None,
    labels: kopf.Labels,
    annotations: kopf.Annotations,
    status: kopf.Status,
    meta: Mapping[str, Any] | None = None,
    **_: Any,
) -> dict[str, DegradedNode]:
    """Index the nodes labelled ``topology.tpfabric.io/health=degraded`` by name (a detail
    that cannot be read is reported, and the node indexed with the reason its condition gives)."""
    detail, problem = read_detail(annotations.get(DETAIL_ANNOTATION))
    if problem:
        version = str((meta or {}).get("resourceVersion") or "")
        node = {"metadata": {"name": name, "uid": uid or "", "resourceVersion": version}}
        _unreadable_details.field("Node", node, DETAIL_ANNOTATION, problem)
    rails = tuple(r for r in detail if r.state != "ok")
    reasons = tuple(reason for rail in rails for reason in rail.reasons)
    if not reasons:
        condition: Mapping[str, Any] = next(
            (c for c in status.get("conditions") or [] if c.get("type") == CONDITION_TYPE), {}
        )
        reasons = (str(condition.get("message") or "its fabric health label says degraded"),)
    rail_labels = tuple(sorted((k, str(v)) for k, v in labels.items() if k.startswith(RAIL_PREFIX)))
    return {name: DegradedNode(name, uid or "", reasons, rails, rail_labels)}


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


def room_elsewhere(room: Mapping[str, Any] | None, ranks: list[RankOnDegradedNode]) -> str:
    """Return why the job cannot move off the degraded nodes of ``ranks`` now ("" when it can):
    the placer's answer (``healthyRoom``) must be for those nodes and have found room."""
    nodes = {r.node for r in ranks}
    if not isinstance(room, Mapping) or not nodes <= set(room.get("degradedNodes") or ()):
        return "the placer has not looked for healthy room elsewhere yet"
    if room.get("found") is not True:
        return str(room.get("message") or "no healthy room for the whole gang")
    return ""


_reported: set[str] = set()
_reported_lock = threading.Lock()


def _node_ref(node: DegradedNode) -> kopf.Body:
    return kopf.Body(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name, "uid": node.uid}}
    )


def report_suspect_switches(degraded_nodes: Mapping[str, Iterable[DegradedNode]]) -> None:
    """Report the rail switches that became suspect (or stopped being) since the last event of a
    node labelled with its fabric health (``degraded_nodes``: the index of
    :func:`degraded_nodes`)."""
    nodes: dict[str, DegradedNode] = {}
    for name in list(degraded_nodes):
        node = lookup(degraded_nodes, name)
        if node is not None:
            nodes[name] = node
    suspects = suspect_rail_switches(
        {n.name: (dict(n.node_labels), n.rails) for n in nodes.values()}, SUSPECT_MIN_NODES
    )
    current = {s.switch: s for s in suspects}
    with _reported_lock:
        new = [s for name, s in current.items() if name not in _reported]
        cleared = _reported - set(current)
        _reported.clear()
        _reported.update(current)
    if not leadership.leading():
        return  # the replica that acts posts the Events; this one only keeps track
    for switch in new:
        _report(switch, [nodes[n] for n in switch.nodes if n in nodes])
    for name in sorted(cleared):
        log.info("rail switch %s no longer suspect", name)


def _report(switch: SuspectSwitch, nodes: list[DegradedNode]) -> None:
    log.warning("%s", switch.message)
    for node in nodes:
        kopf.event(
            _node_ref(node), type="Warning", reason="SuspectRailSwitch", message=switch.message
        )
