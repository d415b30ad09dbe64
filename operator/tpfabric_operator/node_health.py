"""The operator's watch of node health: the index of the nodes labelled degraded, and the rail
switches they make suspect. kopf calls both through :mod:`.handlers`.

- :func:`degraded_nodes` makes one entry of the index both halves read (what is kept of a node
  is :func:`.fabric_health.degraded_node`'s); a detail annotation that cannot be read is counted
  and logged once per version of the node.
- :func:`report_suspect_switches` runs on node events: when at least :data:`SUSPECT_MIN_NODES`
  nodes under one rail leaf switch are degraded on that rail at once, the switch is reported (a
  Warning Event ``SuspectRailSwitch`` on each of those nodes, and a log line), once per change of
  the suspect set. The operator does this, not the placer: it already watches cluster-wide, it
  is the component that writes Events for people, and the extender's hot path must not grow
  per-node bookkeeping.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from tpfabric_core.fabric.link_publish import (
    DETAIL_ANNOTATION,
    SuspectSwitch,
    suspect_rail_switches,
)
from tpfabric_kube.malformed import MalformedObjects
from tpfabric_operator import leadership
from tpfabric_operator.fabric_health import DegradedNode, degraded_node, lookup
from tpfabric_operator.settings import SUSPECT_SWITCH_NODES

__all__ = ["SUSPECT_MIN_NODES", "degraded_nodes", "report_suspect_switches"]

log = logging.getLogger("tpfabric.operator")

#: nodes of one rail switch degraded on its rail at once that make the switch suspect
SUSPECT_MIN_NODES = SUSPECT_SWITCH_NODES


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
    node, problem = degraded_node(name, uid, labels, annotations, status)
    if problem:
        version = str((meta or {}).get("resourceVersion") or "")
        body = {"metadata": {"name": name, "uid": uid or "", "resourceVersion": version}}
        _unreadable_details.field("Node", body, DETAIL_ANNOTATION, problem)
    return {name: node}


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
