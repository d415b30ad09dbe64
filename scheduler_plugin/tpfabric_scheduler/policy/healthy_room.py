"""Whether a running gang could run off its degraded nodes: the placer's answer to the
operator's ``onDegradedLink: restart-elsewhere`` and ``restart-when-it-pays``.

The operator restarts a job away from degraded nodes only once the placer has found healthy room
for it (``status.placement.healthyRoom``). A restart into no room would stop a job that runs slow
for one that does not run at all (``avoidDegraded: avoid``: the gang waits for room), or put it
back where it was (``penalize``, ``ignore``). The check plans the whole gang as if its own pods
were gone, keeping off every degraded node, on the cycle's snapshot (the other gangs'
reservations and this cycle's plans already taken off), so it is the plan a restart would get
now, with the nodes the pods a restart makes may use: those the running pods may use before
their plan narrowed them (their template, and what an admission added: Kueue's flavor labels
and TAS hosts, which a restart keeps). It runs for the few planned jobs that ask to move and
have a pod on a degraded node, at most every :data:`RECHECK_SECONDS` per job unless its
degraded nodes change, and its answer is written only when it changes (found or not, for which
nodes). The first look for a set of degraded nodes offers any healthy room; a later look offers
room only while no gang of the cycle waits for capacity: what frees is the queue's first. Pure:
reads a view of the store and the cycle's snapshot, returns the answer to write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from tpfabric_core import labels
from tpfabric_core.api import TensorParallelJob
from tpfabric_core.api.gang import GANG_KIND
from tpfabric_core.api.models import HealthyRoom
from tpfabric_core.api.placement import StoredPlacement, healthy_room, with_healthy_room
from tpfabric_core.errors import InputError
from tpfabric_core.placement.cost import DEFAULT_COST, CostModelConfig
from tpfabric_core.placement.move_gain import MoveGain, move_gain
from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.results import GangPlan, Unschedulable
from tpfabric_core.placement.snapshot import CapacitySnapshot
from tpfabric_core.placement.steering import plan_expressions, widen_affinity
from tpfabric_core.placement.topology import ClusterTopology
from tpfabric_core.pod_wiring import GPU_RESOURCE
from tpfabric_scheduler.gang_request import EligibleNodes, gang_request
from tpfabric_scheduler.intent import PlacementIntent
from tpfabric_scheduler.plan_inputs import plan_on
from tpfabric_scheduler.policy.refusals import refused_nodes
from tpfabric_scheduler.store import ClusterStore, JobRecord, PodRecord
from tpfabric_scheduler.work import Cycle, PlacerMemory, Rules

__all__ = [
    "RECHECK_SECONDS",
    "RESTARTING",
    "Mover",
    "answer",
    "decide",
    "degraded_nodes_of",
    "due",
    "gain_of",
    "movers",
    "off_degraded",
    "without_pods",
]

log = logging.getLogger("tpfabric.scheduler.placer")

#: the onDegradedLink policies that restart a job away from degraded nodes
RESTARTING = ("restart-elsewhere", "restart-when-it-pays")
#: how often a job's room is looked at again while its degraded nodes stay the same
RECHECK_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class Mover:
    """A planned job that asks to move off degraded nodes, as one cycle sees it."""

    job: JobRecord
    #: its live pods, every one bound
    pods: tuple[PodRecord, ...]
    #: the nodes under its pods labelled degraded (empty: only a stale answer to clear)
    degraded: frozenset[str]
    placement: StoredPlacement
    #: the engine's request for the whole gang (None with no degraded node)
    request: GangRequest | None
    #: the least rate its degraded nodes keep, as the fabric agent measured it (None: unmeasured)
    kept: float | None = None


def movers(
    store: ClusterStore,
    degraded_nodes: frozenset[str],
    request_of: Callable[[JobRecord, PodRecord, StoredPlacement], GangRequest],
) -> list[Mover]:
    """Return the planned TensorParallelJobs with ``onDegradedLink`` restart-elsewhere or
    restart-when-it-pays, and the planned LeaderWorkerSet groups, whose whole gang is bound,
    with a pod on a degraded node or a ``healthyRoom`` answer left from one (read from
    ``store``, a view or the store locked; ``degraded_nodes``: the nodes labelled degraded). A
    job whose plan has no degraded node and no answer costs two dict lookups: this runs every
    placer cycle."""
    found = []
    for key, job in store.jobs.items():
        if job.job is None or job.job.spec.suspend:
            continue
        if job.kind == GANG_KIND:
            # a LeaderWorkerSet group: its owner's annotation, which only the operator reads,
            # says whether it moves; the answer is written either way (it is cheap and rare)
            if job.job.spec.owner.kind != "LeaderWorkerSet":  # type: ignore[union-attr]
                continue
        elif job.job.spec.topology.on_degraded_link not in RESTARTING:
            continue
        placement = store.placement_of(job)
        if not placement.planned:
            continue
        if placement.healthy_room is None and not any(n in degraded_nodes for n in placement.nodes):
            continue
        pods = tuple(
            sorted(
                (p for p in store.workers.get(key, {}).values() if not p.terminal),
                key=lambda p: p.name,
            )
        )
        if not pods or any(p.deleting or p.gated or p.node is None for p in pods):
            continue  # starting, restarting or leaving: nothing runs to be moved
        degraded = frozenset(str(p.node) for p in pods if p.node in degraded_nodes)
        if not degraded and placement.healthy_room is None:
            continue
        request = request_of(job, pods[0], placement) if degraded else None
        found.append(Mover(job, pods, degraded, placement, request, _kept(store, degraded)))
    return found


def _kept(store: ClusterStore, nodes: Iterable[str]) -> float | None:
    """Return the least rate the ``nodes`` of ``store`` keep, as measured (None: unmeasured)."""
    measured = [
        record.kept
        for name in nodes
        if (record := store.nodes.get(name)) is not None and record.kept is not None
    ]
    return min(measured) if measured else None


def degraded_nodes_of(store: ClusterStore) -> frozenset[str]:
    """Return the nodes of ``store`` labelled ``topology.tpfabric.io/health=degraded``."""
    return frozenset(
        name for name, node in store.nodes.items() if node.labels.get(labels.HEALTH) == "degraded"
    )


def without_pods(snapshot: CapacitySnapshot, pods: Iterable[PodRecord]) -> CapacitySnapshot:
    """Return a copy of ``snapshot`` with what ``pods`` take on their nodes given back."""
    freed = snapshot.copy()
    for pod in pods:
        freed.give_back(str(pod.node), pod.requests, GPU_RESOURCE)
    return freed


def off_degraded(request: GangRequest) -> GangRequest:
    """Return ``request`` keeping off every degraded node, whatever the job's own policy."""
    return replace(request, policy=replace(request.policy, avoid_degraded="avoid"))


def gain_of(
    topology: ClusterTopology,
    mover: Mover,
    plan: GangPlan,
    config: CostModelConfig = DEFAULT_COST,
) -> MoveGain | None:
    """Return how much faster ``mover``'s gang would run on ``plan`` than where it runs, its
    degraded nodes keeping what they were measured to keep (unmeasured: the cost model's
    factor); None when where it runs is not known (a plan without nodes, a node gone from the
    topology)."""
    index_of = topology.index_of
    here = [index_of.get(n) for n in mover.placement.nodes]
    there = [index_of.get(n) for n in plan.nodes_by_rank]
    if not here or None in here or None in there:
        return None
    return move_gain(
        topology,
        [i for i in here if i is not None],
        [i for i in there if i is not None],
        plan.gpus_per_worker,
        degraded=frozenset(index_of[n] for n in mover.degraded if n in index_of),
        kept=mover.kept,
        config=config,
    )


def answer(
    result: GangPlan | Unschedulable,
    degraded: frozenset[str],
    now: float,
    gain: MoveGain | None = None,
) -> HealthyRoom:
    """Return ``status.placement.healthyRoom`` for the check's ``result``: room is found only
    where the gang would run faster than where it runs (``gain``, when known)."""
    off = ", ".join(sorted(degraded))
    found = False
    if isinstance(result, GangPlan) and gain is not None and not gain.faster:
        message = (
            f"no faster room for the whole gang: {result.level} '{result.domain}' has room off "
            f"{off}, but {gain.words}"
        )
    elif isinstance(result, GangPlan):
        found = True
        message = f"{result.level} '{result.domain}' has room for the whole gang off {off}"
        if gain is not None:
            message += f": {gain.words}"
    else:
        message = f"no healthy room for the whole gang: {result.summary}"
    return healthy_room(found, degraded, message, now)


def due(
    store: ClusterStore,
    now: float,
    rules: Rules,
    memory: PlacerMemory,
    eligible: EligibleNodes,
) -> list[Mover]:
    """Return the running jobs asking to move off degraded nodes whose healthy room is due to be
    looked for (new degraded nodes, or not looked at for RECHECK_SECONDS), and those whose
    answer is stale (no degraded node any more). Read from ``store``, a view."""

    def request_of(job: JobRecord, worker: PodRecord, placement: StoredPlacement) -> GangRequest:
        assert job.job is not None
        # the pods a restart makes ask what the running ones asked before their plan narrowed
        # them to its domain: the template, and what an admission added (Kueue's flavor labels,
        # its TAS hosts), which a restart keeps
        planned = plan_expressions(placement, rules.levels) or []
        template = (
            job.job.spec.template.spec.get("affinity")
            if isinstance(job.job, TensorParallelJob)
            else None
        )
        widened = widen_affinity(worker.scheduling.get("affinity"), planned, template)
        fresh = replace(
            worker,
            scheduling={k: v for k, v in worker.scheduling.items() if k != "affinity"}
            | ({"affinity": widened} if widened else {}),
        )
        return gang_request(
            job.key,
            job.job,
            fresh,
            eligible.of(store, job, fresh),
            refused_nodes(store, placement, fresh, now),
            previous=placement.last_nodes,
        )

    if memory.degraded_nodes[0] != store.topology_generation:
        memory.degraded_nodes = (store.topology_generation, degraded_nodes_of(store))
    found = []
    live = set()
    for mover in movers(store, memory.degraded_nodes[1], request_of):
        live.add(mover.job.uid)
        checked = memory.room_checked.get(mover.job.uid)
        if (
            mover.degraded
            and checked is not None
            and checked[1] == mover.degraded
            and now - checked[0] < RECHECK_SECONDS
        ):
            continue
        found.append(mover)
    for uid in [u for u in memory.room_checked if u not in live]:
        del memory.room_checked[uid]
    return found


def decide(
    mover: Mover, cycle: Cycle | None, waiting: int, rules: Rules, memory: PlacerMemory
) -> PlacementIntent | None:
    """Return the write of whether ``mover`` has healthy room elsewhere now (cleared once it
    has no degraded node), when the answer changed (None: nothing to write).

    ``waiting``: how many gangs of the cycle wait for capacity. The first look for a set of
    degraded nodes offers any healthy room; a later look (the first found none) offers room only
    while none waits: what frees is the queue's first (moving into room as it frees, ahead of
    the queue, made every job's mean completion time worse in the lossy huge-jobs benchmark).
    """
    previous = mover.placement.healthy_room
    again = previous is not None and previous.degraded_nodes == sorted(mover.degraded)
    if again and previous is not None and previous.found:
        return None  # found: the operator restarts the job into it
    room: HealthyRoom | None = None
    if mover.degraded:
        if mover.request is None or cycle is None:
            return None
        room = _room_now(
            mover, mover.request, cycle, rules, memory, queue_first=again and waiting > 0
        )
        if room is None or (again and not room.found):
            return None  # nothing to say, or the same answer: its words and time stay
    elif previous is None:
        return None
    placement = with_healthy_room(mover.placement, room)
    words = f"job {mover.job.key}: {room.message}" if room is not None else ""
    return PlacementIntent(mover.job, mover.placement, placement, log=words)


def _room_now(
    mover: Mover,
    request: GangRequest,
    cycle: Cycle,
    rules: Rules,
    memory: PlacerMemory,
    *,
    queue_first: bool,
) -> HealthyRoom | None:
    """Return the answer for ``mover`` now (None: none to give: its request is invalid, or
    there is room but ``queue_first`` keeps it for the waiting gangs)."""
    now = rules.clock()
    memory.room_checked[mover.job.uid] = (now, mover.degraded)
    snapshot = without_pods(cycle.snapshot, mover.pods)
    try:
        result = plan_on(snapshot, off_degraded(request), cycle, rules.cost)
    except InputError as err:
        log.warning("job %s: healthy room not looked for: %s", mover.job.key, err)
        return None
    if queue_first and isinstance(result, GangPlan):
        return None
    gain = None
    if isinstance(result, GangPlan):
        gain = gain_of(cycle.snapshot.topology, mover, result, rules.cost)
    return answer(result, mover.degraded, now, gain)
