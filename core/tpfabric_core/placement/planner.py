"""The gang planner: one whole plan for a tensor-parallel job, or why there is none yet.

``plan_gang`` climbs the topology from the bottom: at each level it looks for labelled domains
with room for every worker, takes the one that needs the fewest child domains, then the least
room left over (best fit, so whole leaves stay free for the next big job). Given the size of a
typical gang (``typical_gang_gpus``, e.g. the median of the jobs the caller knows), a leaf is not
cut down to a *fragment* (fewer free worker slots than a typical gang needs, but not none) while
another leaf can take the gang without that: a leaf with one sick node holds 31 healthy nodes, and
best fit alone puts a 24-worker gang there, stranding 7 nodes no 8-worker gang can use; leaves
that are fragments already still go first (they leave the least room). It fills the domain smallest
pieces first: children too small to hold what remains are used up whole before the best-fitting
one takes the rest, so a gang that must span domains eats the fragments others cannot use
rather than cutting into whole leaves; whole tensor-parallel groups per leaf when it can
(always, inside an NVLink level that keeps them). The
policy bounds the climb (``required``: up to its level; ``preferred``: past it one level per
``max_wait_seconds`` waited, up to the whole cluster). A level where no domain could *ever* hold
the gang (allocatable GPUs and RDMA devices of the nodes the pod may use, current use ignored) is
no reason to wait: a preferred gang passes it at once, a required one is told plainly that its
level can never be met. Nodes outside the labelled fabric only count at the cluster level.
When a gang must span child domains and the caller passes the running jobs' :class:`UplinkLoad`,
children whose uplink this gang would push past saturation go after the others (among domains
that need as many children, the one needing fewer of them wins), so its collectives fair-share
fewer oversubscribed uplinks; without it nothing changes.
Degraded or miscabled nodes are avoided, or used only when the cost model says so
(``penalize``). The answer is all or nothing and deterministic: ties go by node order, and an
Unschedulable's summary only changes when the inputs do (never with the clock between two steps).

Cost per plan: two O(n) passes over the snapshot (free and allocatable worker slots, one more per
other demanded resource), one slice sum per domain, and sorts only over the children of the
chosen domain; no per-plan sort of the nodes. This module must never mutate the snapshot or do
I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tpfabric_core.errors import InputError
from tpfabric_core.placement._assembly import assemble_plan
from tpfabric_core.placement._capacity import (
    Pick,
    degraded_indices,
    ever_slots,
    explain_shortfall,
    fill_domain,
    level_free,
    worker_slots,
)
from tpfabric_core.placement.cost import (
    DEFAULT_COST,
    CostModelConfig,
    UplinkLoad,
    ring_flows_per_edge,
)
from tpfabric_core.placement.rank_order import describe_rank_order, order_ranks
from tpfabric_core.placement.request import GangRequest, TopologyPolicy
from tpfabric_core.placement.results import GangPlan, Unschedulable
from tpfabric_core.placement.snapshot import CapacitySnapshot
from tpfabric_core.placement.topology import ClusterTopology, Domain

__all__ = [
    "Reach",
    "allowed_depth",
    "describe_nodes",
    "explain_unschedulable",
    "plan_gang",
    "policy_depth",
    "policy_reach",
]

POLICY_NAME = "tpfabric"


@dataclass(frozen=True, slots=True)
class _Choice:
    """A domain chosen for the gang and the (node, workers) picks inside it."""

    domain: Domain
    picks: list[Pick]
    fitting_domains: int
    leftover: int
    #: (best fit's leaf, slots it would have left) when the fragment rule chose another leaf
    spared: tuple[Domain, int] | None = None


def policy_depth(topology: ClusterTopology, policy: TopologyPolicy) -> int:
    """Return the depth of the policy's level; InputError naming the known levels if unknown."""
    try:
        return topology.depth_of(policy.level)
    except ValueError as err:
        raise InputError(
            "topologyPolicy.level",
            f"unknown level {policy.level!r}",
            "use one of " + ", ".join(topology.level_names),
        ) from err


def allowed_depth(
    topology: ClusterTopology,
    policy: TopologyPolicy,
    waited_seconds: float,
    *,
    lowest_possible: int = 0,
) -> int:
    """Return the highest depth the gang may use after waiting ``waited_seconds``.

    ``lowest_possible``: the lowest depth where some domain could ever hold the gang; a
    preferred policy with a max wait starts there when that is above its level (no wait for a
    level that can never do), then climbs one level per ``max_wait_seconds``.
    """
    depth = policy_depth(topology, policy)
    if policy.mode == "required":
        return depth
    if not policy.max_wait_seconds:
        return topology.cluster_depth
    start = max(depth, min(lowest_possible, topology.cluster_depth))
    steps = int(waited_seconds // policy.max_wait_seconds)
    return min(topology.cluster_depth, start + steps)


@dataclass(frozen=True, slots=True)
class Reach:
    """How far up the topology a gang may go now, and what could ever hold it.

    ``depth``: the highest depth usable now. ``policy_depth``: the policy's level.
    ``start_depth``: where a preferred gang with a max wait starts waiting (its level, or the
    first level above it where some domain could ever hold it). ``ever_depth``: the lowest depth
    where some domain could ever hold the gang (``None``: not even the whole cluster).
    ``largest``: per depth, the most workers one domain could ever hold. ``relax_after_seconds``:
    total waiting after which the next level opens (``None``: nothing pending).
    """

    depth: int
    policy_depth: int
    start_depth: int
    ever_depth: int | None
    largest: tuple[int, ...]
    relax_after_seconds: float | None


def policy_reach(snapshot: CapacitySnapshot, request: GangRequest, waited_seconds: float) -> Reach:
    """Return the :class:`Reach` of ``request`` on ``snapshot`` after ``waited_seconds``.

    InputError (``topologyPolicy.level``) if the policy names a level the topology lacks.
    """
    topology = snapshot.topology
    policy = request.policy
    wanted = policy_depth(topology, policy)
    cluster = topology.cluster_depth
    largest = _largest_ever(snapshot, request)
    ever = next((d for d, m in enumerate(largest) if m >= request.workers), None)
    lowest = cluster if ever is None else ever
    depth = allowed_depth(topology, policy, waited_seconds, lowest_possible=lowest)
    start = wanted
    relax: float | None = None
    step = policy.max_wait_seconds
    if policy.mode == "preferred" and step:
        start = max(wanted, lowest)
        if depth < cluster and ever is not None:
            relax = (int(waited_seconds // step) + 1) * step
    return Reach(
        depth=depth,
        policy_depth=wanted,
        start_depth=start,
        ever_depth=ever,
        largest=largest,
        relax_after_seconds=relax,
    )


def _ever_per_domain(snapshot: CapacitySnapshot, request: GangRequest) -> list[list[int]]:
    """Return per depth, per domain, the workers it could ever hold (memoised per request
    shape: the allocatable capacity of the nodes the pod may use, current use ignored)."""
    quantum = request.workers_per_tp_group
    key = (
        request.gpus_per_worker,
        request.rdma_per_worker,
        quantum,
        request.eligible_nodes,
        request.max_workers_per_node,
    )
    cached = snapshot.ever_cache.get(key)
    if cached is not None:
        return cached
    topology = snapshot.topology
    per_depth = level_free(
        topology, ever_slots(snapshot, request), quantum=quantum, up_to=topology.cluster_depth
    )
    snapshot.ever_cache[key] = per_depth
    return per_depth


def _largest_ever(snapshot: CapacitySnapshot, request: GangRequest) -> tuple[int, ...]:
    """Return per depth the most workers one labelled domain could ever hold."""
    topology = snapshot.topology
    cluster = topology.cluster_depth
    return tuple(
        max(
            (f for f, d in zip(free, topology.domains[depth], strict=True) if d.labelled),
            default=0,
        )
        if depth < cluster
        else sum(free)
        for depth, free in enumerate(_ever_per_domain(snapshot, request))
    )


def plan_gang(
    snapshot: CapacitySnapshot,
    request: GangRequest,
    *,
    waited_seconds: float = 0.0,
    cost_config: CostModelConfig = DEFAULT_COST,
    uplink_load: UplinkLoad | None = None,
    typical_gang_gpus: int | None = None,
) -> GangPlan | Unschedulable:
    """Return a plan for every rank of ``request`` on ``snapshot``, or why none exists now.

    ``waited_seconds`` is how long the gang has waited so far (the clock stays with the caller).
    ``uplink_load``: how busy every domain's uplink is with running jobs (``None``: unknown,
    every uplink counts as free). ``typical_gang_gpus``: the GPUs of a typical gang (``None``:
    plain best fit inside the leaves); a leaf left with fewer free worker slots than that many
    GPUs fill is a fragment, made only when no leaf that fits avoids it.
    """
    topology = snapshot.topology
    policy = request.policy
    reach = policy_reach(snapshot, request, waited_seconds)
    max_depth = reach.depth
    quantum = request.workers_per_tp_group
    bad = degraded_indices(snapshot, request)
    all_slots = worker_slots(snapshot, request, use_degraded=True)
    if bad and policy.avoid_degraded != "ignore":
        healthy = all_slots.copy()
        for i in bad:
            healthy[i] = 0
    else:
        healthy = all_slots
    avoid = _saturating(topology, request, uplink_load, cost_config)
    fragment = _fragment_slots(request, typical_gang_gpus)
    prefer = frozenset(
        topology.index_of[n] for n in request.previous_nodes if n in topology.index_of
    )
    choice = _search(
        topology,
        healthy,
        request.workers,
        max_depth=max_depth,
        quantum=quantum,
        avoid_child=avoid,
        fragment_below=fragment,
        prefer=prefer,
    )
    notes: list[str] = []
    if choice is not None and bad and policy.avoid_degraded == "avoid":
        notes.append(f"kept off {len(bad)} degraded or miscabled node(s) (policy avoid)")
    if bad and policy.avoid_degraded == "penalize":
        choice = _cheaper_with_degraded(
            snapshot,
            request,
            choice,
            all_slots=all_slots,
            bad=bad,
            max_depth=max_depth,
            cost_config=cost_config,
            notes=notes,
            avoid_child=avoid,
            fragment_below=fragment,
        )
    if choice is None:
        explain_slots = healthy if policy.avoid_degraded == "avoid" else all_slots
        return explain_unschedulable(
            snapshot,
            request,
            explain_slots,
            max_depth=max_depth,
            waited_seconds=waited_seconds,
            policy_name=POLICY_NAME,
            reach=reach,
        )
    if avoid is not None:
        notes.extend(_uplink_notes(topology, choice, avoid))
    if prefer:
        notes.append(_return_note(topology, choice, prefer))
    if choice.spared is not None:
        leaf, left = choice.spared
        notes.append(
            f"kept {leaf.level} {leaf.name!r} from becoming a fragment: best fit there would "
            f"leave {left} worker slot(s), fewer than a typical gang of {typical_gang_gpus} "
            f"GPUs needs ({fragment})"
        )
    ranks = order_ranks(choice.picks)
    outside = sum(1 for i in set(ranks) if i in topology.outside)
    if outside:
        notes.append(
            f"uses {outside} node(s) outside the labelled fabric: only a cluster-wide plan may"
        )
    reasons = [
        *_placement_reasons(topology, request, choice, waited_seconds, reach),
        *notes,
        describe_rank_order(topology, ranks, request),
    ]
    plan = assemble_plan(
        snapshot, request, ranks, policy=POLICY_NAME, reasons=reasons, cost_config=cost_config
    )
    cost = plan.cost
    rails = _rail_note(topology, ranks)
    extra = (
        *((rails,) if rails else ()),
        (
            f"modelled all-reduce of {cost.message_bytes / 2**20:g} MiB: ring "
            f"{cost.ring_s * 1e3:.3f} ms, tree {cost.tree_s * 1e3:.3f} ms "
            "(a model for scoring, not a measurement)"
        ),
    )
    return replace(plan, reasons=plan.reasons + extra)


def describe_nodes(
    snapshot: CapacitySnapshot,
    request: GangRequest,
    nodes_by_rank: Sequence[str],
    reason: str,
    *,
    cost_config: CostModelConfig = DEFAULT_COST,
) -> GangPlan:
    """Return a plan that describes where a gang's ranks already run (no choice made here):
    its domain, hops and modelled cost, with ``reason`` saying why it was read back.

    ValueError when a node is not in the snapshot's topology.
    """
    topology = snapshot.topology
    missing = [n for n in nodes_by_rank if n not in topology.index_of]
    if missing:
        raise ValueError(f"nodes not in the topology: {', '.join(missing[:5])}")
    ranks = [topology.index_of[n] for n in nodes_by_rank]
    return assemble_plan(
        snapshot, request, ranks, policy=POLICY_NAME, reasons=[reason], cost_config=cost_config
    )


def _uplink_notes(
    topology: ClusterTopology, choice: _Choice, avoid: Callable[[Domain], bool]
) -> list[str]:
    """Return what the running gangs' uplink load did to a plan that spans child domains."""
    depth = choice.domain.depth
    if depth == 0:
        return []
    lower = topology.domains[depth - 1]
    used = {topology.node_domain[depth - 1][node] for node, _ in choice.picks}
    if len(used) < 2:
        return []  # inside one child: its uplink is not crossed
    busy = [d for d in lower if d.labelled and avoid(d)]
    if not busy:
        return []
    level = lower[0].level
    crossed = [d.name for d in busy if d.index in used]
    shown = ", ".join(d.name for d in busy[:5]) + (", ..." if len(busy) > 5 else "")
    what = f"{level} uplink(s) the planned gangs' rings would push past capacity"
    if not crossed:
        return [f"kept off the {len(busy)} {what} ({shown})"]
    named = ", ".join(crossed[:5])
    return [
        f"crosses {len(crossed)} of the {len(busy)} {what} ({named}): none crossing fewer had room"
    ]


def _return_note(topology: ClusterTopology, choice: _Choice, prefer: frozenset[int]) -> str:
    """Return how the plan relates to the nodes of the gang's last plan."""
    domain = choice.domain
    again = sum(1 for node, _ in choice.picks if node in prefer)
    inside = sum(1 for n in prefer if domain.start <= n < domain.end)
    if inside:
        return (
            f"back in {domain.level} {domain.name!r}, where it ran before: {again} of its "
            f"{len(prefer)} previous node(s) again"
        )
    return (
        f"its {len(prefer)} previous node(s) are in no {domain.level} domain that fits now: "
        "placed afresh"
    )


def _fragment_slots(request: GangRequest, typical_gang_gpus: int | None) -> int | None:
    """Return the free worker slots below which a leaf is a fragment (``None``: no rule)."""
    if typical_gang_gpus is None:
        return None
    slots = typical_gang_gpus // max(1, request.gpus_per_worker)
    return slots if slots > 1 else None


def _search(
    topology: ClusterTopology,
    slots: Sequence[int],
    workers: int,
    *,
    max_depth: int,
    quantum: int,
    penalty: Sequence[bool] | None = None,
    avoid_child: Callable[[Domain], bool] | None = None,
    fragment_below: int | None = None,
    prefer: frozenset[int] = frozenset(),
) -> _Choice | None:
    """Return the smallest, best-fitting labelled domain up to ``max_depth`` and its picks.

    Among leaves, best fit, except that one left a fragment (fewer than ``fragment_below`` free
    slots but not none) goes after every leaf that is not cut down to one. Above the leaves, the
    domain needing the fewest children wins, then the one needing the fewest children
    ``avoid_child`` flags, then the best fit. Before all of these at any level, the domain
    holding most of the ``prefer`` nodes (where the gang ran before) wins.
    """
    levels = level_free(topology, slots, quantum=quantum, up_to=max_depth)
    cluster = topology.cluster_depth
    for depth in range(max_depth + 1):
        domains = topology.domains[depth]
        free = levels[depth]
        fits = [
            i
            for i, f in enumerate(free)
            if f >= workers and (depth == cluster or domains[i].labelled)
        ]
        if not fits:
            continue
        spared: tuple[Domain, int] | None = None
        returning = _returning(domains, fits, prefer)
        if returning is not None:
            best = returning
        elif depth == 0:
            best = min(fits, key=lambda i: (free[i] - workers, i))
            if fragment_below is not None:
                plain = best
                best = min(
                    fits,
                    key=lambda i: (
                        free[i] >= fragment_below and 0 < free[i] - workers < fragment_below,
                        free[i] - workers,
                        i,
                    ),
                )
                if best != plain:
                    spared = (domains[plain], free[plain] - workers)
        else:
            below = levels[depth - 1]
            lower = topology.domains[depth - 1]
            best = min(
                fits,
                key=lambda i: (
                    *_children_needed(below, lower, domains[i].children, workers, avoid_child),
                    free[i] - workers,
                    i,
                ),
            )
        domain = domains[best]
        picks = fill_domain(
            topology,
            slots,
            domain,
            workers,
            quantum=quantum,
            penalty=penalty,
            avoid_child=avoid_child,
            pieces_first=True,
            prefer=prefer,
        )
        return _Choice(domain, picks, len(fits), free[best] - workers, spared)
    return None


def _returning(
    domains: Sequence[Domain], fits: Sequence[int], prefer: frozenset[int]
) -> int | None:
    """Return the fitting domain holding most of the ``prefer`` nodes (None: none holds any)."""
    if not prefer:
        return None
    held = {i: sum(1 for n in prefer if domains[i].start <= n < domains[i].end) for i in fits}
    best = max(fits, key=lambda i: (held[i], -i))
    return best if held[best] else None


def _children_needed(
    free: Sequence[int],
    lower: Sequence[Domain],
    children: Sequence[int],
    workers: int,
    avoid_child: Callable[[Domain], bool] | None,
) -> tuple[int, int]:
    """Return (children, flagged children) it takes to hold ``workers``, largest first.

    The count is the fewest children whatever their flags; the flagged count is how many of
    them must be ones ``avoid_child`` flags when unflagged children go first.
    """
    sizes = sorted((free[c] for c in children), reverse=True)
    needed = _prefix_count(sizes, workers)
    if needed > len(children) or avoid_child is None:
        return needed, 0
    ordered = sorted(
        ((avoid_child(lower[c]), -free[c]) for c in children if free[c] > 0),
    )
    total = 0
    flagged = 0
    for avoided, negative in ordered:
        total -= negative
        flagged += avoided
        if total >= workers:
            break
    return needed, flagged


def _prefix_count(sizes: Sequence[int], workers: int) -> int:
    """Return how many leading ``sizes`` it takes to reach ``workers`` (len + 1: never)."""
    total = 0
    for count, amount in enumerate(sizes, 1):
        total += amount
        if total >= workers:
            return count
    return len(sizes) + 1


def _saturating(
    topology: ClusterTopology,
    request: GangRequest,
    uplink_load: UplinkLoad | None,
    cost_config: CostModelConfig,
) -> Callable[[Domain], bool] | None:
    """Return the test for a child domain whose uplink this gang would push past saturation.

    The gang adds one flow per rail it uses to the uplink of every child domain it spans (its
    rank-ordered rings leave each such domain once per rail); ``None`` without a load.
    """
    if uplink_load is None:
        return None
    flows = ring_flows_per_edge(topology, request.gpus_per_worker)

    def saturating(child: Domain) -> bool:
        """Return whether ``child``'s uplink would carry more than it can at full rate."""
        load = uplink_load.after_adding(topology, child.depth, child.index, flows, cost_config)
        return load > 1.0

    return saturating


def _cheaper_with_degraded(
    snapshot: CapacitySnapshot,
    request: GangRequest,
    healthy_choice: _Choice | None,
    *,
    all_slots: Sequence[int],
    bad: Sequence[int],
    max_depth: int,
    cost_config: CostModelConfig,
    notes: list[str],
    avoid_child: Callable[[Domain], bool] | None = None,
    fragment_below: int | None = None,
) -> _Choice | None:
    """Return the healthy choice, or one using degraded nodes at a lower level if cheaper."""
    topology = snapshot.topology
    limit = healthy_choice.domain.depth - 1 if healthy_choice is not None else max_depth
    if limit < 0:
        return healthy_choice
    penalty = [False] * len(topology)
    for i in bad:
        penalty[i] = True
    quantum = request.workers_per_tp_group
    degraded_choice = _search(
        topology,
        all_slots,
        request.workers,
        max_depth=limit,
        quantum=quantum,
        penalty=penalty,
        avoid_child=avoid_child,
        fragment_below=fragment_below,
    )
    if degraded_choice is None:
        return healthy_choice
    used = sum(1 for node, _ in degraded_choice.picks if penalty[node])
    if healthy_choice is None:
        notes.append(f"uses {used} degraded or miscabled node(s): no healthy placement fits")
        return degraded_choice
    costs = []
    for choice in (healthy_choice, degraded_choice):
        plan = assemble_plan(
            snapshot, request, order_ranks(choice.picks), policy="", cost_config=cost_config
        )
        costs.append(plan.cost.best_s)
    if costs[1] < costs[0]:
        notes.append(
            f"uses {used} degraded or miscabled node(s): modelled {costs[1] * 1e3:.3f} ms beats "
            f"{costs[0] * 1e3:.3f} ms for the best healthy placement (policy penalize)"
        )
        return degraded_choice
    notes.append(
        f"kept off degraded nodes: healthy placement modelled {costs[0] * 1e3:.3f} ms vs "
        f"{costs[1] * 1e3:.3f} ms on a lower level with degraded nodes (policy penalize)"
    )
    return healthy_choice


def _placement_reasons(
    topology: ClusterTopology,
    request: GangRequest,
    choice: _Choice,
    waited_seconds: float,
    reach: Reach,
) -> list[str]:
    """Return why this domain: smallest level that fits, best fit, any relaxation."""
    domain = choice.domain
    policy = request.policy
    reasons = [
        (
            f"{domain.level} {domain.name!r} is the smallest level that fits "
            f"{request.workers} workers x {request.gpus_per_worker} GPUs "
            f"({choice.fitting_domains} {domain.level} domain(s) could; best fit leaves "
            f"{choice.leftover} worker slot(s) free there)"
        )
    ]
    if reach.start_depth > reach.policy_depth:
        reasons.append(_never_note(topology, request, reach))
    start_level = topology.level_names[reach.start_depth]
    if domain.depth > reach.start_depth:
        if policy.max_wait_seconds:
            reasons.append(
                f"no {start_level} domain fits; relaxed to {domain.level} after waiting "
                f"{waited_seconds:.0f} s (max wait {policy.max_wait_seconds:g} s per level)"
            )
        else:
            reasons.append(f"no {policy.level} domain fits; preferred policy climbs at once")
    return reasons


def _never_note(topology: ClusterTopology, request: GangRequest, reach: Reach) -> str:
    """Return e.g. ``no leaf domain can ever hold 16 workers (largest holds 8): considered ...``."""
    names = topology.level_names
    parts = []
    for depth in range(reach.policy_depth, reach.start_depth):
        if depth == reach.policy_depth:
            parts.append(
                f"no {names[depth]} domain can ever hold {request.workers} workers "
                f"(largest holds {reach.largest[depth]})"
            )
        else:
            parts.append(f"nor any {names[depth]} domain (largest holds {reach.largest[depth]})")
    return ", ".join(parts) + f": considered {names[reach.start_depth]} at once"


def _rail_note(topology: ClusterTopology, ranks: Sequence[int]) -> str:
    """Return a line on rail alignment of the chosen nodes ('' when the fabric has no rails)."""
    if not topology.rails:
        return ""
    by_leaf: dict[int, set[tuple[str | None, ...]]] = {}
    for i in set(ranks):
        by_leaf.setdefault(topology.node_domain[0][i], set()).add(topology.rail_switches[i])
    misaligned = sum(len(signatures) - 1 for signatures in by_leaf.values())
    if misaligned:
        return f"rails: {misaligned} node(s) plug into other rail leaves than their leaf peers"
    return (
        f"rail-aligned: ranks in each of {len(by_leaf)} leaf domain(s) share its "
        f"{topology.rails} rail leaves"
    )


def explain_unschedulable(
    snapshot: CapacitySnapshot,
    request: GangRequest,
    slots: Sequence[int],
    *,
    max_depth: int,
    waited_seconds: float,
    policy_name: str,
    reach: Reach | None = None,
) -> Unschedulable:
    """Return the structured why-not at ``max_depth``, the highest level the gang may use now.

    The summary depends on the inputs only: a pending relaxation is named by the total wait
    after which it happens (``relax_after_seconds``), never by a countdown.
    """
    topology = snapshot.topology
    policy = request.policy
    if reach is None:
        reach = policy_reach(snapshot, request, waited_seconds)
    use_degraded = policy.avoid_degraded != "avoid"
    cluster = topology.cluster_depth
    fit = level_free(topology, slots, quantum=request.workers_per_tp_group, up_to=max_depth)
    ever = _ever_per_domain(snapshot, request)[max_depth]
    candidates = sorted(
        (
            explain_shortfall(
                snapshot,
                request,
                domain,
                slots,
                use_degraded=use_degraded,
                workers_fit=f,
                workers_ever=e,
            )
            for domain, f, e in zip(topology.domains[max_depth], fit[max_depth], ever, strict=True)
            if domain.labelled or max_depth == cluster
        ),
        key=lambda c: (-c.workers_fit, c.domain),
    )
    level = topology.level_names[max_depth]
    best = candidates[0] if candidates else None
    summary = (
        f"{request.name}: no {level} domain has room for {request.workers} workers x "
        f"{request.gpus_per_worker} GPUs"
    )
    if best is not None:
        summary += f" (best: {best.domain!r} fits {best.workers_fit})"
    else:
        summary = f"{request.name}: there is no {level} domain"
    outside = len(topology.outside) if max_depth < cluster else 0
    if outside:
        summary += f"; {topology.outside_note()}, left out below the cluster level"
    if reach.start_depth > reach.policy_depth and policy.mode == "preferred":
        summary += f"; {_never_note(topology, request, reach)}"
    relax: float | None = None
    never = reach.ever_depth is None or (policy.mode == "required" and reach.ever_depth > max_depth)
    if reach.ever_depth is None:
        summary += (
            f"; not even the whole cluster can ever hold {request.workers} workers (it holds "
            f"{reach.largest[cluster]} by allocatable capacity)"
        )
    elif policy.mode == "required" and reach.ever_depth > max_depth:
        summary += (
            f"; no {level} domain can ever hold {request.workers} workers (the largest holds "
            f"{reach.largest[max_depth]} by allocatable capacity): the required {level} level "
            "can never be met; ask for a higher level or mode preferred"
        )
    elif policy.mode == "required":
        summary += f"; waiting for one {level} domain (topology policy required)"
    elif max_depth < cluster and policy.max_wait_seconds:
        step = policy.max_wait_seconds
        relax = (int(waited_seconds // step) + 1) * step
        summary += (
            f"; waiting, will consider a {topology.level_names[max_depth + 1]} domain once it "
            f"has waited {relax:g} s"
        )
    else:
        summary += "; waiting for capacity"
    return Unschedulable(
        job=request.name,
        policy=policy_name,
        level=level,
        candidates=tuple(candidates),
        summary=summary,
        relax_after_seconds=relax,
        outside_nodes=outside,
        never=never,
    )
