"""How many workers of one gang each node and domain can take, and why a domain falls short.

Shared by the planner, the replacement planner and the baselines. Costs: :func:`worker_slots` is
one pass over the snapshot's flat lists (O(n), no sort); a domain's free count is the sum of one
slice; :func:`fill_domain` sorts only the children of the domains it descends into. This module
must never decide which domain a gang goes to.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.results import DomainShortfall, ShortfallKind, ShortfallReason
from tpfabric_core.placement.snapshot import CapacitySnapshot, untolerated_taint
from tpfabric_core.placement.topology import ClusterTopology, Domain

Pick = tuple[int, int]
"""(index, workers): a node or child domain and how many workers go there."""


def worker_slots(
    snapshot: CapacitySnapshot, request: GangRequest, *, use_degraded: bool
) -> list[int]:
    """Return per node index how many workers of ``request`` it can take now.

    Not ready, cordoned and untolerated-taint nodes take none; degraded nodes (and, for a
    rail-aligned policy, nodes with a rail cabling anomaly) take none unless ``use_degraded``.
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
    tolerations = request.tolerations
    for i, taints in snapshot.taints.items():
        if slots[i] and untolerated_taint(taints, tolerations) is not None:
            slots[i] = 0
    if not use_degraded:
        for i in degraded_indices(snapshot, request):
            slots[i] = 0
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


def pick_fewest(items: Sequence[tuple[int, int, int]], count: int, quantum: int = 1) -> list[Pick]:
    """Return (index, workers) picks covering ``count`` from ``(index, capacity, penalty)`` items.

    Fewest items first (largest capacity first, penalised items last), and best fit for the last
    one: the smallest capacity that still covers what remains, so larger items stay whole. With a
    ``quantum`` (workers per tensor-parallel group) capacities are rounded down to whole groups
    when that still covers ``count``, so no group is split across items.
    """
    usable = [item for item in items if item[1] > 0]
    if quantum > 1 and count % quantum == 0:
        rounded = [(i, cap - cap % quantum, pen) for i, cap, pen in usable]
        if sum(cap for _, cap, _ in rounded) >= count:
            usable = [item for item in rounded if item[1] > 0]
    ordered = sorted(usable, key=lambda item: (item[2], -item[1], item[0]))
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
) -> list[Pick]:
    """Return (node index, workers) picks placing ``count`` workers inside ``domain``.

    Descends level by level with :func:`pick_fewest`: as few child domains as possible, the last
    one best-fit; at the nodes, ``penalty`` (degraded) nodes go last.
    """
    if domain.depth == 0:
        nodes = [
            (i, slots[i], 1 if penalty is not None and penalty[i] else 0)
            for i in range(domain.start, domain.end)
        ]
        return pick_fewest(nodes, count, quantum)
    below = topology.domains[domain.depth - 1]
    children = [(c, sum(slots[below[c].start : below[c].end]), 0) for c in domain.children]
    picks: list[Pick] = []
    for child, workers in pick_fewest(children, count, quantum):
        picks.extend(
            fill_domain(topology, slots, below[child], workers, quantum=quantum, penalty=penalty)
        )
    return picks


def explain_shortfall(
    snapshot: CapacitySnapshot,
    request: GangRequest,
    domain: Domain,
    slots: Sequence[int],
    *,
    use_degraded: bool,
) -> DomainShortfall:
    """Return how many workers fit in ``domain`` and, per cause, the nodes that add none."""
    topology = snapshot.topology
    counts: Counter[ShortfallKind] = Counter()
    taints: Counter[str] = Counter()
    rail_aware = request.policy.rail_aligned
    tolerations = request.tolerations
    for i in range(domain.start, domain.end):
        if slots[i]:
            continue
        if not snapshot.ready[i]:
            counts["not_ready"] += 1
        elif not snapshot.schedulable[i]:
            counts["cordoned"] += 1
        elif (taint := untolerated_taint(snapshot.taints.get(i, ()), tolerations)) is not None:
            counts["taint"] += 1
            taints[str(taint)] += 1
        elif not use_degraded and snapshot.degraded[i]:
            counts["health"] += 1
        elif not use_degraded and rail_aware and topology.rail_anomaly[i]:
            counts["rail"] += 1
        else:
            counts["capacity"] += 1
    need = f"{request.gpus_per_worker} free GPUs"
    if request.rdma_per_worker:
        need += f" and {request.rdma_per_worker} RDMA devices"
    details: dict[ShortfallKind, str] = {
        "capacity": f"node(s) without {need}",
        "not_ready": "node(s) not ready",
        "cordoned": "node(s) cordoned",
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
    return DomainShortfall(
        level=domain.level,
        domain=domain.name,
        workers_fit=sum(slots[domain.start : domain.end]),
        workers_needed=request.workers,
        reasons=tuple(reasons),
    )
