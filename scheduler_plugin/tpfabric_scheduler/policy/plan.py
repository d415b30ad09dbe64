"""Smallest domain that fits, for the whole gang at once: a gated gang's plan.

As soon as a gang's first worker exists (once every worker exists for a gang whose creation was
refused or whose pods carry no attempt label, :mod:`tpfabric_scheduler.queue`), the engine plans
every rank from the job's spec and that worker's constraints on the cycle's snapshot, without
the domains held for older gangs (:mod:`.holds`, :mod:`.returning`) and inside its partner's
domains when it asks to be near one (:mod:`.near`). The plan's demands are taken off the
snapshot, so later gangs of the cycle see them; it is persisted in ``status.placement`` with the
attempt of its pods and its pods are released onto it (the intent's ``fresh_plan``). A gang
that fits nowhere waits (:mod:`.waiting`); a spec the placer can never plan as written is
``Invalid``. Pure: writes nothing, returns the plan to write.
"""

from __future__ import annotations

import time
from dataclasses import replace

from tpfabric_core.api.placement import invalid, planned
from tpfabric_core.errors import InputError
from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.results import GangPlan, Unschedulable
from tpfabric_scheduler.intent import PlacementIntent
from tpfabric_scheduler.plan_inputs import plan_on
from tpfabric_scheduler.policy.holds import without_held
from tpfabric_scheduler.policy.near import domain_at, plan_near, wait_for_partner
from tpfabric_scheduler.policy.requeue import Freed
from tpfabric_scheduler.policy.returning import old_pods_leaving
from tpfabric_scheduler.policy.waiting import still_waiting, wait
from tpfabric_scheduler.work import Cycle, PlacementWork, PlacerMemory, Rules, gang_request_of

__all__ = ["decide"]


def decide(
    item: PlacementWork, cycle: Cycle, rules: Rules, memory: PlacerMemory, freed: Freed
) -> PlacementIntent:
    """Return the plan of ``item``'s whole gang (``placed``), or why it waits.

    ``freed``: the capacity freed up to the cycle's start, read against the cycle's snapshot
    (:data:`~.requeue.PLAN_AGAIN`: plan it whatever its last attempt saw).
    """
    job = item.job
    previous = item.placement
    waiting_since = previous.waiting_since_time or cycle.now
    waited = max(0.0, cycle.now - waiting_since)
    if item.near is None and still_waiting(item, cycle.now, freed, memory, rules):
        # nothing it depends on changed since it last waited (a gang near another depends on
        # where that one runs too: planned again, cheaply, each cycle it is due)
        return PlacementIntent(job, previous, placed=False)
    if old_pods_leaving(item, cycle.now, memory):
        return PlacementIntent(job, previous, placed=False)
    near = item.near
    if near is not None and near.must_wait(waited):
        return wait_for_partner(item, near, waiting_since, memory)
    try:
        request = gang_request_of(item)
        started = time.perf_counter()
        result = _plan(cycle, item, request, waited, rules)
        seconds = time.perf_counter() - started
    except InputError as err:
        placement = invalid(f"{job.key}: {err}")
        return PlacementIntent(job, previous, placement, event="InvalidTopology", placed=False)
    if isinstance(result, Unschedulable):
        waits = wait(
            item,
            cycle,
            result,
            request,
            waited=waited,
            waiting_since=waiting_since,
            freed=freed,
            rules=rules,
            memory=memory,
        )
        return replace(waits, plan_seconds=seconds)
    memory.attempts.pop(job.uid, None)
    cycle.snapshot.allocate(result)
    attempts = [p.attempt for p in item.gated if p.attempt is not None]
    topology = cycle.snapshot.topology
    placement = planned(
        result,
        rules.clock(),
        max(attempts, default=None),
        waiting_since,
        near=near.placed_words(domain_at(result, near.level, topology)) if near else None,
    )
    return PlacementIntent(
        job,
        previous,
        placement,
        fresh_plan=True,
        release=tuple(item.gated),
        released_event="GangPlaced",
        log=f"job {job.key} planned: {result.explain().splitlines()[0]}",
        outcome="planned",
        plan_seconds=seconds,
    )


def _plan(
    cycle: Cycle, item: PlacementWork, request: GangRequest, waited: float, rules: Rules
) -> GangPlan | Unschedulable:
    """Return the engine's answer for the gang on the cycle's snapshot without the domains held
    for older gangs, near its partner when it asks to be; why it waits is worked out once per
    shape of gang and state of capacity (:mod:`tpfabric_scheduler.explanations`)."""
    shared = item.near is None and not cycle.held_for_hol and not cycle.returning
    explanations = cycle.explanations
    key = explanations.key(cycle.snapshot, request, waited) if shared else None
    known = explanations.known(key, request.name)
    if known is not None:
        return known  # a gang of the same shape waits on the same capacity: the same words
    snapshot = without_held(cycle, item)
    result = plan_near(
        lambda asked: plan_on(snapshot, asked, cycle, rules.cost, waited), request, item.near
    )
    if isinstance(result, Unschedulable):
        explanations.keep(key, result)
    return result
