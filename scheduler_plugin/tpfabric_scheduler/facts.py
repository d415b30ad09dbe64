"""What a placer cycle reads off a gang and its pods: plain predicates the policies share.

Each takes a work item, pods or a snapshot and returns a fact; none decides what to do with it
(that is the policies', :mod:`tpfabric_scheduler.policy`). Pure: no store, no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from tpfabric_core.api.placement import StoredPlacement, finished, status_attempt
from tpfabric_core.placement.snapshot import CapacitySnapshot
from tpfabric_core.placement.topology import ClusterTopology
from tpfabric_core.timestamps import parse_rfc3339
from tpfabric_scheduler.store import JobRecord, PodRecord
from tpfabric_scheduler.work import PlacementWork

__all__ = [
    "Members",
    "attempt_unknown",
    "first_wait",
    "fits_reserved",
    "gone_ranks",
    "in_flight",
    "members_of",
    "missing_ranks",
    "released_at",
    "running",
]

#: what of a gang's own pods a plan attempt depends on: (uid, gated, node) of each
Members = frozenset[tuple[str, bool, str | None]]


def fits_reserved(snapshot: CapacitySnapshot, node: str) -> bool:
    """Return whether ``node`` still holds a rank's reservation (nothing overcommitted)."""
    i = snapshot.topology.index_of.get(node)
    if i is None or not snapshot.ready[i] or not snapshot.schedulable[i]:
        return False
    if snapshot.free_gpus[i] < 0:
        return False
    return all(amounts[i] >= 0 for amounts in snapshot.free_other.values())


def released_at(item: PlacementWork) -> float | None:
    """Return when ``item``'s gang was (last) released, as clock time.

    A gang is planned once its first worker exists and the rest are released as the operator
    creates them, so the newest worker's creation counts as a release too.
    """
    released = item.placement.released_time
    if released is None:
        return None
    # creationTimestamps are RFC 3339 in UTC: the newest sorts last as text
    newest = parse_rfc3339(max((p.created for p in item.members), default=""))
    return released if newest is None else max(released, newest)


def missing_ranks(
    job: JobRecord, placement: StoredPlacement, members: Iterable[PodRecord]
) -> list[int]:
    """Return the ranks of a planned gang that have no worker pod of the plan's own attempt yet.

    Only while the job is still in the attempt the plan was made for (``status.attempt``): after
    an incident the operator replaces workers after a backoff and their ranks are missing on
    purpose. A finished job, or a plan persisted without its attempt, has none.
    """
    plan_attempt = placement.attempt
    if job.job is None or plan_attempt is None:
        return []
    status = job.raw_status
    if finished(status) or status_attempt(status) != plan_attempt:
        return []
    present = {p.worker_index for p in members}
    return [rank for rank in range(job.job.spec.workers) if rank not in present]


def first_wait(item: PlacementWork) -> float | None:
    """Return when ``item``'s gang first waited for its plan, while the gang is still in the
    attempt the plan was made for (None after a restart: a new attempt waits afresh)."""
    plan_attempt = item.placement.attempt
    if plan_attempt is not None and status_attempt(item.job.raw_status) != plan_attempt:
        return None
    if any(
        p.attempt is not None and plan_attempt is not None and p.attempt > plan_attempt
        for p in item.members
    ):
        return None
    return item.placement.waiting_since_time


def gone_ranks(nodes: Iterable[str], topology: ClusterTopology) -> set[int]:
    """Return the ranks a plan puts on nodes that are no longer in the cluster."""
    return {rank for rank, node in enumerate(nodes) if node not in topology.index_of}


def running(members: Iterable[PodRecord], topology: ClusterTopology) -> list[PodRecord]:
    """Return the members bound to a node of the cluster, not finished and not going (a pod
    bound to a deleted node runs nowhere: pod GC removes it; a pod being deleted is the gang's
    past, e.g. a group its owner makes again)."""
    return [
        p
        for p in members
        if p.node is not None and not p.terminal and not p.deleting and p.node in topology.index_of
    ]


def in_flight(members: Iterable[PodRecord]) -> list[PodRecord]:
    """Return the members released and not bound yet: kube-scheduler may bind them any moment
    onto the nodes the plan gave them, so a fresh plan for the rest of the gang would split it
    (an LWS rollout's leader released onto its old node, its worker then planned into a fresh
    domain under another spine)."""
    return [
        p for p in members if not p.gated and p.node is None and not p.terminal and not p.deleting
    ]


def attempt_unknown(pods: Iterable[PodRecord]) -> bool:
    """Return whether any of ``pods`` lacks the attempt label (``tpfabric.io/attempt``)."""
    return any(p.attempt is None for p in pods)


def members_of(item: PlacementWork) -> Members:
    """Return what of a gang's own pods a plan attempt depends on."""
    return item.member_states
