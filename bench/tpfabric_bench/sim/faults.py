"""Links that degrade during a run: a seeded fault process and what restarting a gang costs.

A fault degrades every link of one node (as the fabric agent marks the node ``degraded``) from
its start to its end; an edge with a degraded endpoint runs at the cost model's
``degraded_bandwidth_factor`` of the link rate, as the seeded degraded nodes do. Faults arrive
as a Poisson process per node and last an exponential time. A placer that restarts gangs away
from degraded links (tpfabric with ``onDegradedLink: restart-elsewhere``) pays
:class:`RestartCost`: the steps since the last checkpoint are redone and the restore time passes
before the first step. The weighed rule (``tpfabric-weighed``) is the operator's
``restart-when-it-pays`` (:mod:`tpfabric_core.fabric.restart_rule`): restart only when running
slow is expected to take longer than restarting. This module must never simulate
or read a clock.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = [
    "LLAMA3_NETWORK_FAULTS_PER_NODE_HOUR",
    "LOSSY_LINK_BANDWIDTH",
    "RESTART_RULES",
    "LinkFault",
    "RestartCost",
    "RestartRule",
    "link_faults",
]

RESTART_RULES = ("always", "weighed")
"""How a restarting placer decides: ``always`` restart a gang that meets a degraded link,
``weighed`` only when the operator's ``restart-when-it-pays`` weighing says so
(:func:`tpfabric_core.fabric.restart_rule.weigh_restart`; never restarting is a placer without a
rule)."""

LLAMA3_NETWORK_FAULTS_PER_NODE_HOUR = 42 / (54 * 24 * 2048)
"""Network interruptions per node-hour in Llama 3's pre-training ("The Llama 3 Herd of Models",
2024, table 5): 35 faulty network switch/cable and 7 faulty NIC interruptions in 54 days on
16,384 GPUs (2,048 nodes of 8): about 1.6e-5. Interruptions are the faults that stopped the job;
links that only degrade are not counted there, so this is a floor for degradations."""

LOSSY_LINK_BANDWIDTH = 0.1
"""Assumption (no published figure for this case): the bandwidth a link keeps when its transceiver
drops a few percent of packets (the seed's war story: 4%). RoCE recovers a loss by going back N
packets, so a small loss rate costs far more than its share of throughput; ``--degraded-bandwidth
0.1`` runs the fault scenario with it (the model's default degraded link keeps half)."""

MEAN_FAULT_HOURS = 4.0
"""Assumption (no published figure): hours until a degraded link is repaired (a transceiver
reseated or replaced, a cable swapped)."""


@dataclass(frozen=True, slots=True)
class LinkFault:
    """The links of node index ``node`` degraded from ``start_s`` to ``end_s`` (simulated)."""

    node: int
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class RestartCost:
    """What restarting a gang costs: redone steps since the last checkpoint, then a restore.

    Defaults are assumptions, not measurements: a checkpoint every 30 minutes of training (the
    steps since the last one are lost, 15 minutes on average) and 10 minutes to reschedule,
    start the workers and load the checkpoint.
    """

    checkpoint_interval_s: float = 1800.0
    restore_s: float = 600.0


def link_faults(
    nodes: int,
    horizon_s: float,
    *,
    per_node_hour: float,
    mean_hours: float = MEAN_FAULT_HOURS,
    seed: int = 0,
) -> list[LinkFault]:
    """Return the seeded faults of ``nodes`` nodes over ``[0, horizon_s)``, by start time.

    Per node a Poisson process of ``per_node_hour``; each fault lasts an exponential time of mean
    ``mean_hours``. A node's next fault can only start after its last one ended.
    """
    if per_node_hour <= 0 or horizon_s <= 0:
        return []
    rng = random.Random(seed)  # noqa: S311 - a seeded simulation, not cryptography
    rate_s = per_node_hour / 3600.0
    faults: list[LinkFault] = []
    for node in range(nodes):
        now = rng.expovariate(rate_s)
        while now < horizon_s:
            end = now + rng.expovariate(1.0 / (mean_hours * 3600.0))
            faults.append(LinkFault(node, now, end))
            now = end + rng.expovariate(rate_s)
    faults.sort(key=lambda f: (f.start_s, f.node))
    return faults


@dataclass(frozen=True, slots=True)
class RestartRule:
    """When a gang that met a degraded link restarts elsewhere (see :data:`RESTART_RULES`).

    ``expected_fault_s``: how much longer the fault is expected to last when it starts. Repair
    times are modelled exponential (memoryless), so the mean repair time is the expectation at
    any moment; ``math.inf`` weighs the rest of the job at the degraded speed.
    """

    kind: str = "always"
    expected_fault_s: float = MEAN_FAULT_HOURS * 3600.0

    def __post_init__(self) -> None:
        if self.kind not in RESTART_RULES:
            raise ValueError(f"restart rule {self.kind!r}: use one of {', '.join(RESTART_RULES)}")
