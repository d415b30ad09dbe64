"""Restart only when it pays: whether a job on a degraded link should restart elsewhere.

A synchronous job runs at the pace of its slowest link: a rank on a degraded link slows every
step. Restarting the job elsewhere ends that, at a price: the steps since its last checkpoint are
redone and the restore (reschedule, start, load the checkpoint) passes before the first step.
:func:`weigh_restart` compares the two, in seconds of the job's healthy running time:

- running slow loses ``(r - 1)`` seconds per healthy second of work done while the fault lasts,
  with ``r`` the degraded step time over the healthy one; the fault is expected to last
  ``expected_fault_s`` more (repair times taken as exponential, so that expectation holds at any
  moment), and the job may end sooner (``remaining_s``);
- restarting costs ``restore_s + redo_s``.

It restarts when running slow is expected to lose more; a tie stays (a restart has risks the
model does not count). The operator's ``onDegradedLink: restart-when-it-pays`` and the
simulator's ``tpfabric-weighed`` placer call this same function: the operator with ``r``
estimated from the job's declared share of a step spent across nodes and the link's measured
bandwidth (:func:`slowdown_of`), the simulator with the step times its model computes.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["RestartWeighing", "slowdown_of", "weigh_restart"]


@dataclass(frozen=True, slots=True)
class RestartWeighing:
    """The two sides of the decision, in seconds, and the decision."""

    slowdown: float  # degraded step time over healthy step time
    slow_loss_s: float  # expected seconds lost running slow
    restart_cost_s: float  # restore plus redone work
    restore_s: float
    redo_s: float

    @property
    def pays(self) -> bool:
        """Return whether restarting is expected to finish the job sooner."""
        return self.slow_loss_s > self.restart_cost_s

    @property
    def words(self) -> str:
        """Return the decision in a sentence, e.g. for a condition or ``tpfabric explain``."""
        slower = (
            "a link keeps none of its rate"
            if math.isinf(self.slowdown)
            else f"steps {(self.slowdown - 1) * 100:.1f}% slower"
        )
        sides = (
            f"running slow ({slower}) is expected to lose {_minutes(self.slow_loss_s)}, "
            f"a restart costs {_minutes(self.restart_cost_s)} ({_minutes(self.restore_s)} "
            f"restore + {_minutes(self.redo_s)} redone since the last checkpoint)"
        )
        return f"restart pays: {sides}" if self.pays else f"kept running: {sides}"


def _minutes(seconds: float) -> str:
    if math.isinf(seconds):
        return "unbounded time"
    return f"{seconds / 60:.1f} min"


def slowdown_of(inter_node_share: float, bandwidth_fraction: float) -> float:
    """Return the degraded step time over the healthy one.

    ``inter_node_share``: the share of a healthy step spent in collectives across nodes (not
    hidden behind compute); ``bandwidth_fraction``: what the degraded link keeps of its rate. A
    ring all-reduce runs at its narrowest edge, so that share of the step stretches by
    ``1 / bandwidth_fraction``. A link that keeps nothing makes the slowdown unbounded.
    """
    if not 0.0 <= inter_node_share <= 1.0:
        raise ValueError(f"inter-node share {inter_node_share}: must be within [0, 1]")
    if not 0.0 <= bandwidth_fraction <= 1.0:
        raise ValueError(f"bandwidth fraction {bandwidth_fraction}: must be within [0, 1]")
    if inter_node_share == 0.0:
        return 1.0
    if bandwidth_fraction == 0.0:
        return math.inf
    return 1.0 + inter_node_share * (1.0 / bandwidth_fraction - 1.0)


def weigh_restart(
    *,
    slowdown: float,
    redo_s: float,
    restore_s: float,
    expected_fault_s: float,
    remaining_s: float = math.inf,
) -> RestartWeighing:
    """Return the weighing of restarting a job whose steps run ``slowdown`` times slower.

    ``remaining_s``: the job's running time left at its healthy pace (``inf`` when unknown);
    ``expected_fault_s``: how much longer the fault is expected to last; ``redo_s``: healthy
    running time since the last checkpoint; ``restore_s``: from stopping to the first step again.
    """
    if slowdown <= 1.0 or remaining_s <= 0:
        loss = 0.0
    elif math.isinf(slowdown):
        loss = math.inf
    else:
        # work done while the fault lasts, in healthy seconds, each costing (slowdown - 1) more
        loss = min(remaining_s, expected_fault_s / slowdown) * (slowdown - 1.0)
    return RestartWeighing(
        slowdown=slowdown,
        slow_loss_s=loss,
        restart_cost_s=restore_s + redo_s,
        restore_s=restore_s,
        redo_s=redo_s,
    )
