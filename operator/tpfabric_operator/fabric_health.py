"""Live fabric health in the operator: which ranks run on degraded nodes, and suspect switches.

The fabric agent on every node publishes ``topology.tpfabric.io/health`` and, per rail, the
``topology.tpfabric.io/fabric-health`` annotation (:mod:`tpfabric_core.fabric.link_publish`).
The kopf index :func:`degraded_nodes` keeps the nodes labelled ``degraded`` (kopf drops a node
from it as soon as the label says otherwise), so a job's reconcile finds its ranks on degraded
nodes with a dict lookup per worker, never a list call.

- :func:`ranks_on_degraded_nodes` and :func:`straggler_message` are pure: the reconcile turns
  them into the job's ``Degraded`` condition, a Warning Event (``DegradedLink``) and, with
  ``spec.topology.onDegradedLink: restart-elsewhere``, the workers to move
  (:func:`workers_to_move`) that ``decide.decide`` restarts through the failure policy; with
  ``restart-when-it-pays``, only when :func:`restart_weighing` finds running slow costs more than
  the restart (:mod:`tpfabric_core.fabric.restart_rule`, the rule the simulator measures).
  Either restarts a job only into healthy room the placer found for the whole gang
  (``status.placement.healthyRoom``, :mod:`tpfabric_scheduler.healthy_room`): without it a
  restart would stop a job that runs slow for one that waits, or land it back on the node. A
  job is restarted away from a set of degraded nodes once: the nodes it left are kept in its
  status (``movedOffNodes``, pruned as they heal, so an operator restart forgets nothing), and a
  job put back on them anyway (the room was taken meanwhile, ``avoidDegraded: penalize`` or
  ``ignore``) keeps running there instead of restarting again and again.
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
    bandwidth_kept,
    read_detail,
    suspect_rail_switches,
)
from tpfabric_core.fabric.restart_rule import RestartWeighing, slowdown_of, weigh_restart
from tpfabric_core.labels import HEALTH, PREFIX
from tpfabric_kube.malformed import MalformedObjects
from tpfabric_operator import leadership
from tpfabric_operator.jobs.job_state import WorkerPod
from tpfabric_operator.settings import (
    DEGRADED_LINK_BANDWIDTH,
    EXPECTED_REPAIR_SECONDS,
    SUSPECT_SWITCH_NODES,
)

__all__ = [
    "SUSPECT_MIN_NODES",
    "DegradedLinks",
    "DegradedNode",
    "RankOnDegradedNode",
    "degraded_condition_words",
    "degraded_links",
    "degraded_nodes",
    "on_degraded_nodes",
    "ranks_on_degraded_nodes",
    "report_suspect_switches",
    "restart_weighing",
    "room_elsewhere",
    "still_degraded",
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


@kopf.index("nodes", labels={HEALTH: "degraded"})
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


def _lookup(index: Mapping[str, Iterable[DegradedNode]], node: str) -> DegradedNode | None:
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
        node = _lookup(index, name) if name is not None else None
        if node is not None and name is not None:
            found.append(RankOnDegradedNode(rank, name, node.reasons, bandwidth_kept(node.rails)))
    return sorted(found, key=lambda r: (r.rank is None, r.rank or 0, r.node))


def ranks_on_degraded_nodes(
    pods: Iterable[WorkerPod], index: Mapping[str, Iterable[DegradedNode]]
) -> list[RankOnDegradedNode]:
    """Return the ranks of the job's running (or starting) workers that sit on degraded nodes,
    by rank."""
    return on_degraded_nodes(((p.index, p.node) for p in pods if p.active), index)


def straggler_message(ranks: list[RankOnDegradedNode]) -> str:
    """Return the ``Degraded`` condition's and the Event's words, e.g. ``straggler risk: rank 1
    on node dgx-07: symbol errors 1,200/min on mlx5_3 port 1 (limit 24/min)``."""
    parts = [
        f"rank {r.rank if r.rank is not None else '?'} on node {r.node}: {'; '.join(r.reasons)}"
        for r in ranks
    ]
    return "straggler risk: " + " | ".join(parts)


def degraded_condition_words(
    job: TensorParallelJob, ranks: list[RankOnDegradedNode], weighing: str
) -> str:
    """Return the ``Degraded`` condition's and the ``DegradedLink`` Event's words: the straggler
    message, then the restart weighing when there is one ("" when nothing is to be said)."""
    if not ranks or job.spec.topology.on_degraded_link == "ignore":
        return ""
    words = straggler_message(ranks)
    return f"{words}; {weighing}" if weighing else words


def still_degraded(
    moved_off: Iterable[str] | None, index: Mapping[str, Iterable[DegradedNode]]
) -> frozenset[str]:
    """Return the nodes of a job's ``status.movedOffNodes`` that are still degraded (a node
    that healed is forgotten: should it degrade again, the job is judged afresh)."""
    return frozenset(n for n in moved_off or () if isinstance(n, str) and _lookup(index, n))


@dataclass(frozen=True, slots=True)
class DegradedLinks:
    """What a job's reconcile makes of the degraded nodes under it (:func:`degraded_links`)."""

    #: its ranks on degraded nodes
    ranks: list[RankOnDegradedNode]
    #: the still-degraded nodes it was restarted away from before (``status.movedOffNodes``)
    moved_off: frozenset[str]
    #: the workers to restart elsewhere, with why
    move: dict[int, str]
    #: the Degraded condition's and the DegradedLink Event's words ("": nothing to say)
    words: str

    def moved_off_after(self, failure_reason: str | None) -> frozenset[str]:
        """Return ``status.movedOffNodes`` once the reconcile's intent is known: the nodes the
        moved workers leave are added when it restarts them (its incident is ``DegradedLink``)."""
        if failure_reason != "DegradedLink":
            return self.moved_off
        return self.moved_off | {r.node for r in self.ranks if r.rank in self.move}


def degraded_links(
    job: TensorParallelJob,
    pods: Iterable[WorkerPod],
    index: Mapping[str, Iterable[DegradedNode]],
    status: Mapping[str, Any],
    placement: Mapping[str, Any],
) -> DegradedLinks:
    """Return the job's ranks on degraded nodes, the workers to move and what to say of them."""
    ranks = ranks_on_degraded_nodes(pods, index)
    moved_off = still_degraded(status.get("movedOffNodes"), index)
    move, weighing = workers_to_move(
        job, ranks, moved_off=moved_off, room=placement.get("healthyRoom")
    )
    return DegradedLinks(ranks, moved_off, move, degraded_condition_words(job, ranks, weighing))


def workers_to_move(
    job: TensorParallelJob,
    ranks: list[RankOnDegradedNode],
    *,
    moved_off: frozenset[str] = frozenset(),
    room: Mapping[str, Any] | None = None,
    expected_repair_s: float = EXPECTED_REPAIR_SECONDS,
    unmeasured_bandwidth: float = DEGRADED_LINK_BANDWIDTH,
) -> tuple[dict[int, str], str]:
    """Return ``({worker: why}, words)``: the workers to restart elsewhere, and why the job
    restarts or keeps running (with ``restart-when-it-pays`` the weighing, else "").

    ``restart-elsewhere`` moves every rank on a degraded node. ``restart-when-it-pays`` weighs
    (:func:`restart_weighing`) and moves them only when the restart pays. Either moves them
    only into room: ``room`` is the placer's ``status.placement.healthyRoom``, whether the whole
    gang has a plan off its degraded nodes now (:func:`room_elsewhere`). Neither moves a job
    whose degraded nodes are all among ``moved_off``, the still-degraded nodes it was restarted
    away from before: the room it was restarted into was gone by then and it was put back on
    them, and restarting again would likely land it there again.
    """
    policy = job.spec.topology.on_degraded_link
    if not ranks or policy not in ("restart-elsewhere", "restart-when-it-pays"):
        return {}, ""
    if all(r.node in moved_off for r in ranks):
        back = sorted({r.node for r in ranks})
        return {}, (
            f"kept running: restarted once away from {', '.join(back)}, it was placed back (no "
            "healthy room elsewhere); it is not restarted again while "
            + ("that node stays" if len(back) == 1 else "those nodes stay")
            + " degraded"
        )
    words = ""
    if policy == "restart-when-it-pays":
        weighing = restart_weighing(
            job,
            ranks,
            expected_repair_s=expected_repair_s,
            unmeasured_bandwidth=unmeasured_bandwidth,
        )
        words = weighing.words
        if not weighing.pays:
            return {}, words
    blocked = room_elsewhere(room, ranks)
    if blocked:
        return {}, f"{words}; kept running: {blocked}" if words else f"kept running: {blocked}"
    moving = f"{words}; moving it elsewhere" if words else "moving it elsewhere"
    return {
        r.rank: f"node {r.node} is degraded ({'; '.join(r.reasons)}); {moving}"
        for r in ranks
        if r.rank is not None
    }, words


def room_elsewhere(room: Mapping[str, Any] | None, ranks: list[RankOnDegradedNode]) -> str:
    """Return why the job cannot move off the degraded nodes of ``ranks`` now ("" when it can):
    the placer's answer (``healthyRoom``) must be for those nodes and have found room."""
    nodes = {r.node for r in ranks}
    if not isinstance(room, Mapping) or not nodes <= set(room.get("degradedNodes") or ()):
        return "the placer has not looked for healthy room elsewhere yet"
    if room.get("found") is not True:
        return str(room.get("message") or "no healthy room for the whole gang")
    return ""


def restart_weighing(
    job: TensorParallelJob,
    ranks: list[RankOnDegradedNode],
    *,
    expected_repair_s: float,
    unmeasured_bandwidth: float,
) -> RestartWeighing:
    """Return the weighing of restarting ``job`` away from the degraded nodes of ``ranks``.

    The job runs at its slowest link: the least bandwidth any of its ranks' nodes keeps (the
    fabric agent's measure; ``unmeasured_bandwidth`` where it has none). Its steps stretch by
    :func:`slowdown_of` its declared inter-node share; the fault is expected to last
    ``expected_repair_s`` (the same expectation at any moment: the operator keeps no clock per
    fault, and a restarted operator decides the same); the work lost on a restart is half a
    checkpoint interval, its expectation, because when the job last checkpointed is the job's,
    not Kubernetes', to know; the job's remaining time is unknown, taken as longer than the
    fault. Every input stays the same while the fault does, so the decision (and the condition
    that shows it) does not flap between reconciles.
    """
    cost = job.spec.topology.restart_cost
    if cost is None:  # the model's validator requires it with restart-when-it-pays
        raise ValueError("restart-when-it-pays needs spec.topology.restartCost")
    kept = min(r.bandwidth if r.bandwidth is not None else unmeasured_bandwidth for r in ranks)
    return weigh_restart(
        slowdown=slowdown_of(cost.inter_node_comm_share, kept),
        redo_s=cost.checkpoint_interval_seconds / 2,
        restore_s=cost.restore_seconds,
        expected_fault_s=expected_repair_s,
    )


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
