"""What the engine weighs beside free capacity (uplink load and the typical gang's size), and
the placer's one call of the engine with them (:func:`plan_on`).

Both are read from the gangs the store knows, once per cycle that plans. The uplink load sums the
flows of every planned ring across the fabric's uplinks (``capacity.py`` computes a ring's flows);
a ring's flows are kept while its plan and the topology stand, so a cycle computes only the rings
of gangs planned since the last one.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from tpfabric_core.placement.cost import DEFAULT_COST, CostModelConfig, UplinkLoad
from tpfabric_core.placement.planner import plan_gang
from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.results import GangPlan, Unschedulable
from tpfabric_core.placement.snapshot import CapacitySnapshot
from tpfabric_core.placement.topology import ClusterTopology
from tpfabric_scheduler.capacity import PlannedRing, load_of, ring_flows
from tpfabric_scheduler.store import JobRecord
from tpfabric_scheduler.work import Cycle

__all__ = ["RingFlows", "plan_on", "typical_gang_gpus"]


class RingFlows:
    """The flows of every planned ring across uplinks, kept from cycle to cycle."""

    def __init__(self, cost: CostModelConfig = DEFAULT_COST) -> None:
        #: the cost model whose uplink capacities the load is counted against
        self._cost = cost
        #: per planned ring (job uid, nodes): the flows it sends across uplinks
        self._ring_flows: dict[tuple[str, tuple[str, ...]], dict[tuple[int, int], float]] = {}
        self._ring_topology: ClusterTopology | None = None

    def uplink_load(self, topology: ClusterTopology, rings: list[PlannedRing]) -> UplinkLoad | None:
        """Return the planned gangs' uplink load; each ring's flows are kept while its plan and
        the topology stand (a burst re-plans a few gangs per cycle, not all of them)."""
        if self._ring_topology is not topology:
            self._ring_flows, self._ring_topology = {}, topology
        kept: dict[tuple[str, tuple[str, ...]], dict[tuple[int, int], float]] = {}
        for uid, nodes, gpus in rings:
            flows = self._ring_flows.get((uid, nodes))
            kept[uid, nodes] = flows if flows is not None else ring_flows(topology, nodes, gpus)
        self._ring_flows = kept
        return load_of(topology, list(kept.values()), self._cost)


def typical_gang_gpus(jobs: Iterable[JobRecord]) -> int | None:
    """Return the median GPUs (workers x GPUs per worker) of the valid ``jobs`` (``None``: none).

    The planner keeps leaves from being cut below what such a gang needs (see
    :func:`~tpfabric_core.placement.planner.plan_gang`); every job the store knows counts, running
    or finished, as the mix of gangs this cluster sees.
    """
    sizes = [j.job.spec.workers * j.job.spec.gpus_per_worker for j in jobs if j.job is not None]
    return int(statistics.median(sizes)) if sizes else None


def plan_on(
    snapshot: CapacitySnapshot,
    request: GangRequest,
    cycle: Cycle,
    cost: CostModelConfig,
    waited: float = 0.0,
) -> GangPlan | Unschedulable:
    """Return the engine's plan of ``request`` on ``snapshot`` (the cycle's, or a copy of it),
    weighing the cycle's uplink load and typical gang; ``waited``: how long the gang has
    waited."""
    return plan_gang(
        snapshot,
        request,
        waited_seconds=waited,
        uplink_load=cycle.uplinks,
        typical_gang_gpus=cycle.typical_gpus,
        cost_config=cost,
    )
