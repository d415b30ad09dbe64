"""Every figure of the simulation in one place, with where it comes from.

The network figures (link and NVLink bandwidth, latencies, oversubscription and background load
per tier, the bandwidth left at a degraded endpoint) are the placement cost model's
(:class:`~tpfabric_core.placement.cost.CostModelConfig`), so the planner scores placements with
the same numbers the simulation runs them on. The rest describe the jobs: an H100-class GPU,
Megatron-style transformer training in bf16.

**Oversubscription sweeps**. The cost model's oversubscription is keyed by the tier an
uplink goes to: ``spine`` is the leaf->spine ratio, ``block`` spine->block, ``cluster``
block->core (:func:`~tpfabric_core.placement.cost.uplink_capacity`: an uplink carries
``nodes x rails x (1 - background) / ratio`` full-rate flows). :func:`oversubscribed` makes the
leaf->spine and block->core ratios inputs; spine->block keeps the cost model's 2:1. The sweep
points and where they come from:

- leaf->spine 1:1: non-blocking inside a pod or zone, as Meta builds its AI zones (Llama 3 paper,
  "The Llama 3 Herd of Models", 2024, section 3.3.1: full bisection inside a pod) and as the
  cost model assumes by default;
- leaf->spine 2:1 and 3:1: what vendor leaf/spine reference designs offer at the leaf when
  fewer spine ports are bought;
- block->core 4:1: the cost model's default; up to 7:1: Llama 3's aggregation layer ("an
  oversubscription ratio of 1:7" between pods, section 3.3.1).

**Contention between tenants**. Crux (Cao et al., "Crux: GPU-Efficient
Communication Scheduling for Deep Learning Training", SIGCOMM '24, section 2.2) profiled Alibaba's
2,000-GPU production cluster for two weeks: 36.3% of the jobs (51% of the GPUs) met communication
contention from other jobs, and a GPT job sharing links with a BERT job stepped 11% slower (1.53 s
to 1.70 s per iteration). Its causes are traffic this trace does not hold (other tenants, storage
and checkpoint traffic crossing the same spines), ECMP hash collisions that put several flows on one
of the parallel uplinks, and collectives of different jobs running at the same moment. The fluid
model has a knob for each: :func:`contended` raises the background load per tier (what other
tenants and collisions take from an uplink) and ``flow_activity`` (collectives bunching up: a flow
loads an uplink for its duty cycle times this). The figures are assumptions picked so that
contention binds, not measurements: :data:`CONTENTION_BACKGROUND` and
:data:`CONTENTION_FLOW_ACTIVITY`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from tpfabric_core.placement.cost import DEFAULT_COST, CostModelConfig


@dataclass(frozen=True, slots=True)
class SimConstants:
    """The simulation's figures (see each field)."""

    #: dense bf16 peak of one GPU, FLOP/s (H100 SXM: 989 TFLOP/s)
    gpu_flops: float = 989e12
    #: fraction of peak the matmuls reach (communication excluded: it is modelled apart)
    compute_efficiency: float = 0.5
    #: tokens per micro-batch: sequence length x micro-batch size
    seq_len: int = 4096
    micro_batch_size: int = 1
    #: bytes per activation and gradient value (bf16)
    bytes_per_value: int = 2
    #: hidden size per layer of the model shape (GPT-3 175B: 12288 / 96 = 128)
    hidden_per_layer: int = 128
    #: tensor-parallel all-reduces per layer and micro-batch (Megatron: 2 forward, 2 backward)
    tp_allreduces_per_layer: int = 4
    #: scales the load a flow puts on an uplink: its duty cycle (the fraction of the step its
    #: collective runs) x this; above 1 models collectives of different jobs bunching up
    flow_activity: float = 1.0
    #: a gang waiting at the head of the queue this long stops others from jumping it
    #: (backfill is allowed before; Slurm's and Kueue's queues do the same in spirit)
    reserve_after_s: float = 3600.0
    #: the placement cost model: link, NVLink, hops, oversubscription, background, health
    cost: CostModelConfig = field(default_factory=lambda: DEFAULT_COST)


DEFAULT_CONSTANTS = SimConstants()


LEAF_SPINE_SWEEP: tuple[float, ...] = (1.0, 2.0, 3.0)
"""leaf->spine ratios of the sweep: non-blocking, then vendor leaf designs' 2:1 and 3:1."""

BLOCK_CORE_SWEEP: tuple[float, ...] = (4.0, 7.0)
"""block->core ratios of the sweep: the cost model's 4:1 and Llama 3's 1:7 at aggregation."""


def oversubscribed(
    constants: SimConstants, *, leaf_spine: float | None = None, block_core: float | None = None
) -> SimConstants:
    """Return ``constants`` with the leaf->spine and block->core ratios replaced where given.

    A ratio is down-port over up-port bandwidth (2.0 is 2:1); below 1 is refused (ValueError):
    the model has no use for uplinks wider than the ports below them.
    """
    ratios = dict(constants.cost.oversubscription)
    for level, ratio in (("spine", leaf_spine), ("cluster", block_core)):
        if ratio is None:
            continue
        if ratio < 1.0:
            raise ValueError(f"oversubscription {ratio} at {level} is below 1:1")
        ratios[level] = ratio
    cost = constants.cost.model_copy(update={"oversubscription": ratios})
    return dataclasses.replace(constants, cost=cost)


CONTENTION_BACKGROUND: dict[str, float] = {"spine": 0.5, "block": 0.6, "cluster": 0.7}
"""Assumption: the share of each tier's uplinks other tenants' traffic and ECMP collisions take in
the contention scenario (the cost model's default is 0.1 / 0.25 / 0.4). Half a leaf's uplinks:
with flows hashed onto parallel uplinks, two colliding elephant flows each get half a link."""

CONTENTION_FLOW_ACTIVITY = 4.0
"""Assumption: in the contention scenario a flow loads an uplink for 4x its collective's duty
cycle: collectives of different jobs bunch up (Crux, section 2.2) instead of spreading evenly."""


def contended(
    constants: SimConstants,
    *,
    background: dict[str, float] | None = None,
    flow_activity: float = CONTENTION_FLOW_ACTIVITY,
) -> SimConstants:
    """Return ``constants`` with the contention scenario's background load and flow activity.

    ``background`` maps a tier (``spine``, ``block``, ``cluster``) to the share of its uplinks
    other tenants take (default :data:`CONTENTION_BACKGROUND`); a share outside [0, 1) is refused
    (ValueError): an uplink that other tenants fill would carry nothing.
    """
    loads = dict(CONTENTION_BACKGROUND if background is None else background)
    for level, share in loads.items():
        if not 0.0 <= share < 1.0:
            raise ValueError(f"background load {share} at {level} is outside [0, 1)")
    cost = constants.cost.model_copy(update={"background_load": loads})
    return dataclasses.replace(constants, cost=cost, flow_activity=flow_activity)
