"""A TensorParallelJob on degraded nodes: its ``Degraded`` condition, and whether it moves.

The operator's index of degraded nodes (:mod:`tpfabric_operator.fabric_health`) tells a job's
reconcile which of its ranks run on one (:func:`ranks_on_degraded_nodes`); :func:`degraded_links`
turns that into the job's ``Degraded`` condition, a Warning Event (``DegradedLink``) and, with
``spec.topology.onDegradedLink: restart-elsewhere``, the workers to move (:func:`workers_to_move`)
that :func:`.decide.decide` restarts through the failure policy; with ``restart-when-it-pays``,
only when :func:`restart_weighing` finds running slow costs more than the restart
(:mod:`tpfabric_core.fabric.restart_rule`, the rule the simulator measures). Either restarts a
job only into healthy room the placer found for the whole gang (``status.placement.healthyRoom``,
:mod:`tpfabric_scheduler.policy.healthy_room`): without it a restart would stop a job that
runs slow for one that waits, or land it back on the node. A job is
restarted away from a set of degraded nodes once: the nodes it left are kept in its status
(``movedOffNodes``, pruned as they heal, so an operator restart forgets nothing), and a job put
back on them anyway (the room was taken meanwhile, ``avoidDegraded: penalize`` or ``ignore``)
keeps running there instead of restarting again and again. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tpfabric_core.api import TensorParallelJob
from tpfabric_core.api.models import HealthyRoom
from tpfabric_core.api.placement import StoredPlacement, read_placement
from tpfabric_core.fabric.restart_rule import RestartWeighing, slowdown_of, weigh_restart
from tpfabric_operator.fabric_health import (
    DegradedNode,
    RankOnDegradedNode,
    lookup,
    on_degraded_nodes,
    room_elsewhere,
    straggler_message,
)
from tpfabric_operator.jobs.job_state import WorkerPod
from tpfabric_operator.settings import DEGRADED_LINK_BANDWIDTH, EXPECTED_REPAIR_SECONDS

__all__ = [
    "DegradedLinks",
    "degraded_condition_words",
    "degraded_links",
    "ranks_on_degraded_nodes",
    "restart_weighing",
    "still_degraded",
    "workers_to_move",
]


def ranks_on_degraded_nodes(
    pods: Iterable[WorkerPod], index: Mapping[str, Iterable[DegradedNode]]
) -> list[RankOnDegradedNode]:
    """Return the ranks of the job's running (or starting) workers that sit on degraded nodes,
    by rank."""
    return on_degraded_nodes(((p.index, p.node) for p in pods if p.active), index)


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
    return frozenset(n for n in moved_off or () if isinstance(n, str) and lookup(index, n))


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
    placement: StoredPlacement | Mapping[str, Any],
) -> DegradedLinks:
    """Return the job's ranks on degraded nodes, the workers to move and what to say of them."""
    ranks = ranks_on_degraded_nodes(pods, index)
    moved_off = still_degraded(status.get("movedOffNodes"), index)
    move, weighing = workers_to_move(
        job, ranks, moved_off=moved_off, room=read_placement(placement).healthy_room
    )
    return DegradedLinks(ranks, moved_off, move, degraded_condition_words(job, ranks, weighing))


def workers_to_move(
    job: TensorParallelJob,
    ranks: list[RankOnDegradedNode],
    *,
    moved_off: frozenset[str] = frozenset(),
    room: HealthyRoom | None = None,
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
