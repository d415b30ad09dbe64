"""Every figure of the simulation in one place, with where it comes from.

The network figures (link and NVLink bandwidth, latencies, oversubscription and background load
per tier, the bandwidth left at a degraded endpoint) are the placement cost model's
(:class:`~tpfabric_core.placement.cost.CostModelConfig`), so the planner scores placements with
the same numbers the simulation runs them on. The rest describe the jobs: an H100-class GPU,
Megatron-style transformer training in bf16.
"""

from __future__ import annotations

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
