"""What one placer cycle acts on: a job's work item, the cycle's state, and a plan's nodes.

Plain data read from one view of the store; nothing here writes or talks to the API server.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tpfabric_core.api.placement import StoredPlacement
from tpfabric_core.placement.cost import UplinkLoad
from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.snapshot import CapacitySnapshot
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.capacity import Reservation
from tpfabric_scheduler.gang_request import gang_request
from tpfabric_scheduler.near import NearTarget
from tpfabric_scheduler.store import JobRecord, PodRecord

__all__ = ["Cycle", "Hold", "PlacementWork", "gang_request_of", "plan_nodes"]


@dataclass(frozen=True)
class PlacementWork:
    """One job the placer must act on, with what the cycle's view of the store showed."""

    job: JobRecord
    members: list[PodRecord]
    gated: list[PodRecord]
    placement: StoredPlacement
    reservations: list[Reservation]
    eligible: frozenset[str] | None
    priority: int
    #: nodes kube-scheduler's own filters refuse for the gang now (see ``refused_nodes``)
    refused: frozenset[str] = frozenset()
    #: where the gang may go to be near its partner (``spec.near``; None: it asks for none)
    near: NearTarget | None = None

    @property
    def planned(self) -> bool:
        """Return whether the job has a plan (persisted or just written)."""
        return self.placement.planned


@dataclass(frozen=True)
class Hold:
    """A domain a head-of-line gang holds for the rest of a cycle."""

    job: str  # namespace/name of the holding job
    level: str
    domain: str
    since: float  # when the holding job began to wait

    def __str__(self) -> str:
        return (
            f"{self.level} {self.domain!r} is held for head-of-line job {self.job} "
            f"(waiting since {rfc3339(self.since)})"
        )


@dataclass
class Cycle:
    """Per-cycle state: the snapshot and the nodes held for head-of-line gangs."""

    snapshot: CapacitySnapshot
    now: float
    #: how busy the uplinks are with the planned gangs' rings (None: no gang spans domains)
    uplinks: UplinkLoad | None = None
    #: GPUs of a typical gang: the median of the jobs the store knows (None: none yet)
    typical_gpus: int | None = None
    #: node index -> the head-of-line hold on it (its domain is kept for an older gang)
    held_for_hol: dict[int, Hold] = field(default_factory=dict)
    #: node index -> (creationTimestamp, key) of the gang returning to it: a gang whose plan was
    #: dropped lately while its owner makes it again keeps its previous nodes from younger gangs
    returning: dict[int, tuple[str, str]] = field(default_factory=dict)


def gang_request_of(item: PlacementWork) -> GangRequest:
    """Return the engine's request for the whole gang of ``item``."""
    assert item.job.job is not None
    worker = (item.gated or item.members)[0]
    return gang_request(
        item.job.key,
        item.job.job,
        worker,
        item.eligible,
        item.refused,
        previous=item.placement.last_nodes,
    )


def plan_nodes(item: PlacementWork) -> list[str]:
    """Return the planned node of each rank of ``item`` (empty without a plan)."""
    return list(item.placement.nodes)
