"""A persisted plan is checked again before its gated pods are released.

A planned job with gated pods is the rest of its attempt (workers the operator creates after
the plan), a restart mid-release, a resume, or a replacement worker (a pod of a later attempt):
each gated pod is released onto its rank's node while that node still holds the rank's
reservation. A replacement, or a rank whose node no longer holds it, moves to another node of
the domain (:mod:`.mend`); a Gang record's pod made again (of a later attempt than the plan's,
or any pod of a plan made without one) returns to its planned node (:mod:`.returning`). A
plan that can no longer be honoured is dropped when part of the gang runs or is on its way,
and planned afresh when nothing of it runs (:mod:`.plan`). Pure: writes nothing, returns the
releases (and the moved plan) to apply.
"""

from __future__ import annotations

from dataclasses import replace

from tpfabric_core.api.gang import GANG_KIND
from tpfabric_core.timestamps import parse_rfc3339
from tpfabric_scheduler.facts import first_wait, fits_reserved, in_flight, running
from tpfabric_scheduler.intent import PlacementIntent
from tpfabric_scheduler.policy import plan
from tpfabric_scheduler.policy.mend import replace_ranks
from tpfabric_scheduler.policy.requeue import PLAN_AGAIN
from tpfabric_scheduler.policy.returning import made_again
from tpfabric_scheduler.store import PodRecord
from tpfabric_scheduler.work import Cycle, PlacementWork, PlacerMemory, Rules, plan_nodes

__all__ = ["decide"]


def decide(
    item: PlacementWork, cycle: Cycle, rules: Rules, memory: PlacerMemory
) -> PlacementIntent:
    """Return the release of ``item``'s gated pods after checking its plan still holds (with
    the moves of the ranks that need a new node), or the drop or the fresh plan of the gang."""
    job = item.job
    placement = item.placement
    nodes = plan_nodes(item)
    planned_at = placement.planned_at_time
    replaced = dict(placement.replaced_ranks)
    plan_attempt = placement.attempt
    bound = running(item.members, cycle.snapshot.topology)
    moves: list[PodRecord] = []
    held: list[PodRecord] = []  # a Gang's pods whose planned node an old pod still leaves
    again = False
    for pod in item.gated:
        rank = pod.worker_index
        if rank is None or rank >= len(nodes):
            continue
        if job.kind == GANG_KIND and made_by_owner_again(pod, plan_attempt):
            again = True
            way = made_again(item, cycle, nodes[rank], memory)
            if way != "release":
                (held if way == "wait" else moves).append(pod)
            continue
        if plan_attempt is not None and pod.attempt is not None:
            # planned from the gang's first worker: the rest of its attempt is released onto
            # the plan as the operator creates it; a later attempt's pod is a replacement
            later = pod.attempt > plan_attempt
        else:  # a plan persisted without its attempt: made once the whole gang existed
            created = parse_rfc3339(pod.created)
            later = planned_at is not None and created is not None and created > planned_at
        replacement = later and replaced.get(str(rank)) != pod.uid
        if replacement or not fits_reserved(cycle.snapshot, nodes[rank]):
            moves.append(pod)
    intent = PlacementIntent(job, placement)
    if moves:
        mend = replace_ranks(item, cycle, moves, nodes, replaced, rules=rules, memory=memory)
        if mend.placement is None and (bound or in_flight(item.members)):
            # dropped: the owner makes the gang again gated (a pod released and not bound yet
            # binds where the dropped plan sent it: a fresh plan would split the gang)
            assert mend.intent is not None
            return mend.intent
        if mend.placement is None:
            # nothing of the gang runs yet and its domain has no room: plan it whole again (the
            # same work, its refused nodes and its near target kept, with no plan)
            fresh = placement.with_waiting_since(first_wait(item) or cycle.now)
            afresh = replace(item, placement=fresh, reservations=[])
            return plan.decide(afresh, cycle, rules, memory, PLAN_AGAIN)
        assert mend.intent is not None
        intent = mend.intent
    if again and not held:
        memory.leaving_since.pop(job.uid, None)
    return replace(intent, release=tuple(p for p in item.gated if p not in held))


def made_by_owner_again(pod: PodRecord, plan_attempt: int | None) -> bool:
    """Return whether a gated pod of a planned Gang record is one its owner made again (it
    returns to its planned node, :mod:`.returning`), not one of the attempt the plan was made
    for: the plan has no attempt (made once the whole gang existed), or the gang webhook
    numbered the pod with a later one (a replacement, :mod:`tpfabric_core.gang_attempts`)."""
    if plan_attempt is None or pod.attempt is None:
        return True
    return pod.attempt > plan_attempt
