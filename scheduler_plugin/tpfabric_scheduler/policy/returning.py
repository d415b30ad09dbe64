"""A gang made again returns where it ran.

A group its owner makes again (an LWS rollout replaces a group in place, a job restarted) while
its old pods still terminate on its previous nodes would find its domain full of itself and go
elsewhere. So, for :data:`RETURN_GRACE_SECONDS` at most:

- a gang without a plan waits for its own old pods to leave its previous nodes
  (:func:`old_pods_leaving`), and younger gangs (a rollout's surge group) may not take the nodes
  of a plan dropped lately (:func:`returning_nodes`, held by :mod:`.holds`);
- a gated pod of a planned Gang record returns to its planned node while that node holds its
  reservation, waiting while an old pod of the gang still leaves it (:func:`made_again`).

Past the grace (a pod stuck terminating) the gang is planned with what is free. Pure: reads a
view of the store and the cycle's snapshot, writes nothing.
"""

from __future__ import annotations

import logging
import math
from typing import Literal

from tpfabric_core.placement.topology import ClusterTopology
from tpfabric_scheduler.facts import fits_reserved
from tpfabric_scheduler.store import ClusterStore
from tpfabric_scheduler.work import Cycle, PlacementWork, PlacerMemory, gang_request_of

__all__ = ["RETURN_GRACE_SECONDS", "made_again", "old_pods_leaving", "returning_nodes"]

log = logging.getLogger("tpfabric.scheduler.placer")

#: a gang made again waits this long at most for its own old pods to leave its previous nodes
RETURN_GRACE_SECONDS = 60.0


def returning_nodes(
    store: ClusterStore, topology: ClusterTopology, now: float
) -> dict[int, tuple[str, str]]:
    """Return the previous nodes of the gangs returning to them: a plan dropped less than
    RETURN_GRACE_SECONDS ago (``waitingSince``) whose gang has no plan yet, as a group its owner
    replaces in place (an LWS rollout) is while its old pods go and its new ones come. Younger
    gangs (a rollout's surge group) may not take them meanwhile, so the group returns where it
    ran instead of finding its domain taken."""
    held: dict[int, tuple[str, str]] = {}
    for job in store.jobs.values():
        placement = store.placement_of(job)
        if not (placement.replanning or placement.waiting):
            continue
        since = placement.waiting_since_time
        nodes = placement.previous_nodes
        if since is None or not nodes or now - since >= RETURN_GRACE_SECONDS:
            continue
        for node in nodes:
            index = topology.index_of.get(node)
            if index is not None:
                held.setdefault(index, (job.created, job.key))
    return held


def old_pods_leaving(item: PlacementWork, now: float, memory: PlacerMemory) -> bool:
    """Return whether the gang waits for its own old pods to leave the nodes it ran on (up to
    RETURN_GRACE_SECONDS; the clock starts when the placer first sees them leaving)."""
    uid = item.job.uid
    previous = set(item.placement.last_nodes)
    leaving = [
        p.name
        for p in item.members
        if p.deleting and not p.terminal and p.node is not None and p.node in previous
    ]
    if not leaving:
        memory.leaving_since.pop(uid, None)
        return False
    since = memory.leaving_since.setdefault(uid, now)
    if now - since >= RETURN_GRACE_SECONDS:
        if since != -math.inf:
            log.info(
                "job %s: %d old pod(s) still on its previous nodes after %.0f s: planned "
                "with what is free",
                item.job.key,
                len(leaving),
                now - since,
            )
            memory.leaving_since[uid] = -math.inf  # said once
        return False
    if since == now:
        log.info(
            "job %s: waits for %d old pod(s) to leave its previous nodes (%s) before it is "
            "planned again there",
            item.job.key,
            len(leaving),
            ", ".join(sorted(leaving)[:4]),
        )
    return True


def made_again(
    item: PlacementWork, cycle: Cycle, node: str, memory: PlacerMemory
) -> Literal["release", "wait", "move"]:
    """Return what becomes of a gated pod of a planned Gang record (pods another controller
    makes, no attempt label) planned on ``node``.

    Such a pod is made again for a rollout (LWS replaces a group in place), an eviction or a
    move off a degraded node, seldom because its node failed. It returns to its planned node
    while that node holds its reservation and is not degraded (unless the gang ignores degraded
    nodes); while an old pod of the gang still leaves that node it waits, RETURN_GRACE_SECONDS
    at most; otherwise it moves (:mod:`.mend`, else the whole gang is planned again). Its
    creationTimestamp decides nothing: whole seconds cannot tell a pod made again in the second
    of its plan from a pod of the plan.
    """
    snapshot = cycle.snapshot
    i = snapshot.topology.index_of.get(node)
    if i is None:
        return "move"
    if snapshot.degraded[i] and gang_request_of(item).policy.avoid_degraded != "ignore":
        return "move"
    if any(p.deleting and not p.terminal and p.node == node for p in item.members):
        since = memory.leaving_since.setdefault(item.job.uid, cycle.now)
        return "wait" if cycle.now - since < RETURN_GRACE_SECONDS else "move"
    return "release" if fits_reserved(snapshot, node) else "move"
