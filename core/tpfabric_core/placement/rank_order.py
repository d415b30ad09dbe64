"""Topology-aware rank order: which worker rank goes to which of the chosen nodes.

Ranks follow the hierarchical node order (block, spine, leaf, node), workers of one node get
consecutive ranks. Consequences, with Megatron-style rank layout (tensor-parallel fastest,
pipeline stage slowest):

- a tensor-parallel group (consecutive ranks) stays on one node or one leaf whenever the chosen
  counts allow it (the planner picks whole groups per leaf when it can);
- ring neighbours are adjacent in the fabric: the ring leaves each leaf domain exactly once;
- a pipeline stage (a contiguous block of ranks) crosses a domain boundary only where the
  placement itself does.

This module must never choose nodes; it only orders the ones it is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.topology import ClusterTopology

__all__ = ["order_ranks", "straddling_groups"]


def order_ranks(picks: Iterable[tuple[int, int]]) -> list[int]:
    """Return node indices by rank for ``(node index, workers)`` picks, in hierarchical order."""
    merged: dict[int, int] = {}
    for node, workers in picks:
        merged[node] = merged.get(node, 0) + workers
    ranks: list[int] = []
    for node in sorted(merged):
        ranks.extend([node] * merged[node])
    return ranks


def straddling_groups(
    topology: ClusterTopology, ranks: Sequence[int], group_size: int
) -> tuple[int, int]:
    """Return (groups spanning more than one leaf domain, groups) for consecutive-rank groups."""
    if group_size <= 1:
        return 0, len(ranks)
    leaf_of = topology.node_domain[0]
    groups = 0
    straddling = 0
    for start in range(0, len(ranks), group_size):
        groups += 1
        if len({leaf_of[i] for i in ranks[start : start + group_size]}) > 1:
            straddling += 1
    return straddling, groups


def describe_rank_order(
    topology: ClusterTopology, ranks: Sequence[int], request: GangRequest
) -> str:
    """Return one line on how tensor-parallel groups and pipeline stages sit on the leaves."""
    tp_split, tp_groups = straddling_groups(topology, ranks, request.workers_per_tp_group)
    parts = []
    if request.workers_per_tp_group > 1:
        parts.append(
            f"{tp_groups - tp_split}/{tp_groups} tensor-parallel groups inside one leaf domain"
        )
    else:
        parts.append(f"tensor-parallel groups of {request.tp_size} GPUs inside one node (NVLink)")
    if request.pp_size > 1:
        pp_split, stages = straddling_groups(topology, ranks, request.workers_per_stage)
        parts.append(f"{stages - pp_split}/{stages} pipeline stages inside one leaf domain")
    leaves = len({topology.node_domain[0][i] for i in ranks})
    parts.append(f"ring crosses {leaves if leaves > 1 else 0} leaf boundaries")
    return "rank order: " + ", ".join(parts)
