"""Order: a gang that has waited long holds the best domain it would take.

Gangs are planned by pod priority, then arrival (:mod:`tpfabric_scheduler.queue`). A gang that
has waited longer than ``--head-of-line-seconds`` (default :data:`HEAD_OF_LINE_SECONDS`) holds,
for the rest of the cycle, the best domain it could take once running work ends: younger or
lower-priority gangs are not planned into it, so a stream of small gangs cannot starve a big
one, and a gang kept out is told which job holds the domain and since when. A gang that can
never fit as asked holds nothing and says so; a rolling update's surge group (extra, passing
capacity) never holds. The nodes of gangs returning where they ran (:mod:`.returning`) are kept
from younger gangs the same way. Pure: works on the cycle's state, writes nothing.
"""

from __future__ import annotations

from tpfabric_core.api.placement import surge
from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.results import Unschedulable
from tpfabric_core.placement.snapshot import CapacitySnapshot
from tpfabric_scheduler.plan_inputs import plan_on
from tpfabric_scheduler.store import JobRecord
from tpfabric_scheduler.work import Cycle, Hold, PlacementWork, Rules

__all__ = [
    "HEAD_OF_LINE_SECONDS",
    "blocked_by_holds",
    "head_of_line",
    "hold_for_head_of_line",
    "without_held",
]

HEAD_OF_LINE_SECONDS = 300.0


def head_of_line(job: JobRecord, waited: float, rules: Rules) -> bool:
    """Return whether a gang that waited ``waited`` seconds is at the head of the line (a
    surge group of a rolling update is extra, passing capacity: it never holds a domain
    against the gangs behind it)."""
    return waited >= rules.head_of_line_seconds and not surge(job.raw_status)


def without_held(cycle: Cycle, item: PlacementWork) -> CapacitySnapshot:
    """Return the cycle's snapshot, or a copy without the nodes held for older gangs: by
    head-of-line holds, and for older gangs returning to the nodes they ran on."""
    own = (item.job.created, item.job.key)
    returning = [i for i, gang in cycle.returning.items() if gang < own]
    if not cycle.held_for_hol and not returning:
        return cycle.snapshot
    trimmed = cycle.snapshot.copy()
    for i in (*cycle.held_for_hol, *returning):
        trimmed.free_gpus[i] = 0
    return trimmed


def blocked_by_holds(cycle: Cycle, request: GangRequest, waited: float, rules: Rules) -> str:
    """Return which head-of-line holds keep a gang that waits from the plan it would get
    without them ("" when no hold is in its way). Costs one more plan, only while a hold
    exists."""
    if not cycle.held_for_hol:
        return ""
    unheld = plan_on(cycle.snapshot, request, cycle, rules.cost, waited)
    if isinstance(unheld, Unschedulable):
        return ""
    index_of = cycle.snapshot.topology.index_of
    holds = dict.fromkeys(
        hold
        for node in unheld.nodes
        if (hold := cycle.held_for_hol.get(index_of.get(node, -1))) is not None
    )
    return "; ".join(str(h) for h in holds)


def hold_for_head_of_line(
    cycle: Cycle, result: Unschedulable, job: JobRecord, since: float, rules: Rules
) -> str:
    """Hold, for the rest of the cycle, the best candidate domain a head-of-line gang could
    hold once running work ends; return what the gang's message says of it.

    A gang that can never fit as asked (more workers than the cluster, a required level none of
    whose domains is big enough, a selector that allows too few nodes) holds nothing, and
    neither does one whose candidates could never hold it at this level (its policy opens the
    next one after its wait): a hold only helps a gang that waiting can start.
    """
    waited = f"; head of line (waited over {rules.head_of_line_seconds:g} s)"
    best = next((c for c in result.candidates if c.could_ever_fit), None)
    if result.never or best is None:
        return f"{waited}: it holds no domain, none it may use could ever hold it"
    topology = cycle.snapshot.topology
    try:
        depth = topology.depth_of(best.level)
    except ValueError:
        return ""
    for domain in topology.domains[depth]:
        if domain.path == best.path and domain.name == best.domain:
            hold = Hold(job.key, best.level, best.domain, since)
            for i in range(domain.start, domain.end):
                cycle.held_for_hol.setdefault(i, hold)
            break
    return (
        f"{waited}: holds {best.level} {best.domain!r}, younger or lower-priority gangs "
        "may not take it"
    )
