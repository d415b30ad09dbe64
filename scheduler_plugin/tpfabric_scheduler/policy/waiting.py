"""Gangs stay whole, and quiet while they wait: a gang that fits nowhere stays gated and says why.

``status.placement`` says, per candidate domain, what is missing (the best
:data:`~tpfabric_core.api.placement.MAX_REASONS` and a count of the rest); each gated worker gets
one ``GangWaiting`` Event in the same words, so ``kubectl describe pod`` says why it waits and
names its job. A waiting job's status changes only when its meaning does (no countdown in the
message), and at most every :data:`WAITING_REWRITE_SECONDS`: in a busy cluster its best domain's
count changes with every pod. It is planned again only when something it depends on changed
(:func:`still_waiting`): capacity freed where it could let the gang fit (:mod:`.requeue`: a pod
binding or a new plan never lets a waiting gang fit), its own pods, the level its wait opens
next, its head-of-line standing, a hold. Pure: writes nothing; it returns the wait to write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tpfabric_core.api.gang import GANG_KIND
from tpfabric_core.api.placement import meaning_changed, waiting, waiting_message
from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.results import Unschedulable
from tpfabric_scheduler.facts import members_of
from tpfabric_scheduler.intent import PlacementIntent
from tpfabric_scheduler.policy.holds import (
    blocked_by_holds,
    head_of_line,
    hold_for_head_of_line,
)
from tpfabric_scheduler.policy.requeue import Freed
from tpfabric_scheduler.work import Attempt, Cycle, PlacementWork, PlacerMemory, Rules

__all__ = ["WAITING_REWRITE_SECONDS", "announce", "still_waiting", "wait"]

#: a waiting job's status is rewritten at most this often (a first wait is written at once)
WAITING_REWRITE_SECONDS = 30.0


def still_waiting(
    item: PlacementWork, now: float, freed: Freed, memory: PlacerMemory, rules: Rules
) -> bool:
    """Return whether ``item`` waited at its last attempt and nothing it depends on changed.

    Capacity freed where it could let the gang fit (``freed``, :mod:`.requeue`: a bound pod
    finished or went, a node changed, a plan's reservations went; a pod binding or a new plan
    never lets it fit), its own pods, the level its wait opens next (``relax_at``), its
    head-of-line standing and the holds it met are what a plan attempt depends on.
    """
    attempt = memory.attempts.get(item.job.uid)
    previous = item.placement
    if attempt is None or not previous.waiting:
        return False
    waiting_since = previous.waiting_since_time or now
    hol = max(0.0, now - waiting_since) >= rules.head_of_line_seconds
    return (
        attempt.members == members_of(item)
        and (attempt.relax_at is None or now < attempt.relax_at)
        and attempt.hol == hol
        and not attempt.holds
        and not freed.could_help(attempt, item)
    )


def wait(
    item: PlacementWork,
    cycle: Cycle,
    result: Unschedulable,
    request: GangRequest,
    *,
    waited: float,
    waiting_since: float,
    freed: Freed,
    rules: Rules,
    memory: PlacerMemory,
) -> PlacementIntent:
    """Return why the gang waits, to write when due (see the module), and remember the attempt
    (:func:`still_waiting`); a head-of-line gang holds its best domain meanwhile."""
    job = item.job
    previous = item.placement
    near = item.near
    hol = head_of_line(job, waited, rules)
    message = waiting_message(result)
    if near is not None:
        message = near.waiting_words(message)
    blocked = blocked_by_holds(cycle, request, waited, rules)
    if blocked:
        message += f"; blocked: {blocked}"
    held = len(cycle.held_for_hol)
    if hol:
        message += hold_for_head_of_line(cycle, result, job, waiting_since, rules)
    placement = waiting(result, waiting_since, message)
    relax = result.relax_after_seconds
    memory.attempts[job.uid] = Attempt(
        freed.generation,
        waiting_since + relax if relax is not None else None,
        hol,
        holds=len(cycle.held_for_hol) > held or held > 0,
        members=members_of(item),
        depth=_depth(cycle, result.level),
        workers=request.workers,
        gpus_per_worker=request.gpus_per_worker,
    )
    first = not previous.waiting
    last = memory.waiting_written.get(job.uid, 0.0)
    due = first or rules.clock() - last >= WAITING_REWRITE_SECONDS
    if not (due and meaning_changed(previous, placement)):
        return PlacementIntent(job, previous, placed=False, outcome="waiting")

    def written() -> None:
        memory.waiting_written[job.uid] = rules.clock()

    return announce(
        item,
        placement,
        "WaitingForCapacity" if first else "",
        message,
        memory,
        on_written=written,
        log=f"job {job.key} waits: {result.summary}",
        outcome="waiting",
    )


def _depth(cycle: Cycle, level: str) -> int | None:
    """Return the depth of ``level`` in the cycle's topology (None: not one of its levels)."""
    try:
        return cycle.snapshot.topology.depth_of(level)
    except ValueError:
        return None


def announce(
    item: PlacementWork,
    placement: Mapping[str, Any],
    event: str,
    message: str,
    memory: PlacerMemory,
    *,
    on_written: Callable[[], None] | None = None,
    log: str = "",
    outcome: str = "",
) -> PlacementIntent:
    """Return the write of a wait, with one ``GangWaiting`` Event on each gated worker not told
    yet, in the words of the job's ``status.placement`` (once per pod: a waiting gang's message
    changes with every count, and the job's status keeps the current words)."""
    uid = item.job.uid
    fresh = tuple(p for p in item.gated if p.uid not in memory.told.get(uid, set()))
    kind, short = ("Gang", "gang") if item.job.kind == GANG_KIND else ("TensorParallelJob", "tpj")
    words = (
        f"waits with its gang, {kind} {item.job.name} (kubectl describe {short} "
        f"{item.job.name}): {message}"
    )

    def remember() -> None:
        if on_written is not None:
            on_written()
        memory.told.setdefault(uid, set()).update(p.uid for p in fresh)

    return PlacementIntent(
        item.job,
        item.placement,
        placement,
        event=event,
        remember=remember,
        log=log,
        tell=fresh,
        tell_words=words if fresh else "",
        placed=False,
        outcome=outcome,
    )
