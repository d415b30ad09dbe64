"""How many workers of one gang each node and domain can take, and why a domain falls short.

Shared by the planner, the replacement planner and the baselines. A node's worker slots are the
minimum over every demanded resource (GPUs, RDMA devices, CPU, memory, pod slots, extended
resources) of free // demand, and zero where the node is not ready, cordoned, tainted against
the gang, outside the pod's node selector/affinity, or (unless allowed) degraded. Where the
topology keeps tensor-parallel groups whole (an NVLink level, ``tp_group_depth``), a domain of
that level or above only counts whole groups.

Costs: :func:`worker_slots` is one pass over the snapshot's flat lists per demanded resource
(O(n), no sort); a domain's free count is the sum of one slice; :func:`fill_domain` sorts only
the children of the domains it descends into. This module must never decide which domain a gang
goes to.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from tpfabric_core.placement.pod_fit import format_amount
from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.results import DomainShortfall, ShortfallKind, ShortfallReason
from tpfabric_core.placement.snapshot import CapacitySnapshot, untolerated_taint
from tpfabric_core.placement.topology import ClusterTopology, Domain

Pick = tuple[int, int]
"""(index, workers): a node or child domain and how many workers go there."""


def eligible_mask(
    topology: ClusterTopology, request: GangRequest, *, now: bool = True
) -> list[bool] | None:
    """Return per node index whether the request's pods may go there; None when all may.

    ``now``: also leave out the nodes kube-scheduler refused for the gang lately (they may take
    it again later, so what the gang could ever use counts them).
    """
    eligible = request.eligible_nodes
    refused = request.refused_nodes if now else frozenset()
    if eligible is None and not refused:
        return None
    return [
        (eligible is None or name in eligible) and name not in refused
        for name in topology.node_names
    ]


def worker_slots(
    snapshot: CapacitySnapshot, request: GangRequest, *, use_degraded: bool
) -> list[int]:
    """Return per node index how many workers of ``request`` it can take now.

    The minimum over GPUs, RDMA devices and every other demanded resource of free // demand (a
    node without a demanded resource takes none). Not ready, cordoned, untolerated-taint and
    ineligible nodes take none; degraded nodes (and, for a rail-aligned policy, nodes with a
    rail cabling anomaly) take none unless ``use_degraded``.
    """
    g = request.gpus_per_worker
    r = request.rdma_per_worker
    ok = [a and b for a, b in zip(snapshot.ready, snapshot.schedulable, strict=True)]
    if r:
        slots = [
            max(0, min(fg // g, fr // r)) if usable else 0
            for fg, fr, usable in zip(snapshot.free_gpus, snapshot.free_rdma, ok, strict=True)
        ]
    else:
        slots = [
            max(0, fg // g) if usable else 0
            for fg, usable in zip(snapshot.free_gpus, ok, strict=True)
        ]
    for resource, demand in request.other_resources:
        if demand <= 0:
            continue
        free = snapshot.free_other.get(resource)
        if free is None:
            return [0] * len(slots)
        slots = [
            min(s, f // demand) if s > 0 and f > 0 else 0 for s, f in zip(slots, free, strict=True)
        ]
    mask = eligible_mask(snapshot.topology, request)
    if mask is not None:
        slots = [s if allowed else 0 for s, allowed in zip(slots, mask, strict=True)]
    if request.max_workers_per_node is not None:
        cap = request.max_workers_per_node
        slots = [min(s, cap) for s in slots]
    tolerations = request.tolerations
    for i, taints in snapshot.taints.items():
        if slots[i] and untolerated_taint(taints, tolerations) is not None:
            slots[i] = 0
    if not use_degraded:
        for i in degraded_indices(snapshot, request):
            slots[i] = 0
    return slots


def ever_slots(snapshot: CapacitySnapshot, request: GangRequest) -> list[int]:
    """Return per node index how many workers it could ever take: allocatable GPUs and RDMA.

    Current use, readiness, cordons, taints and health are ignored (they change); nodes the
    pod's node selector/affinity exclude take none (that does not change for this gang).
    """
    g = request.gpus_per_worker
    r = request.rdma_per_worker
    if r:
        slots = [
            max(0, min(ag // g, ar // r))
            for ag, ar in zip(snapshot.alloc_gpus, snapshot.alloc_rdma, strict=True)
        ]
    else:
        slots = [max(0, ag // g) for ag in snapshot.alloc_gpus]
    mask = eligible_mask(snapshot.topology, request, now=False)
    if mask is not None:
        slots = [s if allowed else 0 for s, allowed in zip(slots, mask, strict=True)]
    if request.max_workers_per_node is not None:
        cap = request.max_workers_per_node
        slots = [min(s, cap) for s in slots]
    return slots


def degraded_indices(snapshot: CapacitySnapshot, request: GangRequest) -> list[int]:
    """Return the node indices that count as degraded for ``request`` (health, rail anomaly)."""
    bad = [i for i, flag in enumerate(snapshot.degraded) if flag]
    if request.policy.rail_aligned:
        anomaly = snapshot.topology.rail_anomaly
        bad.extend(i for i, flag in enumerate(anomaly) if flag and not snapshot.degraded[i])
    return bad


def domain_free(slots: Sequence[int], domains: Sequence[Domain]) -> list[int]:
    """Return per domain the sum of ``slots`` over its nodes."""
    return [sum(slots[d.start : d.end]) for d in domains]


def group_depth(topology: ClusterTopology, quantum: int) -> int | None:
    """Return the depth at and above which domains count whole tensor-parallel groups only."""
    return topology.tp_group_depth if quantum > 1 else None


def level_free(
    topology: ClusterTopology, slots: Sequence[int], *, quantum: int, up_to: int
) -> list[list[int]]:
    """Return per depth ``0..up_to`` the workers every domain can hold.

    At the topology's tensor-parallel group depth and above, only whole groups of ``quantum``
    workers per domain of that depth count (an NVLink domain never shares a group).
    """
    keep = group_depth(topology, quantum)
    free = domain_free(slots, topology.domains[0])
    if keep == 0:
        free = [f - f % quantum for f in free]
    result = [free]
    for depth in range(1, up_to + 1):
        below = result[-1]
        free = [sum(below[c] for c in d.children) for d in topology.domains[depth]]
        if keep == depth:
            free = [f - f % quantum for f in free]
        result.append(free)
    return result


def domain_capacity(
    topology: ClusterTopology, slots: Sequence[int], domain: Domain, quantum: int
) -> int:
    """Return the workers ``domain`` can hold (whole groups per group-keeping domain)."""
    keep = group_depth(topology, quantum)
    if keep is None or domain.depth < keep:
        return sum(slots[domain.start : domain.end])
    per_node = topology.node_domain[keep]
    inner = topology.domains[keep]
    total = 0
    for index in range(per_node[domain.start], per_node[domain.end - 1] + 1):
        sub = inner[index]
        free = sum(slots[sub.start : sub.end])
        total += free - free % quantum
    return total


def pick_fewest(
    items: Sequence[tuple[int, int, int]],
    count: int,
    quantum: int = 1,
    *,
    strict: bool = False,
    pieces_first: bool = False,
) -> list[Pick]:
    """Return (index, workers) picks covering ``count`` from ``(index, capacity, penalty)`` items.

    As soon as one item covers what remains, the best fit for it: the smallest capacity that
    still covers it, so larger items stay whole. Until then whole items in order (penalised
    items last): largest capacity first (fewest items), or with ``pieces_first`` smallest first,
    so a gang that must span items uses up the pieces too small for anything else before it cuts
    into whole ones (more items, less stranded capacity). With a
    ``quantum`` (workers per tensor-parallel group) capacities are rounded down to whole groups
    when that still covers ``count``, so no group is split across items; with ``strict`` always
    (ValueError when whole groups cannot cover ``count``).
    """
    usable = [item for item in items if item[1] > 0]
    if quantum > 1 and (strict or count % quantum == 0):
        rounded = [(i, cap - cap % quantum, pen) for i, cap, pen in usable]
        if strict or sum(cap for _, cap, _ in rounded) >= count:
            usable = [item for item in rounded if item[1] > 0]
    sign = 1 if pieces_first else -1
    ordered = sorted(usable, key=lambda item: (item[2], sign * item[1], item[0]))
    picks: list[Pick] = []
    remaining = count
    position = 0
    while remaining > 0:
        best: tuple[int, int, int] | None = None
        for item in ordered[position:]:
            if item[1] >= remaining and (
                best is None or (item[2], item[1], item[0]) < (best[2], best[1], best[0])
            ):
                best = item
        if best is not None:
            picks.append((best[0], remaining))
            return picks
        if position >= len(ordered):
            raise ValueError(f"cannot cover {count} workers: only {count - remaining} free")
        index, capacity, _ = ordered[position]
        position += 1
        picks.append((index, capacity))
        remaining -= capacity
    return picks


def fill_domain(
    topology: ClusterTopology,
    slots: Sequence[int],
    domain: Domain,
    count: int,
    *,
    quantum: int = 1,
    penalty: Sequence[bool] | None = None,
    avoid_child: Callable[[Domain], bool] | None = None,
    pieces_first: bool = False,
    prefer: frozenset[int] = frozenset(),
) -> list[Pick]:
    """Return (node index, workers) picks placing ``count`` workers inside ``domain``.

    Descends level by level with :func:`pick_fewest`: as few child domains as possible (or,
    with ``pieces_first``, the smallest pieces first), the last one best-fit, children
    ``avoid_child`` flags (e.g. a saturated uplink) after the others and children outside the
    labelled fabric last; at the nodes, ``penalty`` (degraded) nodes go last. Into children of
    the group-keeping depth or above, only whole tensor-parallel groups go. ``prefer``: node
    indices to use first (where the gang ran before), each rule above still coming first.
    """
    if domain.depth == 0:
        nodes = [
            (
                i,
                slots[i],
                (1 if penalty is not None and penalty[i] else 0) * 2
                + (0 if not prefer or i in prefer else 1),
            )
            for i in range(domain.start, domain.end)
        ]
        return pick_fewest(nodes, count, quantum, pieces_first=pieces_first)
    below = topology.domains[domain.depth - 1]
    keep = group_depth(topology, quantum)
    strict = keep is not None and domain.depth - 1 >= keep
    children = [
        (
            c,
            domain_capacity(topology, slots, below[c], quantum)
            if strict
            else sum(slots[below[c].start : below[c].end]),
            child_penalty(below[c], avoid_child) * 2
            + (0 if not prefer or _holds(below[c], prefer) else 1),
        )
        for c in domain.children
    ]
    picks: list[Pick] = []
    chosen = pick_fewest(children, count, quantum, strict=strict, pieces_first=pieces_first)
    for child, workers in chosen:
        picks.extend(
            fill_domain(
                topology,
                slots,
                below[child],
                workers,
                quantum=quantum,
                penalty=penalty,
                avoid_child=avoid_child,
                pieces_first=pieces_first,
                prefer=prefer,
            )
        )
    return picks


def _holds(domain: Domain, nodes: frozenset[int]) -> bool:
    return any(domain.start <= i < domain.end for i in nodes)


def child_penalty(child: Domain, avoid_child: Callable[[Domain], bool] | None) -> int:
    """Return 0 for a plain child domain, 1 for one ``avoid_child`` flags, 2 outside the fabric."""
    if not child.labelled:
        return 2
    return 1 if avoid_child is not None and avoid_child(child) else 0


_SHORT_OF = {"pods": "pod slots"}

_OtherDemand = tuple[str, int, list[int] | None]


def _short_resources(
    snapshot: CapacitySnapshot, request: GangRequest, others: Sequence[_OtherDemand], i: int
) -> list[str]:
    """Return the resources node ``i`` has too little of for one worker."""
    short = []
    if snapshot.free_gpus[i] < request.gpus_per_worker:
        short.append("GPUs")
    if request.rdma_per_worker and snapshot.free_rdma[i] < request.rdma_per_worker:
        short.append("RDMA devices")
    for resource, demand, free in others:
        if free is None or free[i] < demand:
            short.append(_SHORT_OF.get(resource, resource))
    return short


def _capacity_detail(
    request: GangRequest, others: Sequence[_OtherDemand], short: Counter[str]
) -> str:
    """Return e.g. ``node(s) without 8 free GPUs / 16 cpu (3 short of cpu)``."""
    needs = [f"{request.gpus_per_worker} free GPUs"]
    if request.rdma_per_worker:
        needs.append(f"{request.rdma_per_worker} RDMA devices")
    needs.extend(format_amount(resource, demand) for resource, demand, _ in others)
    detail = "node(s) without " + " / ".join(needs)
    if len(needs) > 1 and short:
        order = ["GPUs", "RDMA devices", *(_SHORT_OF.get(r, r) for r, _, _ in others)]
        detail += (
            " ("
            + ", ".join(f"{short[what]} short of {what}" for what in order if short[what])
            + ")"
        )
    return detail


def explain_shortfall(
    snapshot: CapacitySnapshot,
    request: GangRequest,
    domain: Domain,
    slots: Sequence[int],
    *,
    use_degraded: bool,
    workers_fit: int | None = None,
    workers_ever: int | None = None,
) -> DomainShortfall:
    """Return how many workers fit in ``domain`` and, per cause, the nodes that add none.

    ``workers_fit`` overrides the plain sum of ``slots`` (whole tensor-parallel groups only);
    the worker slots that rounding loses are a reason of their own. ``workers_ever``: how many
    the domain could ever hold (None: not known).
    """
    topology = snapshot.topology
    counts: Counter[ShortfallKind] = Counter()
    taints: Counter[str] = Counter()
    short: Counter[str] = Counter()
    rail_aware = request.policy.rail_aligned
    tolerations = request.tolerations
    eligible = request.eligible_nodes
    names = topology.node_names
    others: list[_OtherDemand] = [
        (resource, demand, snapshot.free_other.get(resource))
        for resource, demand in request.other_resources
        if demand > 0
    ]
    for i in range(domain.start, domain.end):
        if slots[i]:
            continue
        if not snapshot.ready[i]:
            counts["not_ready"] += 1
        elif not snapshot.schedulable[i]:
            counts["cordoned"] += 1
        elif eligible is not None and names[i] not in eligible:
            counts["selector"] += 1
        elif names[i] in request.refused_nodes:
            counts["refused"] += 1
        elif (taint := untolerated_taint(snapshot.taints.get(i, ()), tolerations)) is not None:
            counts["taint"] += 1
            taints[str(taint)] += 1
        elif not use_degraded and snapshot.degraded[i]:
            counts["health"] += 1
        elif not use_degraded and rail_aware and topology.rail_anomaly[i]:
            counts["rail"] += 1
        else:
            counts["capacity"] += 1
            short.update(_short_resources(snapshot, request, others, i))
    details: dict[ShortfallKind, str] = {
        "capacity": _capacity_detail(request, others, short),
        "not_ready": "node(s) not ready",
        "cordoned": "node(s) cordoned",
        "selector": "node(s) excluded by the pod's nodeSelector/affinity",
        "refused": "node(s) kube-scheduler's own filters refused for this gang lately "
        "(placement.refusedNodes)",
        "taint": "node(s) with untolerated taints ("
        + ", ".join(t for t, _ in sorted(taints.items())[:3])
        + ")",
        "health": "degraded node(s) avoided",
        "rail": "node(s) with rail cabling anomalies avoided",
    }
    reasons = [
        ShortfallReason(kind, counts[kind], detail)
        for kind, detail in details.items()
        if counts[kind]
    ]
    raw = sum(slots[domain.start : domain.end])
    fit = raw if workers_fit is None else workers_fit
    keep = group_depth(topology, request.workers_per_tp_group)
    if fit < raw and keep is not None:
        reasons.append(
            ShortfallReason(
                "level",
                0,
                f"{raw - fit} free worker slot(s) unusable: tensor-parallel groups of "
                f"{request.workers_per_tp_group} workers stay inside one "
                f"{topology.level_names[keep]} domain",
            )
        )
    return DomainShortfall(
        level=domain.level,
        domain=domain.name,
        workers_fit=fit,
        workers_needed=request.workers,
        reasons=tuple(reasons),
        workers_ever=workers_ever,
        path=domain.path,
    )
