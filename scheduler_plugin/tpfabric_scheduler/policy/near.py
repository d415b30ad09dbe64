"""Placement near another gang (``tpfabric.io/near``): where a gang may go to be near its partner.

Disaggregated serving runs prefill and decode as separate LeaderWorkerSets that stream the KV
cache over RDMA: the decode groups should sit under the same spine (or leaf) as a prefill group.
A Gang whose spec says ``near: {target, level, mode}`` is planned inside the domains of ``level``
that hold a pod (or a planned node) of the target: a Gang record of that owner's name, a Gang
record of that name, a Gang of that DisaggregatedSet role (``disaggregatedset.x-k8s.io/role``:
LWS names a role's LeaderWorkerSet after the set, the role and the revision, so the role is the
name that lasts across the set's rollouts), or a TensorParallelJob of that name, in the same
namespace.

- ``required``: only there. While no target gang is placed the gang waits, unless the target
  also asks to be near it (two gangs that ask for each other: the older goes first, anywhere).
- ``preferred``: there when it fits, else where the topology request alone puts it. While a
  target gang exists but none is placed yet, the gang waits for it up to 30 s.

While a gang waits for its partner, its status and its pods say so (``WaitingForPartner``);
once planned, its ``status.placement.near`` says how the plan stands to the partner. Read from
one view of the store; nothing here writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tpfabric_core.api.gang import Gang
from tpfabric_core.api.placement import meaning_changed, partner_waiting
from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.results import GangPlan, Unschedulable
from tpfabric_core.placement.topology import ClusterTopology
from tpfabric_scheduler.intent import PlacementIntent
from tpfabric_scheduler.policy.waiting import announce
from tpfabric_scheduler.store import ClusterStore, JobRecord
from tpfabric_scheduler.work import PlacementWork, PlacerMemory

__all__ = [
    "PREFERRED_WAIT_SECONDS",
    "NearTarget",
    "domain_at",
    "near_target",
    "plan_near",
    "wait_for_partner",
]

#: how long a gang that prefers to be near another waits for that one (which exists) to be placed
PREFERRED_WAIT_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class NearTarget:
    """Where a gang that asks to be near another may go, as the store shows it now."""

    target: str
    level: str
    mode: str
    #: the nodes inside the target's domains at ``level`` (None: no target gang is placed)
    nodes: frozenset[str] | None
    #: the target's domains at ``level``, by name (for the reasons)
    domains: tuple[str, ...]
    #: the target gangs found (records' names), placed or not
    partners: tuple[str, ...]
    #: the target asks to be near this gang too, and this gang is the older of the two
    goes_first: bool = False

    def must_wait(self, waited: float) -> bool:
        """Return whether the gang waits for its partner, none of which is placed yet (unless
        the partner asks for this gang too and this one is the older): ``required``, always;
        ``preferred``, for ``PREFERRED_WAIT_SECONDS`` while a partner exists (two LWSs applied
        together: the partner is planned first, then this one beside it)."""
        if self.nodes is not None or self.goes_first:
            return False
        if self.mode == "required":
            return True
        return bool(self.partners) and waited < PREFERRED_WAIT_SECONDS

    def waiting_words(self, message: str) -> str:
        """Return a waiting gang's message, saying where ``required`` lets it go."""
        if self.mode != "required" or self.nodes is None:
            return message
        where = ", ".join(repr(d) for d in self.domains)
        return (
            f"near {self.target!r} (required): only in its {self.level} domain(s) {where}; "
            f"{message}"
        )

    def placed_words(self, placed_domain: str | None) -> str:
        """Return the plan's reason about its partner, e.g. ``near 'prefill' in spine 's1'
        (required)``."""
        where = ", ".join(repr(d) for d in self.domains) or "none"
        if placed_domain is not None and placed_domain in self.domains:
            return f"near {self.target!r} in {self.level} {placed_domain!r} ({self.mode})"
        if self.nodes is None:
            return f"not near {self.target!r}: it is not placed yet ({self.mode})"
        return (
            f"not near {self.target!r}: no room in its {self.level} domain(s) {where} "
            f"({self.mode}: placed where the topology request alone puts it)"
        )


def _is_target(record: JobRecord, job: JobRecord, target: str) -> bool:
    """Return whether ``record`` is a gang ``job``'s near ``target`` names: by its record's name,
    its owner's name, or its DisaggregatedSet role (in ``job``'s DisaggregatedSet, if any)."""
    if record.namespace != job.namespace or record.key == job.key or record.job is None:
        return False
    if record.name == target:
        return True
    if not isinstance(record.job, Gang):
        return False
    owner = record.job.spec.owner
    if owner.name == target:
        return True
    own_set = job.job.spec.owner.disaggregated_set if isinstance(job.job, Gang) else None
    return owner.role == target and (own_set is None or own_set == owner.disaggregated_set)


def _asks_for(record: JobRecord, job: JobRecord) -> bool:
    """Return whether ``record`` asks to be near ``job`` (by its record or owner name)."""
    gang = record.job
    if not isinstance(gang, Gang) or gang.spec.near is None:
        return False
    names = {job.name}
    if isinstance(job.job, Gang):
        names.add(job.job.spec.owner.name)
    return gang.spec.near.target in names


def near_target(
    store: ClusterStore, job: JobRecord, topology: ClusterTopology
) -> NearTarget | None:
    """Return where ``job`` may go to be near its partner (None when it asks for none).

    Call with the store's lock held (or on a view of it).
    """
    gang = job.job
    if not isinstance(gang, Gang) or gang.spec.near is None:
        return None
    near = gang.spec.near
    partners = [r for r in store.jobs.values() if _is_target(r, job, near.target)]
    placed: set[str] = set()
    for record in partners:
        nodes = set(record.planned_nodes) if store.placement_of(record).planned else set()
        nodes.update(
            p.node
            for p in store.workers.get(record.key, {}).values()
            if p.node is not None and not p.terminal and not p.deleting
        )
        placed.update(n for n in nodes if n in topology.index_of)
    goes_first = any(
        _asks_for(r, job) and (job.created, job.key) < (r.created, r.key) for r in partners
    )
    names = tuple(sorted(r.name for r in partners))
    if not placed:
        return NearTarget(near.target, near.level, near.mode, None, (), names, goes_first)
    try:
        depth = topology.depth_of(near.level)
    except ValueError:  # a level this cluster lacks: the record's near is ignored, said so
        return NearTarget(near.target, near.level, near.mode, None, (), names, goes_first)
    wanted = {topology.node_domain[depth][topology.index_of[n]] for n in placed}
    domains = topology.domains[depth]
    allowed = frozenset(
        topology.node_names[i]
        for d in sorted(wanted)
        for i in range(domains[d].start, domains[d].end)
    )
    shown = tuple(sorted({domains[d].name for d in wanted}))
    return NearTarget(near.target, near.level, near.mode, allowed, shown, names, goes_first)


def plan_near(
    plan: Callable[[GangRequest], GangPlan | Unschedulable],
    request: GangRequest,
    near: NearTarget | None,
) -> GangPlan | Unschedulable:
    """Return ``plan`` of the gang inside its ``near`` partner's domains when it asks for that
    (then, when ``preferred`` and nothing fits there, as its topology request alone puts it)."""
    if near is None or near.nodes is None:
        return plan(request)
    eligible = near.nodes if request.eligible_nodes is None else request.eligible_nodes & near.nodes
    result = plan(replace(request, eligible_nodes=eligible))
    if isinstance(result, Unschedulable) and near.mode == "preferred":
        return plan(request)
    return result


def domain_at(plan: GangPlan, level: str, topology: ClusterTopology) -> str | None:
    """Return the name of the domain of ``level`` that holds the plan's first node."""
    if not plan.nodes_by_rank:
        return None
    try:
        return topology.domain_of(plan.nodes_by_rank[0], level).name
    except (ValueError, KeyError):
        return None


def wait_for_partner(
    item: PlacementWork, near: NearTarget, since: float, memory: PlacerMemory
) -> PlacementIntent:
    """Return why a gang that must be near another waits: that one is not placed yet (written
    when its meaning changes)."""
    found = ", ".join(near.partners) or "no gang of that name in the namespace yet"
    how = (
        f"it must be in the same {near.level} (near, required"
        if near.mode == "required"
        else f"up to {PREFERRED_WAIT_SECONDS:g} s, to be in the same {near.level} (near, preferred"
    )
    message = f"waits for {near.target!r} to be placed: {how}; found: {found})"
    placement = partner_waiting(message, since)
    if not meaning_changed(item.placement, placement):
        return PlacementIntent(item.job, item.placement, placed=False)
    first = not item.placement.waiting
    return announce(item, placement, "WaitingForPartner" if first else "", message, memory)
