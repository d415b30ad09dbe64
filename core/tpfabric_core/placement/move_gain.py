"""Whether moving a running gang off its degraded nodes makes its collectives faster.

A restart away from a degraded link pays only if the gang runs faster where it goes. Healthy
room found elsewhere is not always faster: a gang that must leave its leaf crosses the spine
(its oversubscription and background load), and a link degraded only a little may still be the
better path. :func:`move_gain` models the gang's all-reduce both ways with the placement cost
model (:mod:`.cost`): where it runs, its edges to a degraded node at the bandwidth that node's
worst link keeps (the fabric agent's measure, or the cost model's ``degraded_bandwidth_factor``
where it has none), and on the new plan. The placer offers the room only when it is faster; the
simulator's restarting placers move only then, too.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tpfabric_core.placement.cost import DEFAULT_COST, CostModelConfig, modelled_allreduce_by_index
from tpfabric_core.placement.topology import ClusterTopology

__all__ = ["MoveGain", "move_gain"]


@dataclass(frozen=True, slots=True)
class MoveGain:
    """The gang's modelled all-reduce where it runs and where it would go, in seconds."""

    here_s: float  # on its degraded nodes (inf when a link keeps none of its rate)
    there_s: float  # on the new plan, off every degraded node
    kept: float  # the bandwidth the degraded links keep, as modelled

    @property
    def faster(self) -> bool:
        """Return whether the move makes the gang's collectives faster (a tie stays)."""
        return self.there_s < self.here_s

    @property
    def words(self) -> str:
        """Return the comparison in a phrase, e.g. for ``status.placement.healthyRoom``."""
        here = "never" if math.isinf(self.here_s) else f"{self.here_s * 1e3:.3f} ms"
        return (
            f"modelled all-reduce {self.there_s * 1e3:.3f} ms there against {here} where it "
            f"runs, its degraded links keeping {self.kept:g} of their rate"
        )


def move_gain(
    topology: ClusterTopology,
    here: Sequence[int],
    there: Sequence[int],
    gpus_per_worker: int,
    *,
    degraded: frozenset[int],
    kept: float | None,
    config: CostModelConfig = DEFAULT_COST,
) -> MoveGain:
    """Return the gang's modelled all-reduce on ``here`` (node indices by rank, ``degraded``
    among them keeping ``kept`` of their rate; None: the cost model's factor) and on
    ``there``."""
    share = config.degraded_bandwidth_factor if kept is None else kept
    there_s = modelled_allreduce_by_index(topology, there, gpus_per_worker, config=config).best_s
    if share <= 0:
        return MoveGain(math.inf, there_s, 0.0)
    at_share = config.model_copy(update={"degraded_bandwidth_factor": min(1.0, share)})
    here_s = modelled_allreduce_by_index(
        topology, here, gpus_per_worker, degraded=degraded, config=at_share
    ).best_s
    return MoveGain(here_s, there_s, share)
