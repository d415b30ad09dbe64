"""Baseline placers with the planner's inputs and outputs, for the benchmark and the tests.

- :func:`spread`: what default kube-scheduler does for GPU pods: topology-unaware, each worker on
  the node with the most free GPUs (LeastAllocated), ties broken by a per-job hash as kube-scheduler
  breaks them at random; rank ``k`` is the ``k``-th pod scheduled.
- :func:`first_fit`: nodes in name order, each filled before the next.
- :func:`kueue_bestfit` and :func:`kueue_unconstrained`: Kueue's Topology-Aware Scheduling as
  Kueue v0.17.0 places a PodSet (``pkg/cache/scheduler/tas_flavor_snapshot.go``,
  ``findTopologyAssignment``): count the pods and slices that fit per domain bottom-up
  (``fillInCounts``); find the level and domains (``findLevelWithFitDomains``); descend level by
  level (``updateCountsToMinimumGeneric``). ``required``/``preferred`` requests use BestFit
  (largest domains first, the last one best-fit; ``preferred`` climbs a level when nothing
  fits, ``required`` fails); ``unconstrained`` ones use LeastFreeCapacity (the fullest domain
  that fits, else the fullest first: ``useLeastFreeCapacityAlgorithm``, TASProfileMixed on by
  default since 0.15). A gang whose tensor-parallel groups span workers asks for slices
  (``podset-slice-required-topology``/``podset-slice-size``: one group per node, or per leaf
  domain when a group outgrows a node), as a Kueue user would write. Not modelled:
  TASBalancedPlacement (alpha, off by default), leader pods, multi-layer slices. Health and
  rails are invisible to it.
- :func:`optimal`: exact search for small instances: every allocation of workers to leaf domains
  inside every domain the policy allows, scored by the cost model (then level, leaves, best fit).
  Inside a leaf, nodes differ only by free slots and health, so they are filled healthy first.

Every baseline keeps gangs whole (as with a coscheduling plugin): all or nothing. This module
must never be used to place real jobs.
"""

from __future__ import annotations

import functools
import heapq
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
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
    "kueue_unconstrained",
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


@dataclass(frozen=True, slots=True)
class _KueueAsk:
    """What a gang asks Kueue TAS for, in Kueue's terms (levels: 0 nodes, 1 leaf, ... blocks).

    ``slices`` of ``slice_size`` pods each, every slice inside one domain of ``slice_level``
    (``podset-slice-required-topology``; 1 pod and the node level without one); ``level`` the
    ``required``/``preferred`` level, or for ``unconstrained`` the lowest level (the highest when
    slices are asked: Kueue's ``levelKey`` for a slice-only request).
    """

    slices: int
    slice_size: int
    slice_level: int
    level: int
    required: bool
    least_free: bool


class _KueueTree:
    """Kueue's ``fillInCounts``: pods and slices that fit per domain of every level, bottom-up.

    Level 0 holds the nodes, level ``d + 1`` the topology's domains of depth ``d``, up to the
    highest labelled level (Kueue has no cluster root). ``state`` counts pods, ``slices`` whole
    slices: ``state // slice_size`` at the slice level, the children's sum above it, 0 below
    (``fillInCountsHelper``). ``rank`` is the domain's place in label-value order (Kueue's
    ``levelValues`` tie-break).
    """

    def __init__(self, topology: ClusterTopology, slots: Sequence[int], ask: _KueueAsk) -> None:
        size = ask.slice_size
        self.top = topology.cluster_depth
        self.state: list[list[int]] = [list(slots)]
        self.slices: list[list[int]] = [
            [n // size for n in slots] if ask.slice_level == 0 else [0] * len(slots)
        ]
        self.children: list[list[range | tuple[int, ...]]] = [[]]
        self.rank: list[list[int]] = [list(range(len(slots)))]
        self.labelled: list[list[bool]] = [[True] * len(slots)]
        for depth in range(self.top):
            domains = topology.domains[depth]
            kids = [range(d.start, d.end) if depth == 0 else d.children for d in domains]
            below_state, below_slices = self.state[-1], self.slices[-1]
            state = [sum(below_state[c] for c in k) for k in kids]
            if depth + 1 == ask.slice_level:
                slices = [n // size for n in state]
            else:
                slices = [sum(below_slices[c] for c in k) for k in kids]
            by_path = sorted(range(len(domains)), key=lambda k: domains[k].path)
            rank = [0] * len(domains)
            for position, k in enumerate(by_path):
                rank[k] = position
            self.state.append(state)
            self.slices.append(slices)
            self.children.append(kids)
            self.rank.append(rank)
            self.labelled.append([d.labelled for d in domains])

    def sorted(self, level: int, domains: Iterable[int], *, least_free: bool) -> list[int]:
        """Return ``domains`` in Kueue's ``sortedDomains`` order.

        BestFit: slices descending; LeastFreeCapacity: slices ascending; then pods ascending,
        then label values.
        """
        slices, state, rank = self.slices[level], self.state[level], self.rank[level]
        sign = 1 if least_free else -1
        return sorted(domains, key=lambda k: (sign * slices[k], state[k], rank[k]))


def _best_fit(values: Sequence[int], order: Sequence[int], needed: int) -> int:
    """Return Kueue's ``findBestFitDomainBy``: the first of the smallest >= ``needed``.

    The first domain of ``order`` if none fits (it has the most room).
    """
    best = order[0]
    for k in order:
        if needed <= values[k] < values[best]:
            best = k
    return best


def _counts_to_minimum(
    values: Sequence[int], order: Sequence[int], needed: int, *, least_free: bool
) -> list[Pick]:
    """Return Kueue's ``updateCountsToMinimumGeneric`` (no leaders): ``needed`` taken in order.

    BestFit swaps the domain that would finish the count for the best fit among those left;
    LeastFreeCapacity takes them as they come. ValueError if ``order`` cannot cover ``needed``.
    """
    result: list[Pick] = []
    remaining = needed
    for position, index in enumerate(order):
        chosen = index
        if not least_free and values[chosen] >= remaining:
            chosen = _best_fit(values, order[position:], remaining)
        if values[chosen] >= remaining:
            result.append((chosen, remaining))
            return result
        if values[chosen]:
            result.append((chosen, values[chosen]))
        remaining -= values[chosen]
    raise ValueError(f"cannot cover {needed}: {remaining} left")


def _kueue_fit_level(tree: _KueueTree, level: int, ask: _KueueAsk) -> tuple[int, list[int]] | None:
    """Return (level, domains in order) per Kueue's ``findLevelWithFitDomains``, or None.

    One domain that holds every slice (BestFit: the tightest; LeastFreeCapacity: the first in
    ascending order); else ``preferred`` climbs a level, ``required`` fails, and at the top (or
    for ``unconstrained``, at its level) the slices are spread greedily over the sorted domains.
    Nodes outside the labelled fabric only take part in that spread.
    """
    slices = tree.slices[level]
    order = tree.sorted(level, range(len(slices)), least_free=ask.least_free)
    fitting = [k for k in order if tree.labelled[level][k] and slices[k] >= ask.slices]
    if fitting:
        if ask.least_free:
            return level, [fitting[0]]
        labelled = [k for k in order if tree.labelled[level][k]]
        return level, [_best_fit(slices, labelled, ask.slices)]
    if ask.required:
        return None
    if level < tree.top and not ask.least_free:
        return _kueue_fit_level(tree, level + 1, ask)
    picks: list[int] = []
    remaining = ask.slices
    for position, index in enumerate(order):
        if remaining <= 0:
            break
        chosen = index
        if not ask.least_free and slices[chosen] >= remaining:
            chosen = _best_fit(slices, order[position:], remaining)
        picks.append(chosen)
        remaining -= slices[chosen]
    return (level, picks) if remaining <= 0 else None


def _kueue_nodes(tree: _KueueTree, ask: _KueueAsk) -> list[Pick] | None:
    """Return (node, pods) per Kueue's ``findTopologyAssignment`` (phases 2a and 2b), or None.

    Above the slice level the slices go to the sorted children of every chosen domain together;
    from the slice level down each domain's pods go to its own children, pod by pod.
    """
    found = _kueue_fit_level(tree, ask.level, ask)
    if found is None:
        return None
    level, domains = found
    size, free = ask.slice_size, ask.least_free
    picks = [
        (k, n * size)
        for k, n in _counts_to_minimum(tree.slices[level], domains, ask.slices, least_free=free)
    ]
    while level > 0:
        kids = tree.children[level]
        below = level - 1
        if level > ask.slice_level:
            lower = tree.sorted(below, (c for k, _ in picks for c in kids[k]), least_free=free)
            counted = _counts_to_minimum(tree.slices[below], lower, ask.slices, least_free=free)
            picks = [(k, n * size) for k, n in counted]
        else:
            picks = [
                pick
                for k, pods in picks
                for pick in _counts_to_minimum(
                    tree.state[below],
                    tree.sorted(below, kids[k], least_free=free),
                    pods,
                    least_free=free,
                )
            ]
        level = below
    return picks


def _kueue_ask(
    snapshot: CapacitySnapshot, request: GangRequest, *, unconstrained: bool
) -> _KueueAsk:
    """Return the Kueue request a user would write for ``request``.

    A tensor-parallel group of several workers is a slice (``podset-slice-size``) required on one
    node when its GPUs fit one (NVLink), else in one leaf domain. ``unconstrained`` is Kueue's
    ``podset-unconstrained-topology`` (LeastFreeCapacity, the TASProfileMixed default since
    Kueue 0.15); otherwise the request's level, ``required`` or ``preferred``.
    """
    topology = snapshot.topology
    size = max(1, request.workers_per_tp_group)
    node_gpus = max(snapshot.alloc_gpus, default=0)
    slice_level = 0 if size == 1 or request.tp_size <= node_gpus else 1
    if unconstrained:
        level = topology.cluster_depth if size > 1 else 0
    else:
        level = min(policy_depth(topology, request.policy), topology.cluster_depth - 1) + 1
    return _KueueAsk(
        slices=request.workers // size,
        slice_size=size,
        slice_level=slice_level,
        level=max(level, slice_level),
        required=request.policy.mode == "required" and not unconstrained,
        least_free=unconstrained,
    )


def kueue_bestfit(
    snapshot: CapacitySnapshot,
    request: GangRequest,
    *,
    waited_seconds: float = 0.0,
    cost_config: CostModelConfig = DEFAULT_COST,
    unconstrained: bool = False,
) -> GangPlan | Unschedulable:
    """Return Kueue TAS's placement for ``request``, or Unschedulable.

    BestFit for its ``required``/``preferred`` policy; with ``unconstrained``, Kueue's
    ``podset-unconstrained-topology`` (LeastFreeCapacity). Tensor-parallel groups of several
    workers are asked as slices (see :func:`_kueue_ask`).
    """
    del waited_seconds
    topology = snapshot.topology
    name = "kueue_unconstrained" if unconstrained else "kueue_bestfit"
    slots = worker_slots(snapshot, request, use_degraded=True)
    ask = _kueue_ask(snapshot, request, unconstrained=unconstrained)
    picks = _kueue_nodes(_KueueTree(topology, slots, ask), ask)
    if picks is None:
        top = topology.cluster_depth - 1
        return explain_unschedulable(
            snapshot,
            request,
            slots,
            max_depth=ask.level - 1 if ask.required else top,
            waited_seconds=0.0,
            policy_name=name,
        )
    profile = "LeastFreeCapacity" if unconstrained else "BestFit"
    reasons = [f"Kueue TAS {profile}"]
    if ask.slice_size > 1:
        where = "node" if ask.slice_level == 0 else "leaf domain"
        reasons.append(f"slices of {ask.slice_size} workers, each in one {where}")
    return assemble_plan(
        snapshot, request, order_ranks(picks), policy=name, reasons=reasons, cost_config=cost_config
    )


kueue_unconstrained: Placer = functools.partial(kueue_bestfit, unconstrained=True)
"""Kueue TAS's placement of an ``unconstrained`` request (LeastFreeCapacity)."""


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
    "kueue_unconstrained": kueue_unconstrained,
    "optimal": optimal,
}
"""Every placer by the name the benchmark reports it under."""
