"""Apply a policy's placement intent through the write pipeline: the cycle's only writer.

The order is fixed (:mod:`tpfabric_scheduler.intent`): the placement (or its drop) and its
Event, the policy's memories, the deletion of the job's pods, the log line, the waiting pods'
Events, and the releases behind the cycle's plan writes. A fresh plan is written by the cycle's
pool and its pods released only once that write succeeded; everything else is written in the
cycle, so an error stops what comes after it and reaches the cycle, which logs it and goes on
with the next gang. Decides nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tpfabric_scheduler.intent import PlacementIntent
from tpfabric_scheduler.store import PodRecord
from tpfabric_scheduler.writes import WritePipeline

__all__ = ["apply_intent"]

log = logging.getLogger("tpfabric.scheduler.placer")


def apply_intent(
    intent: PlacementIntent,
    writes: WritePipeline,
    pods_of: Callable[[str], list[PodRecord]],
) -> None:
    """Carry out ``intent`` (``pods_of``: a job's pods, by job key, as the store holds them)."""
    job = intent.job
    if intent.fresh_plan:
        _apply_fresh_plan(intent, writes)
        return
    if intent.drop:
        writes.drop(job, intent.previous)
    if intent.placement is not None:
        writes.write(job, intent.previous, intent.placement, intent.event)
    if intent.dropped:
        writes.metrics.plans_dropped.labels(intent.dropped).inc()
    if intent.remember is not None:
        intent.remember()
    if intent.delete_pods:
        # the gang's deletes go out together (a 32-worker gang must not take 32 round trips in
        # a row to drop), each by uid
        writes.delete_pods(pods_of(job.key))
    _log(intent)
    if intent.tell:
        writes.tell(job, intent.tell, intent.tell_words)
    if intent.release:
        onto, pods = intent.onto, list(intent.release)
        writes.then_release(job, None, lambda: writes.release(job, onto, pods))
    if intent.then is not None:
        apply_intent(intent.then, writes, pods_of)


def _apply_fresh_plan(intent: PlacementIntent, writes: WritePipeline) -> None:
    """Persist a fresh plan on the cycle's pool; release its gang once that write succeeded."""
    job, onto, pods = intent.job, intent.onto, list(intent.release)
    assert intent.placement is not None
    placement = intent.placement

    def persist() -> None:
        writes.write(job, intent.previous, placement, intent.event)
        if intent.remember is not None:
            intent.remember()
        _log(intent)

    def release() -> None:
        try:
            writes.release(job, onto, pods)
        finally:
            # the Event last: it is for people, and no worker of the gang waits for it
            if intent.released_event:
                writes.event(job, intent.released_event, onto)

    writes.then_release(job, writes.persist(job, persist), release)


def _log(intent: PlacementIntent) -> None:
    if intent.log:
        log.log(logging.WARNING if intent.level == "warning" else logging.INFO, "%s", intent.log)
