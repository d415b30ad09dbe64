"""Restarts lose nothing: a Gang record made again while its gang runs gets its placement back.

A Gang record deleted (by hand) and made again while its pods ran has no placement, but its
whole gang runs: nothing is planned or moved for it; the placer writes where it runs as its
placement (``PlacementRecovered``), so the record shows its domain and hops again. Pure: reads a
view of the store and the cycle's snapshot, returns the placement to write.
"""

from __future__ import annotations

from tpfabric_core.api.gang import GANG_KIND
from tpfabric_core.api.placement import planned
from tpfabric_core.errors import InputError
from tpfabric_core.placement.planner import describe_nodes
from tpfabric_core.placement.snapshot import CapacitySnapshot
from tpfabric_scheduler.gang_request import gang_request
from tpfabric_scheduler.intent import PlacementIntent
from tpfabric_scheduler.store import ClusterStore, JobRecord, PodRecord
from tpfabric_scheduler.work import Rules

__all__ = ["recover", "running_without_plan"]


def running_without_plan(store: ClusterStore) -> list[tuple[JobRecord, list[PodRecord]]]:
    """Return Gang records without a placement whose whole gang runs, each with its pods by
    rank (read from ``store``, a view)."""
    found = []
    for key, job in store.jobs.items():
        if job.kind != GANG_KIND or job.job is None or store.placement_of(job).present:
            continue
        if not store.gangs_allowed_in(job.namespace):
            continue
        live = [p for p in store.workers.get(key, {}).values() if not p.terminal and not p.deleting]
        ranks = sorted(p.worker_index for p in live if p.worker_index is not None)
        if ranks != list(range(job.job.spec.workers)):
            continue
        if all(p.node is not None and not p.gated for p in live):
            found.append((job, sorted(live, key=lambda p: p.worker_index or 0)))
    return found


def recover(
    job: JobRecord, members: list[PodRecord], snapshot: CapacitySnapshot, rules: Rules
) -> PlacementIntent:
    """Return the write of where a gang without a plan runs, as its placement (see
    :func:`running_without_plan`)."""
    assert job.job is not None
    nodes = [str(p.node) for p in members]
    try:
        request = gang_request(job.key, job.job, members[0], None)
        plan = describe_nodes(
            snapshot,
            request,
            nodes,
            f"read back from the {len(nodes)} running pods: the record was made again while "
            "its gang ran (nothing was planned or moved)",
            cost_config=rules.cost,
        )
    except (InputError, ValueError) as err:
        words = f"job {job.key}: its running pods cannot be described: {err}"
        return PlacementIntent(job, log=words, level="warning")
    return PlacementIntent(
        job,
        placement=planned(plan, rules.clock()),
        event="PlacementRecovered",
        log=f"job {job.key}: placement read back from its running pods: {plan.domain}",
    )
