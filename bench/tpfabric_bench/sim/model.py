"""A job's step time from its model shape and its placement: compute plus communication.

**Job.** A transformer of ``params_b`` billion parameters trained Megatron-style on ``workers x
gpus_per_worker`` GPUs with tensor parallelism ``tp``, pipeline parallelism ``pp`` and data
parallelism ``dp = GPUs / (tp x pp)``, ``micro_batches`` per step and data-parallel replica.
The hidden size follows from the parameter count (``params ~ 12 L h^2`` with
``h = hidden_per_layer x L``). Ranks are laid out tensor-parallel fastest, then data-parallel,
pipeline stage slowest (Megatron's order); GPU ``g`` is local GPU ``g % gpus_per_worker`` of the
worker of rank ``g // gpus_per_worker``, and uses that GPU's rail.

**Step.** ``compute + tp + pp + dp`` (communication is not overlapped with compute: the
pessimistic, simple case):

- compute: ``(m + pp - 1)`` micro-batch slots (1F1B, with its pipeline bubble), each
  ``6 x (params / pp) x tokens / tp`` FLOP at ``gpu_flops x compute_efficiency``;
- tensor parallel: ``tp_allreduces_per_layer`` ring all-reduces of one micro-batch's activations
  (``tokens x h x bytes``) per layer of the stage and micro-batch, over the GPUs of the group;
- pipeline parallel: a stage boundary sends activations forward and gradients back,
  ``2 x (m + pp - 1)`` transfers of ``activations / tp`` per GPU on the critical path;
- data parallel: one ring all-reduce of the GPU's gradients (``params / (tp x pp)`` values) over
  its data-parallel group.

A ring of ``k`` members takes ``2 (k-1) alpha + 2 (k-1)/k x bits / B`` with ``alpha`` its worst
edge's latency and ``B`` its narrowest edge's bandwidth (the cost model's formula). An edge
inside one node runs over NVLink; between nodes it runs over the rail link, at
``degraded_bandwidth_factor`` of it when an endpoint is degraded, and where it leaves a domain it
climbs that domain's uplink (and the other endpoint's on the way down): there it gets at most the
uplink's fair share, ``capacity / flows`` of the flows every running job sends across it
(:class:`~tpfabric_core.placement.cost.UplinkLoad`), if that is below the link rate. Each GPU's
edge of each ring and each stage-boundary transfer is one flow, and it loads the uplinks it
crosses for the fraction of the step its collective runs when uncontended (its duty cycle,
times ``flow_activity``): a fluid model of average load, in which collectives of different jobs
neither line up nor avoid each other.

**Not modelled.** Overlap of communication with compute, NCCL's choice of tree over ring, ECMP hash
collisions, memory limits, failures (links that degrade during a run are the engine's, see
:mod:`.faults`). This module must never read a clock or do I/O.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tpfabric_bench.sim.constants import DEFAULT_CONSTANTS, SimConstants
from tpfabric_core.placement import ClusterTopology
from tpfabric_core.placement.cost import edge_hops, edge_uplinks, uplink_capacity

__all__ = [
    "Collective",
    "JobTraffic",
    "ModelShape",
    "Uplink",
    "UplinkIndex",
    "ideal_traffic",
    "placed_traffic",
]

Uplink = tuple[int, int]
"""(depth, domain index): the uplink of that domain to the tier above."""


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What a job trains and how it is split: parameters, TP/PP sizes, micro-batches."""

    params_b: float
    tp: int
    pp: int
    micro_batches: int

    def hidden(self, constants: SimConstants = DEFAULT_CONSTANTS) -> int:
        """Return the hidden size: ``params = 12 L h^2`` with ``h = hidden_per_layer x L``."""
        h: float = math.cbrt(self.params_b * 1e9 * constants.hidden_per_layer / 12)
        return max(128, round(h / 128) * 128)

    def layers(self, constants: SimConstants = DEFAULT_CONSTANTS) -> int:
        """Return the layer count (at least one per pipeline stage)."""
        h = self.hidden(constants)
        return max(self.pp, round(self.params_b * 1e9 / (12 * h * h)))

    def data_parallel(self, gpus: int) -> int:
        """Return the data-parallel size on ``gpus`` GPUs (ValueError unless TP x PP divides)."""
        if gpus % (self.tp * self.pp):
            raise ValueError(f"tp x pp = {self.tp * self.pp} does not divide {gpus} GPUs")
        return gpus // (self.tp * self.pp)


@dataclass(frozen=True, slots=True)
class Collective:
    """One kind of communication of a job per step, reduced to what its time depends on.

    ``ring``: a ring all-reduce of ``members`` (else point-to-point transfers); ``rounds`` per
    step, ``bits`` per GPU each; ``alpha_s`` the worst edge latency; ``local_bps`` the narrowest
    edge bandwidth before uplinks (NVLink, link, health); ``uplinks`` every uplink an edge crosses
    with the flows this collective itself sends across it while it runs.
    """

    kind: str
    ring: bool
    members: int
    rounds: float
    bits: float
    alpha_s: float
    local_bps: float
    uplinks: tuple[tuple[Uplink, float], ...]

    def seconds(self, uplink_bps: float) -> float:
        """Return the time per step when the narrowest uplink gives each flow ``uplink_bps``."""
        bandwidth = min(self.local_bps, uplink_bps) if self.uplinks else self.local_bps
        if not self.ring:
            return self.rounds * (self.alpha_s + self.bits / bandwidth)
        k = self.members
        return self.rounds * (2 * (k - 1) * self.alpha_s + 2 * (k - 1) / k * self.bits / bandwidth)


@dataclass(frozen=True, slots=True)
class JobTraffic:
    """A placed job: compute per step, its collectives, the flows it sends across each uplink."""

    compute_s: float
    collectives: tuple[Collective, ...]
    flows: Mapping[Uplink, float]

    def step(self, uplink_bps: Callable[[JobTraffic, Collective], float]) -> tuple[float, float]:
        """Return (step seconds, communication seconds) given each collective's uplink rate."""
        comm = sum(c.seconds(uplink_bps(self, c)) for c in self.collectives)
        return self.compute_s + comm, comm

    def alone(self) -> float:
        """Return the step seconds with every uplink to itself (no other job's traffic)."""
        return self.compute_s + sum(c.seconds(math.inf) for c in self.collectives)


class UplinkIndex:
    """The capacity, in full-rate flows, of every domain's uplink of one topology (read-only)."""

    def __init__(self, topology: ClusterTopology, constants: SimConstants) -> None:
        self.capacity: dict[Uplink, float] = {
            (depth, k): uplink_capacity(topology, depth, k, constants.cost)
            for depth in range(topology.cluster_depth)
            for k in range(len(topology.domains[depth]))
        }


EdgeCost = tuple[float, float, Sequence[Uplink], Sequence[Uplink]]
"""(latency s, bandwidth b/s, sender-side uplinks, receiver-side uplinks) of one edge."""


def _collective(
    kind: str,
    edges: Counter[tuple[int, int]],
    edge_cost: Callable[[int, int], EdgeCost],
    crossings: dict[Uplink, float],
    *,
    ring: bool,
    members: int,
    rounds: float,
    bits: float,
) -> Collective:
    """Return the collective over ``edges`` ((node, node) -> GPU flows), counting its crossings."""
    alpha = 0.0
    local = math.inf
    coming_down: dict[Uplink, float] = {}
    for (a, b), count in edges.items():
        latency, bandwidth, up, down = edge_cost(a, b)
        alpha = max(alpha, latency)
        local = min(local, bandwidth)
        for uplink in up:
            crossings[uplink] = crossings.get(uplink, 0.0) + count
        for uplink in down:
            coming_down[uplink] = coming_down.get(uplink, 0.0) + count
    # An uplink's busier direction bounds the collective (rings load both alike).
    own = {u: max(crossings.get(u, 0.0), coming_down.get(u, 0.0)) for u in crossings | coming_down}
    return Collective(kind, ring, members, rounds, bits, alpha, local, tuple(sorted(own.items())))


def _traffic(
    shape: ModelShape,
    node_of_rank: Sequence[int],
    gpus_per_worker: int,
    edge_cost: Callable[[int, int], EdgeCost],
    constants: SimConstants,
) -> JobTraffic:
    """Return the traffic of ``shape`` with worker rank ``r`` on node ``node_of_rank[r]``."""
    gpus = len(node_of_rank) * gpus_per_worker
    tp, pp = shape.tp, shape.pp
    dp = shape.data_parallel(gpus)
    m = shape.micro_batches
    tokens = constants.seq_len * constants.micro_batch_size
    hidden = shape.hidden(constants)
    activation_bits = tokens * hidden * constants.bytes_per_value * 8.0
    params = shape.params_b * 1e9
    slots = m + pp - 1
    compute = (
        slots
        * 6
        * (params / pp)
        * tokens
        / tp
        / (constants.gpu_flops * constants.compute_efficiency)
    )

    def node(g: int) -> int:
        return node_of_rank[g // gpus_per_worker]

    # (kind, GPU flows per node pair, ring?, members, rounds per step, bits per GPU and round)
    kinds: list[tuple[str, Counter[tuple[int, int]], bool, int, float, float]] = []
    if tp > 1:
        edges: Counter[tuple[int, int]] = Counter()
        for start in range(0, gpus, tp):
            for k in range(tp):
                edges[node(start + k), node(start + (k + 1) % tp)] += 1
        per_step = m * math.ceil(shape.layers(constants) / pp) * constants.tp_allreduces_per_layer
        kinds.append(("tp", edges, True, tp, float(per_step), activation_bits))
    if pp > 1:
        edges = Counter()
        stage = tp * dp
        for g in range(gpus - stage):
            edges[node(g), node(g + stage)] += 1
            edges[node(g + stage), node(g)] += 1
        kinds.append(("pp", edges, False, 2, 2.0 * slots, activation_bits / tp))
    if dp > 1:
        edges = Counter()
        for stage_index in range(pp):
            for t in range(tp):
                members = [t + tp * (r + dp * stage_index) for r in range(dp)]
                for k in range(dp):
                    edges[node(members[k]), node(members[(k + 1) % dp])] += 1
        gradient_bits = params / (tp * pp) * constants.bytes_per_value * 8.0
        kinds.append(("dp", edges, True, dp, 1.0, gradient_bits))
    crossings: list[dict[Uplink, float]] = []
    collectives = []
    for kind, pairs, ring, size, rounds, bits in kinds:
        crossings.append({})
        collectives.append(
            _collective(
                kind,
                pairs,
                edge_cost,
                crossings[-1],
                ring=ring,
                members=size,
                rounds=rounds,
                bits=bits,
            )
        )
    # A flow loads an uplink for the fraction of the step its collective runs (uncontended).
    alone = [c.seconds(math.inf) for c in collectives]
    step = compute + sum(alone)
    flows: dict[Uplink, float] = {}
    for seconds, crossed in zip(alone, crossings, strict=True):
        duty = constants.flow_activity * seconds / step
        for uplink, count in crossed.items():
            flows[uplink] = flows.get(uplink, 0.0) + count * duty
    return JobTraffic(compute, tuple(collectives), flows)


def placed_traffic(
    topology: ClusterTopology,
    shape: ModelShape,
    node_of_rank: Sequence[int],
    gpus_per_worker: int,
    degraded: Sequence[bool],
    *,
    constants: SimConstants = DEFAULT_CONSTANTS,
) -> JobTraffic:
    """Return the traffic of ``shape`` placed on node indices ``node_of_rank`` of ``topology``."""
    cost = constants.cost
    nvlink = (cost.nvlink_gbytes_per_s * 8e9, cost.nvlink_latency_s)
    link = cost.link_gbps * 1e9
    cache: dict[tuple[int, int], EdgeCost] = {}

    def edge_cost(a: int, b: int) -> EdgeCost:
        found = cache.get((a, b))
        if found is not None:
            return found
        if a == b:
            found = (nvlink[1], nvlink[0], (), ())
        else:
            latency = cost.endpoint_latency_s + edge_hops(topology, a, b) * cost.hop_latency_s
            bandwidth = link * (
                cost.degraded_bandwidth_factor if degraded[a] or degraded[b] else 1.0
            )
            found = (latency, bandwidth, edge_uplinks(topology, a, b), edge_uplinks(topology, b, a))
        cache[a, b] = found
        return found

    return _traffic(shape, node_of_rank, gpus_per_worker, edge_cost, constants)


def ideal_traffic(
    shape: ModelShape,
    workers: int,
    gpus_per_worker: int,
    constants: SimConstants = DEFAULT_CONSTANTS,
) -> JobTraffic:
    """Return the traffic of ``shape`` on ``workers`` packed on healthy nodes of one leaf."""
    cost = constants.cost
    per_node = max(1, 8 // gpus_per_worker)

    def edge_cost(a: int, b: int) -> EdgeCost:
        if a == b:
            return (cost.nvlink_latency_s, cost.nvlink_gbytes_per_s * 8e9, (), ())
        return (cost.endpoint_latency_s + cost.hop_latency_s, cost.link_gbps * 1e9, (), ())

    return _traffic(
        shape, [r // per_node for r in range(workers)], gpus_per_worker, edge_cost, constants
    )
