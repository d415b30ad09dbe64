"""A cost *model* of all-reduce for a placement: for scoring and explanation, never a measurement.

Every worker first reduces over NVLink inside its node (``gpus_per_worker`` GPUs), then the
workers run a ring (or a double binary tree) across the fabric, one per rail in parallel, each rail
carrying ``message_bytes / gpus_per_worker``. Per step a ring waits for its slowest edge, so the
latency term uses the worst edge and the bandwidth term the narrowest one:

- ring: ``2 (W-1) * alpha_max + 2 (W-1)/W * D / B_min``
- tree: ``2 ceil(log2 W) * alpha_max + 2 D / B_min``

with ``alpha = endpoint_latency + hops * hop_latency`` and an edge's bandwidth the rail link
bandwidth divided by the oversubscription of the highest level it crosses, reduced by the
background load assumed there, scaled by ``degraded_bandwidth_factor`` at a degraded endpoint,
and shared when more of this gang's ring edges leave one leaf than it has uplinks. Defaults are
public figures (NDR InfiniBand 400 Gb/s per rail, ~1 µs-class switch hops, NVLink 4 at 450 GB/s
per direction); every one is configurable.

**Uplinks.** Every domain below the cluster root has an uplink to the tier above it, carrying
``nodes x rails x (1 - background_load) / oversubscription`` flows at full link rate (the
figures of the level above it). :class:`UplinkLoad` is how busy each one is with the traffic of
running jobs (flows over capacity): the planner's optional input for steering a gang that must
span domains away from saturated uplinks. This module must never time anything or do I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from tpfabric_core.placement.results import CollectiveCost
from tpfabric_core.placement.topology import ClusterTopology

__all__ = [
    "CostModelConfig",
    "UplinkLoad",
    "edge_hops",
    "edge_uplinks",
    "modelled_allreduce",
    "modelled_allreduce_by_index",
    "ring_flows_per_edge",
    "uplink_capacity",
]


class CostModelConfig(BaseModel):
    """Parameters of the all-reduce cost model (a model for scoring, not a measurement)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    link_gbps: float = Field(400.0, gt=0, description="rail link bandwidth, Gb/s (NDR: 400)")
    hop_latency_s: float = Field(1.0e-6, ge=0, description="per switch traversed (~1 µs class)")
    endpoint_latency_s: float = Field(2.0e-6, ge=0, description="NIC, PCIe and software per step")
    nvlink_gbytes_per_s: float = Field(450.0, gt=0, description="per GPU per direction, GB/s")
    nvlink_latency_s: float = Field(0.5e-6, ge=0, description="per NVLink step")
    oversubscription: Mapping[str, float] = Field(
        default_factory=lambda: {"spine": 1.0, "block": 2.0, "cluster": 4.0},
        description="uplink oversubscription by the highest level a path crosses (1.0 = none)",
    )
    background_load: Mapping[str, float] = Field(
        default_factory=lambda: {"spine": 0.1, "block": 0.25, "cluster": 0.4},
        description="fraction of uplink bandwidth assumed taken by other jobs, by level crossed",
    )
    degraded_bandwidth_factor: float = Field(
        0.5, gt=0, le=1, description="bandwidth left on an edge with a degraded endpoint"
    )
    message_bytes: int = Field(16 * 2**20, gt=0, description="all-reduce payload per GPU, bytes")


DEFAULT_COST = CostModelConfig()


def edge_hops(topology: ClusterTopology, a: int, b: int) -> int:
    """Return the switch hops between node indices ``a`` and ``b`` on one rail (0: same node).

    Under one leaf domain it is 1 if both nodes' rails plug into the same rail leaves, else 3
    (the traffic of a miscabled rail goes up to a spine); above, ``2 * depth + 1``.
    """
    if a == b:
        return 0
    depth = topology.common_depth(a, b)
    if depth == 0:
        same_rails = topology.rail_switches[a] == topology.rail_switches[b]
        return 1 if same_rails else 3
    return 2 * depth + 1


def edge_uplinks(topology: ClusterTopology, a: int, b: int) -> list[tuple[int, int]]:
    """Return the (depth, domain index) uplinks a flow from node ``a`` to ``b`` climbs.

    Those on ``a``'s side, lowest first; empty when both share a leaf domain. The flow comes
    down the uplinks of ``edge_uplinks(topology, b, a)``.
    """
    depth = topology.common_depth(a, b)
    return [(d, topology.node_domain[d][a]) for d in range(min(depth, topology.cluster_depth))]


def uplink_capacity(
    topology: ClusterTopology, depth: int, index: int, config: CostModelConfig = DEFAULT_COST
) -> float:
    """Return how many full-rate flows the uplink of domain ``index`` at ``depth`` carries.

    ``nodes x rails x (1 - background) / oversubscription`` with the figures of the level above
    (the tier the uplink goes to); at least one flow.
    """
    level = topology.level_names[depth + 1]
    size = topology.domains[depth][index].size
    rails = max(1, topology.rails)
    share = (1.0 - config.background_load.get(level, 0.0)) / config.oversubscription.get(level, 1.0)
    return max(1.0, size * rails * share)


def ring_flows_per_edge(topology: ClusterTopology, gpus_per_worker: int) -> float:
    """Return the full-rate flows one edge of a gang's ring sends: one per rail it uses."""
    return float(max(1, min(gpus_per_worker, topology.rails or gpus_per_worker)))


@dataclass(frozen=True, slots=True)
class UplinkLoad:
    """How busy every domain's uplink is with running jobs' traffic: flows over capacity.

    ``per_depth[d][k]`` belongs to domain ``k`` of depth ``d`` (0: leaf) for every depth below the
    cluster root: 0 idle, 1 saturated, above 1 oversubscribed (its flows fair-share it). A live
    caller builds it from the plans of running gangs (:meth:`from_flows` of the flows their
    collectives send across, e.g. one ring per rail in rank order: :func:`edge_uplinks` per edge).
    """

    per_depth: tuple[tuple[float, ...], ...]

    @classmethod
    def from_flows(
        cls,
        topology: ClusterTopology,
        flows: Mapping[tuple[int, int], float],
        config: CostModelConfig = DEFAULT_COST,
    ) -> UplinkLoad:
        """Return the load of ``flows`` ((depth, domain index) -> full-rate flows)."""
        return cls(
            tuple(
                tuple(
                    flows.get((depth, k), 0.0) / uplink_capacity(topology, depth, k, config)
                    for k in range(len(topology.domains[depth]))
                )
                for depth in range(topology.cluster_depth)
            )
        )

    def after_adding(
        self,
        topology: ClusterTopology,
        depth: int,
        index: int,
        flows: float,
        config: CostModelConfig = DEFAULT_COST,
    ) -> float:
        """Return the load of that uplink once ``flows`` more full-rate flows cross it."""
        capacity = uplink_capacity(topology, depth, index, config)
        return self.per_depth[depth][index] + flows / capacity


def modelled_allreduce(
    topology: ClusterTopology,
    nodes_by_rank: Sequence[str],
    gpus_per_worker: int,
    *,
    degraded: frozenset[str] = frozenset(),
    config: CostModelConfig = DEFAULT_COST,
    as_one_leaf: bool = False,
) -> CollectiveCost:
    """Return the modelled all-reduce time of workers placed on ``nodes_by_rank`` (ring order).

    ``as_one_leaf`` models the same gang with every cross-node edge one healthy leaf hop apart:
    the reference a placement is compared with.
    """
    index_of = topology.index_of
    return modelled_allreduce_by_index(
        topology,
        [index_of[name] for name in nodes_by_rank],
        gpus_per_worker,
        degraded=frozenset(index_of[name] for name in degraded),
        config=config,
        as_one_leaf=as_one_leaf,
    )


def modelled_allreduce_by_index(
    topology: ClusterTopology,
    ranks: Sequence[int],
    gpus_per_worker: int,
    *,
    degraded: frozenset[int] = frozenset(),
    config: CostModelConfig = DEFAULT_COST,
    as_one_leaf: bool = False,
) -> CollectiveCost:
    """Return :func:`modelled_allreduce` for node indices (the engine's hot path)."""
    message = config.message_bytes
    g = gpus_per_worker
    nvlink_bps = config.nvlink_gbytes_per_s * 8e9
    intra = 0.0
    if g > 1:
        intra = 2 * (g - 1) / g * message * 8 / nvlink_bps + 2 * (g - 1) * config.nvlink_latency_s
    workers = len(ranks)
    if workers < 2:
        return CollectiveCost(ring_s=intra, tree_s=intra, message_bytes=message)
    link_bps = config.link_gbps * 1e9
    # After the NVLink reduce-scatter each GPU owns 1/g of the data and uses its own rail; with
    # fewer rails than GPUs the rails carry several shares.
    rails = max(1, min(g, topology.rails or g))
    per_rail_bits = message * 8 / rails
    alpha_max = 0.0
    bw_min = math.inf
    leaving: dict[int, int] = {}
    edges: list[tuple[int, int, int]] = []
    for k, a in enumerate(ranks):
        b = ranks[(k + 1) % workers]
        if a == b:
            alpha_max = max(alpha_max, config.nvlink_latency_s)
            bw_min = min(bw_min, nvlink_bps)
            continue
        depth = 0 if as_one_leaf else topology.common_depth(a, b)
        hops = 1 if as_one_leaf else edge_hops(topology, a, b)
        edges.append((a, b, depth))
        if depth > 0:
            leaf = topology.node_domain[0][a]
            leaving[leaf] = leaving.get(leaf, 0) + 1
        alpha_max = max(alpha_max, config.endpoint_latency_s + hops * config.hop_latency_s)
    level_names = topology.level_names
    leaves = topology.domains[0]
    for a, b, depth in edges:
        bandwidth = link_bps
        if depth > 0:
            level = level_names[depth]
            oversub = config.oversubscription.get(level, 1.0)
            bandwidth = bandwidth / oversub * (1.0 - config.background_load.get(level, 0.0))
            leaf = topology.node_domain[0][a]
            uplinks = max(1, int(leaves[leaf].size / config.oversubscription.get("spine", 1.0)))
            bandwidth /= max(1.0, leaving[leaf] / uplinks)
        if not as_one_leaf and (a in degraded or b in degraded):
            bandwidth *= config.degraded_bandwidth_factor
        bw_min = min(bw_min, bandwidth)
    if math.isinf(bw_min):  # every edge inside one node
        bw_min = nvlink_bps
    ring = 2 * (workers - 1) * alpha_max + 2 * (workers - 1) / workers * per_rail_bits / bw_min
    tree = 2 * math.ceil(math.log2(workers)) * alpha_max + 2 * per_rail_bits / bw_min
    return CollectiveCost(ring_s=intra + ring, tree_s=intra + tree, message_bytes=message)
