"""Baseline placers with the planner's inputs and outputs, for the benchmark and the tests.

- :func:`spread`: what default kube-scheduler does for GPU pods: topology-unaware, each worker on
  the node with the most free GPUs (LeastAllocated), ties broken by a per-job hash as kube-scheduler
  breaks them at random; rank ``k`` is the ``k``-th pod scheduled.
- :func:`first_fit`: nodes in name order, each filled before the next.
- :func:`kueue_bestfit`: Kueue's Topology-Aware Scheduling ``BestFit`` profile as published (KEP
  2724 and ``tas_flavor_snapshot.go``): count the pods that fit per domain bottom-up; at the
  requested level sort domains by count descending (ties by label values) and take the first with
  the smallest count that still fits; if none fits, ``preferred`` climbs a level and at the top
  spreads greedily, ``required`` fails; then descend level by level taking the largest children
  and best-fitting the last one. Health and rails are invisible to it.
- :func:`optimal`: exact search for small instances: every allocation of workers to leaf domains
  inside every domain the policy allows, scored by the cost model (then level, leaves, best fit).
  Inside a leaf, nodes differ only by free slots and health, so they are filled healthy first.

Every baseline keeps gangs whole (as with a coscheduling plugin): all or nothing. This module
must never be used to place real jobs.
"""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Iterator, Sequence
from typing import Protocol

from tpfabric_core.placement._assembly import assemble_plan
from tpfabric_core.placement._capacity import (
    Pick,
    degraded_indices,
    domain_free,
    pick_fewest,
    worker_slots,
)
from tpfabric_core.placement.cost import (
    DEFAULT_COST,
    CostModelConfig,
    modelled_allreduce_by_index,
)
from tpfabric_core.placement.planner import (
    explain_unschedulable,
    plan_gang,
    policy_depth,
    policy_reach,
)
from tpfabric_core.placement.rank_order import order_ranks
from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.results import GangPlan, Unschedulable
from tpfabric_core.placement.snapshot import CapacitySnapshot
from tpfabric_core.placement.topology import ClusterTopology

__all__ = [
    "PLACERS",
    "Placer",
    "SearchTooLargeError",
    "first_fit",
    "kueue_bestfit",
    "optimal",
    "spread",
]


class Placer(Protocol):
    """A placement function: the planner or any baseline."""

    def __call__(
        self,
        snapshot: CapacitySnapshot,
        request: GangRequest,
        *,
        waited_seconds: float = 0.0,
        cost_config: CostModelConfig = DEFAULT_COST,
    ) -> GangPlan | Unschedulable:
        """Return a whole plan for ``request`` or why there is none."""
        ...


class SearchTooLargeError(RuntimeError):
    """The exact search would enumerate more allocations than its budget allows."""


def _not_enough(
    snapshot: CapacitySnapshot, request: GangRequest, slots: Sequence[int], name: str
) -> Unschedulable:
    """Return the cluster-wide why-not of a topology-unaware baseline."""
    depth = snapshot.topology.cluster_depth
    answer = explain_unschedulable(
        snapshot, request, slots, max_depth=depth, waited_seconds=0.0, policy_name=name
    )
    return Unschedulable(
        job=answer.job,
        policy=name,
        level=answer.level,
        candidates=answer.candidates,
        summary=f"{request.name}: fewer than {request.workers} free worker slots in the cluster",
    )


def spread(
    snapshot: CapacitySnapshot,
    request: GangRequest,
    *,
    waited_seconds: float = 0.0,
    cost_config: CostModelConfig = DEFAULT_COST,
) -> GangPlan | Unschedulable:
    """Return the topology-unaware LeastAllocated placement, or Unschedulable if it cannot fit."""
    del waited_seconds
    slots = worker_slots(snapshot, request, use_degraded=True)
    if sum(slots) < request.workers:
        return _not_enough(snapshot, request, slots, "spread")
    names = snapshot.topology.node_names
    prefix = request.name.encode() + b"/"
    heap = [
        (-snapshot.free_gpus[i], zlib.crc32(prefix + names[i].encode()), i)
        for i, s in enumerate(slots)
        if s > 0
    ]
    heapq.heapify(heap)
    left = list(slots)
    ranks: list[int] = []
    while len(ranks) < request.workers:
        neg_free, tie, i = heapq.heappop(heap)
        ranks.append(i)
        left[i] -= 1
        if left[i] > 0:
            heapq.heappush(heap, (neg_free + request.gpus_per_worker, tie, i))
    return assemble_plan(
        snapshot,
        request,
        ranks,
        policy="spread",
        reasons=("LeastAllocated, topology-unaware (default kube-scheduler)",),
        cost_config=cost_config,
    )


def first_fit(
    snapshot: CapacitySnapshot,
    request: GangRequest,
    *,
    waited_seconds: float = 0.0,
    cost_config: CostModelConfig = DEFAULT_COST,
) -> GangPlan | Unschedulable:
    """Return the first-fit placement over nodes in name order, or Unschedulable."""
    del waited_seconds
    slots = worker_slots(snapshot, request, use_degraded=True)
    if sum(slots) < request.workers:
        return _not_enough(snapshot, request, slots, "first_fit")
    ranks: list[int] = []
    for i in snapshot.topology.name_order:
        take = min(slots[i], request.workers - len(ranks))
        ranks.extend([i] * take)
        if len(ranks) == request.workers:
            break
    return assemble_plan(
        snapshot,
        request,
        ranks,
        policy="first_fit",
        reasons=("first fit in node-name order",),
        cost_config=cost_config,
    )


def _best_fit_index(states: Sequence[int], count: int) -> int:
    """Return Kueue's best-fit index: first of the smallest states >= count (0 if none)."""
    best = 0
    for i, state in enumerate(states):
        if state >= count and state != states[best]:
            best = i
    return best


def _counts_to_minimum(order: Sequence[int], state: Sequence[int], count: int) -> list[Pick]:
    """Return Kueue's updateCountsToMinimum: largest first, the last one best-fit."""
    result: list[Pick] = []
    remaining = count
    for position, index in enumerate(order):
        chosen = index
        if state[chosen] >= remaining:
            offset = _best_fit_index([state[j] for j in order[position:]], remaining)
            chosen = order[position + offset]
        if state[chosen] >= remaining:
            result.append((chosen, remaining))
            return result
        remaining -= state[chosen]
        result.append((chosen, state[chosen]))
    raise ValueError(f"cannot cover {count}: {remaining} left")


def kueue_bestfit(
    snapshot: CapacitySnapshot,
    request: GangRequest,
    *,
    waited_seconds: float = 0.0,
    cost_config: CostModelConfig = DEFAULT_COST,
) -> GangPlan | Unschedulable:
    """Return Kueue TAS BestFit's placement for ``request``, or Unschedulable."""
    del waited_seconds
    topology = snapshot.topology
    slots = worker_slots(snapshot, request, use_degraded=True)
    top = topology.cluster_depth - 1
    level = min(policy_depth(topology, request.policy), top)
    required = request.policy.mode == "required"
    counts = [domain_free(slots, topology.domains[0])]
    for depth in range(1, top + 1):
        below = counts[-1]
        counts.append([sum(below[c] for c in d.children) for d in topology.domains[depth]])
    found = _kueue_fit_level(
        topology, counts, level, top=top, workers=request.workers, required=required
    )
    if found is None:
        depth = level if required else top
        return explain_unschedulable(
            snapshot,
            request,
            slots,
            max_depth=depth,
            waited_seconds=0.0,
            policy_name="kueue_bestfit",
        )
    depth, current = found
    while depth > 0:
        lower = topology.domains[depth - 1]
        children = [c for index, _ in current for c in topology.domains[depth][index].children]
        state = counts[depth - 1]
        children.sort(key=lambda c: (-state[c], lower[c].path))
        current = _counts_to_minimum(children, state, request.workers)
        depth -= 1
    nodes = [
        i
        for index, _ in current
        for i in range(topology.domains[0][index].start, topology.domains[0][index].end)
    ]
    nodes.sort(key=lambda i: (-slots[i], i))
    picks = _counts_to_minimum(nodes, slots, request.workers)
    return assemble_plan(
        snapshot,
        request,
        order_ranks(picks),
        policy="kueue_bestfit",
        reasons=("Kueue TAS BestFit",),
        cost_config=cost_config,
    )


def _kueue_fit_level(
    topology: ClusterTopology,
    counts: Sequence[Sequence[int]],
    depth: int,
    *,
    top: int,
    workers: int,
    required: bool,
) -> tuple[int, list[Pick]] | None:
    """Return (depth, [(domain, workers)]) per Kueue's findLevelWithFitDomains, or None."""
    domains = topology.domains[depth]
    state = counts[depth]
    order = sorted(range(len(domains)), key=lambda i: (-state[i], domains[i].path))
    # nodes outside the labelled fabric only take part in the spread at the top
    labelled = [i for i in order if domains[i].labelled]
    if labelled and state[labelled[0]] >= workers:
        chosen = labelled[_best_fit_index([state[i] for i in labelled], workers)]
        return depth, [(chosen, workers)]
    if required or not order:
        return None
    if depth < top:
        return _kueue_fit_level(
            topology, counts, depth + 1, top=top, workers=workers, required=required
        )
    picks: list[Pick] = []
    remaining = workers
    position = 0
    while remaining > 0 and position < len(order) and state[order[position]] > 0:
        offset = 0
        if state[order[position]] >= remaining:
            offset = _best_fit_index([state[i] for i in order[position:]], remaining)
        picks.append((order[position + offset], min(remaining, state[order[position]])))
        remaining -= state[order[position]]
        position += 1
    return (depth, picks) if remaining <= 0 else None


def optimal(
    snapshot: CapacitySnapshot,
    request: GangRequest,
    *,
    waited_seconds: float = 0.0,
    cost_config: CostModelConfig = DEFAULT_COST,
    max_allocations: int = 20_000,
) -> GangPlan | Unschedulable:
    """Return the exact best placement under the cost model; SearchTooLargeError if too big.

    Same policy bounds as :func:`~tpfabric_core.placement.planner.plan_gang` (level, wait,
    degraded handling); the objective is (modelled all-reduce time, degraded or miscabled nodes
    used under ``penalize``, level, leaves spanned, room left in the domain, node order).
    """
    topology = snapshot.topology
    policy = request.policy
    max_depth = policy_reach(snapshot, request, waited_seconds).depth
    use_degraded = policy.avoid_degraded != "avoid"
    slots = worker_slots(snapshot, request, use_degraded=use_degraded)
    penalty = [False] * len(topology)
    for i in degraded_indices(snapshot, request):
        penalty[i] = True
    leaf_free = domain_free(slots, topology.domains[0])
    budget = [max_allocations]
    penalize = policy.avoid_degraded == "penalize"
    best: tuple[tuple[float, int, int, int, int, tuple[int, ...]], list[int]] | None = None
    monotone = _cost_grows_with_level(topology, cost_config)
    for depth in range(max_depth + 1):
        for domain in topology.domains[depth]:
            if not domain.labelled or sum(slots[domain.start : domain.end]) < request.workers:
                continue
            first = topology.node_domain[0][domain.start]
            last = topology.node_domain[0][domain.end - 1]
            leaves = [leaf for leaf in range(first, last + 1) if leaf_free[leaf] > 0]
            room = sum(leaf_free[leaf] for leaf in leaves) - request.workers
            for vector in _allocations(leaves, leaf_free, request.workers, budget):
                used = [leaf for leaf, k in vector if k]
                if depth > 0 and _leaves_depth(topology, used) < depth:
                    continue  # seen inside a smaller domain already
                picks: list[Pick] = []
                for leaf, k in vector:
                    if k:
                        picks.extend(
                            pick_fewest(
                                [
                                    (i, slots[i], int(penalty[i]))
                                    for i in range(
                                        topology.domains[0][leaf].start,
                                        topology.domains[0][leaf].end,
                                    )
                                ],
                                k,
                            )
                        )
                ranks = order_ranks(picks)
                degraded = frozenset(i for i in ranks if snapshot.degraded[i])
                cost = modelled_allreduce_by_index(
                    topology, ranks, request.gpus_per_worker, degraded=degraded, config=cost_config
                )
                # as the planner's penalize: a sick node only where it is strictly cheaper
                sick = sum(1 for i in set(ranks) if penalty[i]) if penalize else 0
                key = (cost.best_s, sick, depth, len(used), room, tuple(ranks))
                if best is None or key < best[0]:
                    best = (key, ranks)
        if best is not None and monotone and not any(penalty[i] for i in best[1]):
            break
    if best is None:
        return explain_unschedulable(
            snapshot,
            request,
            slots,
            max_depth=max_depth,
            waited_seconds=waited_seconds,
            policy_name="optimal",
        )
    return assemble_plan(
        snapshot,
        request,
        best[1],
        policy="optimal",
        reasons=("exact search over leaf allocations under the cost model",),
        cost_config=cost_config,
    )


def _leaves_depth(topology: ClusterTopology, leaves: Sequence[int]) -> int:
    """Return the depth of the smallest domain holding every leaf domain in ``leaves``."""
    return topology.span_depth(topology.domains[0][leaf].start for leaf in leaves)


def _cost_grows_with_level(topology: ClusterTopology, config: CostModelConfig) -> bool:
    """Return whether crossing a higher level never costs less than a lower one."""
    previous = (1.0, 0.0)
    for level in topology.level_names[1:]:
        current = (config.oversubscription.get(level, 1.0), config.background_load.get(level, 0.0))
        if current[0] < previous[0] or current[1] < previous[1]:
            return False
        previous = current
    return True


def _allocations(
    leaves: Sequence[int], free: Sequence[int], workers: int, budget: list[int]
) -> Iterator[list[Pick]]:
    """Yield every (leaf, workers) allocation summing to ``workers``; stops past the budget."""
    suffix = [0] * (len(leaves) + 1)
    for k in range(len(leaves) - 1, -1, -1):
        suffix[k] = suffix[k + 1] + free[leaves[k]]

    def walk(k: int, remaining: int, chosen: list[Pick]) -> Iterator[list[Pick]]:
        """Yield the allocations of ``remaining`` workers over leaves ``k`` onward."""
        if remaining == 0:
            budget[0] -= 1
            if budget[0] < 0:
                raise SearchTooLargeError("exact search exceeded its allocation budget")
            yield chosen
            return
        if k == len(leaves) or suffix[k] < remaining:
            return
        leaf = leaves[k]
        low = max(0, remaining - suffix[k + 1])
        for take in range(min(free[leaf], remaining), low - 1, -1):
            yield from walk(k + 1, remaining - take, [*chosen, (leaf, take)])

    yield from walk(0, workers, [])


PLACERS: dict[str, Placer] = {
    "tpfabric": plan_gang,
    "spread": spread,
    "first_fit": first_fit,
    "kueue_bestfit": kueue_bestfit,
    "optimal": optimal,
}
"""Every placer by the name the benchmark reports it under."""
