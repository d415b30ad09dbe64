"""Re-plan, never half-bound: a plan that can no longer be honoured is dropped whole.

Dropping writes ``state: Replanning`` (so the operator charges no restart for the pods that go)
and then deletes the job's pods; the owner makes them again gated and the whole gang is planned
afresh. A gang whose plan never ran whole keeps its first wait (``waitingSince``), so a gang
whose nodes keep being taken still climbs to the head of the line. A placer stopped between the
write and the deletes, or released pods left by an earlier record of the same gang, leave pods
nobody deletes: :func:`unfinished` finds them and :func:`finish` deletes them again, at most
every :data:`REPLAN_DELETE_RETRY_SECONDS`. A suspended job has no pods; its plan is dropped and
resuming plans it afresh. Pure: decides from a view of the store, writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable

from tpfabric_core.api.gang import GANG_KIND
from tpfabric_core.api.models import RefusedNode
from tpfabric_core.api.placement import StoredPlacement, replanning
from tpfabric_scheduler.facts import first_wait
from tpfabric_scheduler.intent import PlacementIntent
from tpfabric_scheduler.policy.refusals import recorded
from tpfabric_scheduler.store import ClusterStore, JobRecord, PodRecord
from tpfabric_scheduler.work import PlacementWork, PlacerMemory

__all__ = [
    "REPLAN_DELETE_RETRY_SECONDS",
    "drop_suspended",
    "drop_whole",
    "finish",
    "suspended",
    "unfinished",
]

#: the pods of a dropped plan are deleted again at most this often while they remain
REPLAN_DELETE_RETRY_SECONDS = 10.0


def drop_whole(
    item: PlacementWork,
    why: str,
    now: float,
    memory: PlacerMemory,
    *,
    reason: str,
    keep_wait: bool = False,
    refused: list[RefusedNode] | None = None,
) -> PlacementIntent:
    """Return the drop of ``item``'s plan: ``Replanning`` (a ``GangReplanning`` Event in
    ``why``), then the job's pods deleted; ``reason``: the one word the metrics count it by
    (``bind_timeout``, ``node_taken``, ``workers_missing``, ``workers_refused``, ``node_gone``,
    ``no_room``).

    ``keep_wait``: the plan never ran whole (its workers did not bind, its nodes were taken or
    left): the gang keeps waiting since it first waited (:func:`~tpfabric_scheduler.facts.
    first_wait`). ``refused``: nodes kube-scheduler's own filters refused, recorded with the
    others so that the next plan leaves them out.
    """
    since = first_wait(item) if keep_wait else None
    placement = replanning(why, now, since, recorded(item.placement, refused or [], now))
    uid = item.job.uid

    def remember() -> None:
        memory.replan_deleted[uid] = now

    return PlacementIntent(
        item.job,
        item.placement,
        placement,
        event="GangReplanning",
        delete_pods=True,
        log=why,
        level="warning",
        remember=remember,
        placed=False,
        dropped=reason,
    )


def unfinished(
    store: ClusterStore, now: float, memory: PlacerMemory, released: Container[str]
) -> list[JobRecord]:
    """Return jobs whose plan was dropped (``Replanning``) while pods of that plan remain, and
    Gang records without a plan whose released pods never bound (:func:`_orphans`; ``released``:
    the pods this placer released, by uid).

    Pods the owner makes again are gated until a new plan, so a live released pod under
    ``Replanning`` is left from the dropped plan. A deletion is asked again after
    REPLAN_DELETE_RETRY_SECONDS at the earliest (the store shows a deleted pod only once the
    watch does). Read from ``store`` (a view, or the store with its lock held).
    """
    left = []
    replanning_now = set()
    for key, job in store.jobs.items():
        pods = store.workers.get(key, {}).values()
        placement = store.placement_of(job)
        if not placement.replanning and not (
            job.kind == GANG_KIND and not placement.planned and _orphans(pods, released)
        ):
            continue
        replanning_now.add(job.uid)
        if now - memory.replan_deleted.get(job.uid, -math.inf) < REPLAN_DELETE_RETRY_SECONDS:
            continue
        if any(not p.gated and not p.terminal and not p.deleting for p in pods):
            left.append(job)
    for uid in [u for u in memory.replan_deleted if u not in replanning_now]:
        del memory.replan_deleted[uid]  # planned again, or gone
    return left


def _orphans(pods: Iterable[PodRecord], released: Container[str]) -> bool:
    """Return whether a gang without a plan has pods released under an earlier record of the
    same name (a Gang deleted and made again while its owner made its pods again): pods this
    placer did not release that never bound, or that are bound while others of the gang still
    wait gated. The extender refuses the unbound (no plan), nothing releases a pod twice, and a
    gang part running, part gated under no plan would wait for ever; its pods are deleted, and
    its owner makes them again gated. (A gang whose pods all run is not one: its placement is
    read back instead, :mod:`.recovered`.)"""
    live = [p for p in pods if not p.terminal and not p.deleting]
    waiting = any(p.gated for p in live)
    return any(not p.gated and (p.node is None or waiting) and p.uid not in released for p in live)


def finish(job: JobRecord, now: float, memory: PlacerMemory) -> PlacementIntent:
    """Return the deletion of the pods a dropped plan left (see :func:`unfinished`)."""
    memory.replan_deleted[job.uid] = now
    return PlacementIntent(
        job,
        delete_pods=True,
        log=(
            f"job {job.key}: released pods remained without a plan that holds them (a dropped "
            "plan, or an earlier record of the gang); deleted them so the gang is made again "
            "and planned afresh"
        ),
        level="warning",
        placed=False,
    )


def suspended(store: ClusterStore) -> list[tuple[JobRecord, StoredPlacement]]:
    """Return suspended jobs that still carry a placement (to be dropped), each with it."""
    return [
        (job, placement)
        for job in store.jobs.values()
        if job.job is not None
        and job.job.spec.suspend
        and (placement := store.placement_of(job)).present
    ]


def drop_suspended(job: JobRecord, placement: StoredPlacement) -> PlacementIntent:
    """Return the drop of a suspended job's ``placement``: it has no pods, and resuming plans
    the gang afresh."""
    return PlacementIntent(job, placement, drop=True, placed=False)
