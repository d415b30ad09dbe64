"""Serving a 405B model across two nodes: the trace and the modelled time between two tokens.

**Layout.** vLLM serves a model too large for one node by running tensor parallelism inside the
node and pipeline parallelism across nodes ("set the tensor parallel size to the number of GPUs in
each node, and the pipeline parallel size to the number of nodes": vLLM docs, "Distributed
inference and serving"; their example is 16 GPUs in 2 nodes, TP 8 x PP 2). Llama 3.1 405B in bf16
(810 GB of weights) needs that: one group is 2 nodes x 8 GPUs, ``tp`` 8, ``pp`` 2.

**Inter-token time.** One decode step of a group's batch (every sequence gets one token) runs both
stages one after the other:

- weights: each stage's GPUs read their shard of the weights from HBM once per step,
  ``params x bytes / (tp x pp)`` at ``HBM_BYTES_PER_S x HBM_EFFICIENCY`` (decode is
  memory-bound), once per stage;
- tensor parallel: 2 all-reduces per layer (Megatron: attention and MLP) of the batch's hidden
  states over NVLink, a ring of ``tp`` (the cost model's NVLink figures);
- the stage hop over the fabric: each stage boundary sends the batch's hidden states, each GPU
  its ``1/tp`` slice on its own rail (``latency + bits / bandwidth``), and the sampled tokens go
  back to the first stage (a few bytes: latency only). ``latency`` and ``bandwidth`` are the
  group's placement's: hops, a degraded endpoint, the fair share of the uplinks it crosses, as the
  engine records them (:attr:`~tpfabric_bench.sim.engine.JobOutcome.pp_links`).

The figures per placer are p50/p99 over time (weighted by how long each stretch lasted) across
every group of the trace. **Not modelled.** Prefill (it is the training model's forward pass: a
group's load on the uplinks is the engine's training-shaped one, an upper bound on decode's),
request arrivals and batching (the batch is a constant :data:`DECODE_BATCH`), KV-cache transfers,
speculative decoding. This module must never simulate or read a clock.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tpfabric_bench.sim.constants import DEFAULT_CONSTANTS, SimConstants
from tpfabric_bench.sim.model import ModelShape, ideal_traffic
from tpfabric_bench.sim.trace import SimJob, generate_trace

__all__ = [
    "SERVING_PREFIX",
    "ServingShape",
    "fabric_token_s",
    "inter_token_s",
    "is_serving",
    "serving_trace",
    "token_samples",
    "weighted_percentile",
]

SERVING_PREFIX = "serve-"
"""A trace row whose name starts with this is a serving group (CSV traces carry no other kind)."""

HBM_BYTES_PER_S = 3.35e12
"""H100 SXM HBM3 bandwidth (NVIDIA H100 Tensor Core GPU datasheet: 3.35 TB/s)."""

HBM_EFFICIENCY = 0.8
"""Assumption: the share of HBM bandwidth a decode step's weight reads reach."""

DECODE_BATCH = 32
"""Assumption: sequences decoded together per step of a group (requests in flight)."""

SERVING_SHARE = 0.3
"""Assumption: the share of the cluster's GPUs the serving groups hold on average; training jobs
(a thinned ``small-jobs`` trace) bring the load to about 85% as the other traces do."""

TRAINING_KEPT = 0.65
"""The share of a ``small-jobs`` trace's jobs kept as the training tenants beside the groups."""

GROUP_LIFETIME_H = 6.0
"""Assumption: median hours a serving group lives (log-normal, sigma 0.5) before it is scaled
down or rolled; long-lived next to the training jobs' one hour."""


@dataclass(frozen=True, slots=True)
class ServingShape:
    """One serving group: the model (Llama 3.1 405B: hidden 16,384, 126 layers) and its split."""

    params_b: float = 405.0
    hidden: int = 16384
    layers: int = 126
    tp: int = 8
    pp: int = 2
    batch: int = DECODE_BATCH

    @property
    def workers(self) -> int:
        """Return the nodes of one group (one worker of ``tp`` GPUs per stage)."""
        return self.pp


LLAMA_405B = ServingShape()


def is_serving(name: str) -> bool:
    """Return whether the trace row ``name`` is a serving group."""
    return name.startswith(SERVING_PREFIX)


def fabric_token_s(
    alpha_s: float,
    bandwidth_bps: float,
    shape: ServingShape = LLAMA_405B,
    *,
    bytes_per_value: int = 2,
) -> float:
    """Return the seconds per token spent on the fabric: the stage hops and the tokens' way back.

    ``alpha_s`` and ``bandwidth_bps``: the latency and the bandwidth of the group's stage hop.
    """
    bits = shape.batch * shape.hidden * bytes_per_value * 8.0 / shape.tp
    return (shape.pp - 1) * (alpha_s + bits / bandwidth_bps) + alpha_s


def inter_token_s(
    alpha_s: float,
    bandwidth_bps: float,
    shape: ServingShape = LLAMA_405B,
    constants: SimConstants = DEFAULT_CONSTANTS,
) -> float:
    """Return the modelled time between two tokens of a sequence (see the module docstring)."""
    per_gpu_bytes = shape.params_b * 1e9 * constants.bytes_per_value / (shape.tp * shape.pp)
    weights = shape.pp * per_gpu_bytes / (HBM_BYTES_PER_S * HBM_EFFICIENCY)
    k = shape.tp
    cost = constants.cost
    bits = shape.batch * shape.hidden * constants.bytes_per_value * 8.0
    ring = 2 * (k - 1) * cost.nvlink_latency_s + 2 * (k - 1) / k * bits / (
        cost.nvlink_gbytes_per_s * 8e9
    )
    tensor = 2 * shape.layers * ring if k > 1 else 0.0
    fabric = fabric_token_s(
        alpha_s, bandwidth_bps, shape, bytes_per_value=constants.bytes_per_value
    )
    return weights + tensor + fabric


def weighted_percentile(samples: Iterable[tuple[float, float]], q: float) -> float:
    """Return the ``q`` quantile (0..1) of (value, weight) samples (0.0 when none weighs).

    The smallest value whose cumulative weight reaches ``q`` of the total.
    """
    ordered = sorted((v, w) for v, w in samples if w > 0)
    total = math.fsum(w for _, w in ordered)
    if not ordered:
        return 0.0
    reached = 0.0
    for value, weight in ordered:
        reached += weight
        if reached >= q * total:
            return value
    return ordered[-1][0]


def serving_trace(
    *,
    nodes: int,
    seed: int = 7,
    training_jobs: int = 400,
    shape: ServingShape = LLAMA_405B,
    constants: SimConstants = DEFAULT_CONSTANTS,
) -> list[SimJob]:
    """Return serving groups mixed with training tenants on ``nodes`` nodes, by arrival.

    The training tenants are :data:`TRAINING_KEPT` of a seeded ``small-jobs`` trace; the groups
    arrive as a Poisson process over the same span, as many as hold :data:`SERVING_SHARE` of the
    GPUs on average, each living a log-normal time (median :data:`GROUP_LIFETIME_H`). In the
    engine a group runs as its training-shaped job (405B, TP 8 x PP 2) for as many steps as fill
    its lifetime on an idle leaf.
    """
    rng = random.Random(seed)  # noqa: S311 - a seeded simulation, not cryptography
    training = [
        job
        for job in generate_trace("small-jobs", jobs=training_jobs, nodes=nodes, seed=seed)
        if rng.random() < TRAINING_KEPT
    ]
    span = max((job.arrival_s for job in training), default=3600.0)
    model = ModelShape(shape.params_b, shape.tp, shape.pp, 2 * shape.pp)
    step = ideal_traffic(model, shape.workers, shape.tp, constants).alone()
    mean_life = GROUP_LIFETIME_H * 3600.0 * math.exp(0.5**2 / 2)
    group_gpus = shape.workers * shape.tp
    concurrent = SERVING_SHARE * nodes * 8 / group_gpus
    count = max(1, round(concurrent * span / mean_life))
    groups: list[SimJob] = []
    clock = 0.0
    for k in range(count):
        clock += rng.expovariate(count / span)
        life = rng.lognormvariate(math.log(GROUP_LIFETIME_H * 3600.0), 0.5)
        groups.append(
            SimJob(
                name=f"{SERVING_PREFIX}{k:04d}",
                arrival_s=round(clock, 3),
                workers=shape.workers,
                gpus_per_worker=shape.tp,
                params_b=shape.params_b,
                tp=shape.tp,
                pp=shape.pp,
                micro_batches=model.micro_batches,
                steps=max(1, round(life / step)),
            )
        )
    return sorted([*training, *groups], key=lambda j: (j.arrival_s, j.name))


def token_samples(
    pp_links: Sequence[tuple[float, float, float]],
    shape: ServingShape = LLAMA_405B,
    constants: SimConstants = DEFAULT_CONSTANTS,
) -> list[tuple[float, float, float]]:
    """Return (inter-token s, fabric s per token, seconds it lasted) per stretch of a run."""
    return [
        (
            inter_token_s(alpha, bandwidth, shape, constants),
            fabric_token_s(alpha, bandwidth, shape, bytes_per_value=constants.bytes_per_value),
            seconds,
        )
        for seconds, alpha, bandwidth in pp_links
    ]
