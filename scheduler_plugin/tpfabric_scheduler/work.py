"""What one placer cycle acts on and what it remembers: a job's work item, the cycle's state,
the placer's settings, its memories from cycle to cycle, and a plan's nodes.

Plain data read from one view of the store; nothing here writes or talks to the API server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from tpfabric_core.api.placement import StoredPlacement
from tpfabric_core.placement.cost import CostModelConfig, UplinkLoad
from tpfabric_core.placement.request import GangRequest
from tpfabric_core.placement.snapshot import CapacitySnapshot
from tpfabric_core.placement.topology import LevelSpec
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.capacity import Reservation
from tpfabric_scheduler.explanations import Explanations
from tpfabric_scheduler.gang_request import gang_request
from tpfabric_scheduler.store import JobRecord, PodRecord

if TYPE_CHECKING:  # the near policy decides on work items: it imports this module
    from tpfabric_scheduler.policy.near import NearTarget

__all__ = [
    "Attempt",
    "Cycle",
    "Hold",
    "PlacementWork",
    "PlacerMemory",
    "Rules",
    "gang_request_of",
    "plan_nodes",
]


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

    @cached_property
    def member_states(self) -> frozenset[tuple[str, bool, str | None]]:
        """Return each of its pods' uid, whether gated, and node: what of the gang's own pods a
        plan attempt depends on (worked out once per item: a waiting gang's item is kept from
        cycle to cycle while its pods stand)."""
        return frozenset((p.uid, p.gated, p.node) for p in self.members)


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
    """Per-cycle state: the snapshot and the nodes held for head-of-line gangs.

    The policies of a cycle update it as they go (a plan takes its capacity off the snapshot, a
    head-of-line gang holds a domain), so that the next gang of the cycle sees it: the one
    mutable state a policy is handed besides the placer's memories.
    """

    snapshot: CapacitySnapshot
    now: float
    #: a job's pods (by job key) as the store holds them now, not at the cycle's start (a busy
    #: cycle runs for seconds; a bind bound reads what is bound now)
    pods_now: Callable[[str], list[PodRecord]] = lambda key: []
    #: how busy the uplinks are with the planned gangs' rings (None: no gang spans domains)
    uplinks: UplinkLoad | None = None
    #: GPUs of a typical gang: the median of the jobs the store knows (None: none yet)
    typical_gpus: int | None = None
    #: node index -> the head-of-line hold on it (its domain is kept for an older gang)
    held_for_hol: dict[int, Hold] = field(default_factory=dict)
    #: node index -> (creationTimestamp, key) of the gang returning to it: a gang whose plan was
    #: dropped lately while its owner makes it again keeps its previous nodes from younger gangs
    returning: dict[int, tuple[str, str]] = field(default_factory=dict)
    #: why gangs of one shape wait, worked out once per state of capacity (:mod:`.explanations`)
    explanations: Explanations = field(default_factory=Explanations)


@dataclass(frozen=True)
class Rules:
    """The placer's settings every policy reads, taken at the start of each cycle."""

    #: the topology levels (and their label keys) plans are made on
    levels: tuple[LevelSpec, ...]
    #: the cost model every plan, uplink load and move is priced with
    cost: CostModelConfig
    #: the placer's clock (injected, never read from a global)
    clock: Callable[[], float]
    #: a gang that waited this long holds the best domain it would take
    head_of_line_seconds: float
    #: released pods may take this long to bind
    bind_timeout: float


@dataclass
class Attempt:
    """What a waiting job's last plan attempt saw, to skip attempts that cannot differ."""

    freed_generation: int
    relax_at: float | None  # clock time the next topology level opens
    hol: bool
    #: it held a domain for itself (a head-of-line gang that could fit once work ends), or
    #: another gang's hold was in its way: such a gang is planned again every cycle, to hold
    #: its domain in that cycle too, or to see the hold go
    holds: bool = False
    #: its pods as the attempt saw them (uid, gated, node): a new or changed worker of its own
    members: frozenset[tuple[str, bool, str | None]] = frozenset()
    #: the depth of the highest level it could use (None: unknown, any free plans it again),
    #: its workers and each one's GPUs: what freed capacity must reach to matter to it
    #: (:mod:`.policy.requeue`)
    depth: int | None = None
    workers: int = 0
    gpus_per_worker: int = 0


@dataclass
class PlacerMemory:
    """What one placer remembers from cycle to cycle, per gang (job uid); a new term starts
    with a new placer and forgets it all. Each field belongs to the policy named beside it."""

    #: the last plan attempt of each waiting job (waiting)
    attempts: dict[str, Attempt] = field(default_factory=dict)
    #: when each waiting job's wait was last written (waiting)
    waiting_written: dict[str, float] = field(default_factory=dict)
    #: the gated pods of each job told why they wait, one GangWaiting Event each (waiting)
    told: dict[str, set[str]] = field(default_factory=dict)
    #: when the placer first saw a gang's old pods still on its previous nodes (returning)
    leaving_since: dict[str, float] = field(default_factory=dict)
    #: when the pods of each job's dropped plan were last deleted (drop)
    replan_deleted: dict[str, float] = field(default_factory=dict)
    #: when each job's healthy room was last looked for, for which degraded nodes (healthy room)
    room_checked: dict[str, tuple[float, frozenset[str]]] = field(default_factory=dict)
    #: the nodes labelled degraded, per topology generation (a label change bumps it) (healthy
    #: room)
    degraded_nodes: tuple[int, frozenset[str]] = (-1, frozenset())

    def holding(self) -> set[str]:
        """Return the uids of the waiting jobs whose last attempt stood at the head of the line
        or held a domain."""
        return {uid for uid, attempt in self.attempts.items() if attempt.hol or attempt.holds}

    def forget_all_but(self, live: set[str]) -> None:
        """Forget the waits of the jobs not in ``live`` (job uids): they are not due any more."""
        for memory in (self.attempts, self.waiting_written, self.told):
            for uid in [u for u in memory if u not in live]:
                del memory[uid]


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
