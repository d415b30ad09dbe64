"""Live fabric health in the operator: which ranks run on degraded nodes, and suspect switches.

The fabric agent on every node publishes ``topology.tpfabric.io/health`` and, per rail, the
``topology.tpfabric.io/fabric-health`` annotation (:mod:`tpfabric_core.fabric.link_publish`).
The kopf index :func:`degraded_nodes` keeps the nodes labelled ``degraded`` (kopf drops a node
from it as soon as the label says otherwise), so a job's reconcile finds its ranks on degraded
nodes with a dict lookup per worker, never a list call.

- :func:`ranks_on_degraded_nodes` and :func:`straggler_message` are pure: the reconcile turns
  them into the job's ``Degraded`` condition, a Warning Event (``DegradedLink``) and, with
  ``spec.topology.onDegradedLink: restart-elsewhere``, the workers to move
  (:func:`workers_to_move`) that ``decide.decide`` restarts through the failure policy.
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

from tpfabric_core.api import TensorParallelJob
from tpfabric_core.fabric.link_publish import (
    CONDITION_TYPE,
    DETAIL_ANNOTATION,
    RailDetail,
    SuspectSwitch,
    parse_detail,
    suspect_rail_switches,
)
from tpfabric_core.labels import HEALTH, PREFIX
from tpfabric_operator import leadership
from tpfabric_operator.job_state import WorkerPod
from tpfabric_operator.settings import SUSPECT_SWITCH_NODES

__all__ = [
    "SUSPECT_MIN_NODES",
    "DegradedNode",
    "RankOnDegradedNode",
    "degraded_nodes",
    "ranks_on_degraded_nodes",
    "report_suspect_switches",
    "straggler_message",
    "workers_to_move",
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

    rank: int
    node: str
    reasons: tuple[str, ...]


@kopf.index("nodes", labels={HEALTH: "degraded"})
def degraded_nodes(
    *,
    name: str,
    uid: str | None,
    labels: kopf.Labels,
    annotations: kopf.Annotations,
    status: kopf.Status,
    **_: Any,
) -> dict[str, DegradedNode]:
    """Index the nodes labelled ``topology.tpfabric.io/health=degraded`` by name."""
    rails = tuple(r for r in parse_detail(annotations.get(DETAIL_ANNOTATION)) if r.state != "ok")
    reasons = tuple(reason for rail in rails for reason in rail.reasons)
    if not reasons:
        condition: Mapping[str, Any] = next(
            (c for c in status.get("conditions") or [] if c.get("type") == CONDITION_TYPE), {}
        )
        reasons = (str(condition.get("message") or "its fabric health label says degraded"),)
    rail_labels = tuple(sorted((k, str(v)) for k, v in labels.items() if k.startswith(RAIL_PREFIX)))
    return {name: DegradedNode(name, uid or "", reasons, rails, rail_labels)}


def _lookup(index: Mapping[str, Iterable[DegradedNode]], node: str) -> DegradedNode | None:
    return next(iter(index.get(node, ())), None)


def ranks_on_degraded_nodes(
    pods: Iterable[WorkerPod], index: Mapping[str, Iterable[DegradedNode]]
) -> list[RankOnDegradedNode]:
    """Return the ranks of the job's running (or starting) workers that sit on degraded nodes,
    by rank."""
    found = []
    for pod in pods:
        if not pod.active or pod.node is None:
            continue
        node = _lookup(index, pod.node)
        if node is not None:
            found.append(RankOnDegradedNode(pod.index, pod.node, node.reasons))
    return sorted(found, key=lambda r: r.rank)


def straggler_message(ranks: list[RankOnDegradedNode]) -> str:
    """Return the ``Degraded`` condition's and the Event's words, e.g. ``straggler risk: rank 1
    on node dgx-07: symbol errors 1,200/min on mlx5_3 port 1 (limit 24/min)``."""
    parts = [f"rank {r.rank} on node {r.node}: {'; '.join(r.reasons)}" for r in ranks]
    return "straggler risk: " + " | ".join(parts)


def workers_to_move(job: TensorParallelJob, ranks: list[RankOnDegradedNode]) -> dict[int, str]:
    """Return ``{worker: why}`` to restart elsewhere (``onDegradedLink: restart-elsewhere``)."""
    if job.spec.topology.on_degraded_link != "restart-elsewhere":
        return {}
    return {
        r.rank: f"node {r.node} is degraded ({'; '.join(r.reasons)}); moving it elsewhere"
        for r in ranks
    }


_reported: set[str] = set()
_reported_lock = threading.Lock()


def _node_ref(node: DegradedNode) -> kopf.Body:
    return kopf.Body(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name, "uid": node.uid}}
    )


@kopf.on.event("nodes", labels={HEALTH: kopf.PRESENT})
def report_suspect_switches(**kwargs: Any) -> None:
    """Report the rail switches that became suspect (or stopped being) since the last event."""
    degraded_nodes: kopf.Index[str, DegradedNode] = kwargs["degraded_nodes"]
    nodes: dict[str, DegradedNode] = {}
    for name in list(degraded_nodes):
        node = _lookup(degraded_nodes, name)
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
