"""The gang planner: one whole plan for a tensor-parallel job, or why there is none yet.

``plan_gang`` climbs the topology from the bottom: at each level it looks for domains with room
for every worker, takes the one with the least room left over (best fit, so whole leaves stay free
for the next big job) and fills it with as few child domains as possible, whole tensor-parallel
groups per leaf when it can. The policy bounds the climb (``required``: up to its level;
``preferred``: past it one level per ``max_wait_seconds`` waited, up to the whole cluster).
Degraded or miscabled nodes are avoided, or used only when the cost model says so
(``penalize``). The answer is all or nothing and deterministic: ties go by node order.

Cost per plan: one O(n) pass over the snapshot to count free worker slots, one slice sum per
domain, and sorts only over the children of the chosen domain; no per-plan sort of the nodes.
This module must never mutate the snapshot or do I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from tpfabric_core.errors import InputError
from tpfabric_core.placement._assembly import assemble_plan
from tpfabric_core.placement._capacity import (
    Pick,
    degraded_indices,
    domain_free,
    explain_shortfall,
    fill_domain,
    worker_slots,
)
from tpfabric_core.placement.cost import DEFAULT_COST, CostModelConfig
from tpfabric_core.placement.rank_order import describe_rank_order, order_ranks
from tpfabric_core.placement.request import GangRequest, TopologyPolicy
from tpfabric_core.placement.results import GangPlan, Unschedulable
from tpfabric_core.placement.snapshot import CapacitySnapshot
from tpfabric_core.placement.topology import ClusterTopology, Domain

__all__ = ["allowed_depth", "explain_unschedulable", "plan_gang", "policy_depth"]

POLICY_NAME = "tpfabric"


@dataclass(frozen=True, slots=True)
class _Choice:
    """A domain chosen for the gang and the (node, workers) picks inside it."""

    domain: Domain
    picks: list[Pick]
    fitting_domains: int
    leftover: int


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


def allowed_depth(topology: ClusterTopology, policy: TopologyPolicy, waited_seconds: float) -> int:
    """Return the highest depth the gang may use after waiting ``waited_seconds``."""
    depth = policy_depth(topology, policy)
    if policy.mode == "required":
        return depth
    if not policy.max_wait_seconds:
        return topology.cluster_depth
    steps = int(waited_seconds // policy.max_wait_seconds)
    return min(topology.cluster_depth, depth + steps)


def plan_gang(
    snapshot: CapacitySnapshot,
    request: GangRequest,
    *,
    waited_seconds: float = 0.0,
    cost_config: CostModelConfig = DEFAULT_COST,
) -> GangPlan | Unschedulable:
    """Return a plan for every rank of ``request`` on ``snapshot``, or why none exists now.

    ``waited_seconds`` is how long the gang has waited so far (the clock stays with the caller).
    """
    topology = snapshot.topology
    policy = request.policy
    max_depth = allowed_depth(topology, policy, waited_seconds)
    quantum = request.workers_per_tp_group
    bad = degraded_indices(snapshot, request)
    all_slots = worker_slots(snapshot, request, use_degraded=True)
    if bad and policy.avoid_degraded != "ignore":
        healthy = all_slots.copy()
        for i in bad:
            healthy[i] = 0
    else:
        healthy = all_slots
    choice = _search(topology, healthy, request.workers, max_depth=max_depth, quantum=quantum)
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
        )
    ranks = order_ranks(choice.picks)
    reasons = [
        *_placement_reasons(topology, request, choice, waited_seconds),
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


def _search(
    topology: ClusterTopology,
    slots: Sequence[int],
    workers: int,
    *,
    max_depth: int,
    quantum: int,
    penalty: Sequence[bool] | None = None,
) -> _Choice | None:
    """Return the smallest, best-fitting domain up to ``max_depth`` and its picks, or None."""
    free = domain_free(slots, topology.domains[0])
    below: list[int] = []
    for depth in range(max_depth + 1):
        domains = topology.domains[depth]
        if depth > 0:
            below, free = free, [sum(free[c] for c in d.children) for d in domains]
        fits = [i for i, f in enumerate(free) if f >= workers]
        if not fits:
            continue
        if depth == 0:
            best = min(fits, key=lambda i: (free[i] - workers, i))
        else:
            best = min(
                fits,
                key=lambda i: (
                    _children_needed(below, domains[i].children, workers),
                    free[i] - workers,
                    i,
                ),
            )
        domain = domains[best]
        picks = fill_domain(topology, slots, domain, workers, quantum=quantum, penalty=penalty)
        return _Choice(domain, picks, len(fits), free[best] - workers)
    return None


def _children_needed(free: Sequence[int], children: Sequence[int], workers: int) -> int:
    """Return how many of ``children`` (largest first) it takes to hold ``workers``."""
    total = 0
    for needed, amount in enumerate(sorted((free[c] for c in children), reverse=True), 1):
        total += amount
        if total >= workers:
            return needed
    return len(children) + 1


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
        topology, all_slots, request.workers, max_depth=limit, quantum=quantum, penalty=penalty
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
    topology: ClusterTopology, request: GangRequest, choice: _Choice, waited_seconds: float
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
    wanted = topology.depth_of(policy.level)
    if domain.depth > wanted:
        if policy.max_wait_seconds:
            reasons.append(
                f"no {policy.level} domain fits; relaxed to {domain.level} after waiting "
                f"{waited_seconds:.0f} s (max wait {policy.max_wait_seconds:g} s per level)"
            )
        else:
            reasons.append(f"no {policy.level} domain fits; preferred policy climbs at once")
    return reasons


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
) -> Unschedulable:
    """Return the structured why-not at the highest level the gang may use now."""
    topology = snapshot.topology
    policy = request.policy
    use_degraded = policy.avoid_degraded != "avoid"
    candidates = sorted(
        (
            explain_shortfall(snapshot, request, domain, slots, use_degraded=use_degraded)
            for domain in topology.domains[max_depth]
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
    if policy.mode == "required":
        summary += f"; waiting for one {level} domain (topology policy required)"
    elif max_depth < topology.cluster_depth and policy.max_wait_seconds:
        step = policy.max_wait_seconds
        left = step - (waited_seconds % step)
        summary += (
            f"; waiting, will consider a {topology.level_names[max_depth + 1]} domain in "
            f"{left:.0f} s"
        )
    else:
        summary += "; waiting for capacity"
    return Unschedulable(
        job=request.name,
        policy=policy_name,
        level=level,
        candidates=tuple(candidates),
        summary=summary,
    )
