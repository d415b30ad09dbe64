"""What one sync of a gang's record does, decided from what the sync read, never by reading. Pure.

:mod:`.sync` reads (the gang's pods, its record, its owner when needed, its LeaderWorkerSet, the
nodes under it) and asks here twice. Before it reads further, whether the record can be made
and should be (:func:`record_step`): a gang whose size nothing gives, or whose owner is gone,
gets none, and its pods are told why. Then, with the record, what to write (:func:`sync_intent`):
the ranks still missing, the record's status (phase, problems, conditions, the gangs placed near
it) when it changed, and a degraded group to move. :mod:`.apply_intent` carries the answer out;
whether the gang is then settled (nothing written, nothing pending) is decided here too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpfabric_core.api.placement import placement_of_status
from tpfabric_core.gangs import not_opted_in
from tpfabric_operator.fabric_health import RankOnDegradedNode
from tpfabric_operator.gangs.owners import Identity, record_size
from tpfabric_operator.gangs.records import (
    GangPod,
    elsewhere_problem,
    owners_problem,
    ranks_to_write,
    record_manifest,
    record_status,
)
from tpfabric_operator.gangs.serving import LwsView, Moving, RecordLife, Unready, record_life
from tpfabric_operator.gangs.waits import SHORT_REASON, short_notice

__all__ = [
    "GangIntent",
    "PodWarning",
    "RecordStep",
    "SyncFacts",
    "not_opted_in_step",
    "record_step",
    "sync_intent",
]


@dataclass(frozen=True, slots=True)
class PodWarning:
    """A Warning Event on each pod of the gang, once per pod: what no Gang record can say."""

    reason: str
    words: str


@dataclass(frozen=True, slots=True)
class RecordStep:
    """What a sync does before it reads further (:func:`record_step`)."""

    #: tell the gang's pods what is wrong (None: nothing)
    warn: PodWarning | None = None
    #: the Gang record to create (None: none)
    make: dict[str, Any] | None = None
    #: the kind of the gang's owner, when that object is gone: no record is made (garbage
    #: collection takes its pods) ("": it is not gone)
    owner_gone: str = ""
    #: the sync ends here
    stop: bool = False


def not_opted_in_step(namespace: str) -> RecordStep:
    """Return the step for gang pods labelled where no one opted in: not this operator's to
    manage, they are told so and left alone."""
    return RecordStep(warn=PodWarning("NamespaceNotOptedIn", not_opted_in(namespace)), stop=True)


def record_step(identity: Identity, record: Mapping[str, Any] | None) -> RecordStep:
    """Return whether to make the gang's record (``record``: the one that exists, None: none).

    A gang without a size gets no record, and its pods say why (``NoGangRecord``). A gang whose
    owner is gone gets none either: a record made now would have no owner and outlive its pods
    (a pod group has no owner object and is made one all the same).
    """
    warn = None
    if identity.size is None:
        warn = PodWarning("NoGangRecord", f"no Gang record: {identity.problems[-1]}")
    if record is None and identity.owner is None and identity.first.member.kind != "PodGroup":
        return RecordStep(warn=warn, owner_gone=identity.first.member.kind, stop=True)
    if record is None and identity.size is not None:
        manifest = record_manifest(identity.first, identity.size, identity.owner)
        return RecordStep(warn=warn, make=manifest)
    return RecordStep(warn=warn, stop=identity.size is None)


@dataclass(frozen=True, slots=True)
class SyncFacts:
    """What a sync read for :func:`sync_intent`, besides the gang's pods and its record."""

    #: other namespaces with a Gang record of this pod group's name (while it lacks pods here)
    elsewhere: Sequence[str]
    #: the gang's pods on nodes labelled degraded
    degraded: list[RankOnDegradedNode]
    #: what the gang's LeaderWorkerSet says of its groups (None: not an LWS group, or it is gone)
    lws: LwsView | None
    #: that LWS's other groups not ready now
    unready: Unready
    #: the group of that LWS being moved off a degraded node (None: none)
    moving: Moving | None
    #: the degraded nodes this group's last move placed it back on (None: none)
    placed_back: frozenset[str] | None
    #: the lines of the gangs placed near this one (``status.nearBy``)
    near_by: list[str]
    #: the wall clock and the monotonic one, at this sync
    now: float
    monotonic: float
    #: how long a gang may be short of pods before its pods are told (:mod:`.waits`)
    short_notice_seconds: float = float("inf")


@dataclass(frozen=True, slots=True)
class GangIntent:
    """What one sync writes, in the order :mod:`.apply_intent` writes it."""

    #: pod name -> the rank to label it with
    ranks: dict[str, int]
    #: the record's conditions and what becomes of its moves (the leader pod to delete)
    life: RecordLife
    #: the record's status to write (None: the record shows it already)
    status: dict[str, Any] | None
    #: nothing was written and nothing is pending: the tick need not look again
    settled: bool
    #: tell the gang's pods it has long been short of pods (None: nothing)
    warn: PodWarning | None = None


def sync_intent(
    identity: Identity,
    record: Mapping[str, Any],
    pods: Sequence[GangPod],
    facts: SyncFacts,
    *,
    made: bool,
) -> GangIntent:
    """Return what to write for a gang whose record exists (``made``: created by this sync).

    A gang with a problem (two owners claim its name...) gets no ranks: the placer plans a gang
    record once every pod has its rank, and would plan this one in the moment between the rank
    writes and the status that names the problem.
    """
    size = record_size(record, identity.size)
    problems = list(identity.problems)
    problems.extend(
        p for p in (owners_problem(pods), elsewhere_problem(pods, size, facts.elsewhere)) if p
    )
    ranks = ranks_to_write(pods, size, identity.layout) if not problems else {}
    stored = record.get("status") or {}
    status = record_status(pods, size, placement_of_status(stored), problems)
    life = record_life(
        identity.first,
        pods,
        size,
        stored,
        degraded=facts.degraded,
        lws=facts.lws,
        unready=facts.unready,
        moving=facts.moving,
        placed_back=facts.placed_back,
        now=facts.now,
        monotonic=facts.monotonic,
    )
    status["conditions"] = life.conditions
    status["nearBy"] = facts.near_by
    notice = short_notice(life.conditions, identity.first.member.gang, facts.now,
                          facts.short_notice_seconds)  # fmt: skip
    warn = PodWarning(SHORT_REASON, notice) if notice is not None else None
    if any(stored.get(k) != v for k, v in status.items()):
        return GangIntent(ranks, life, status, settled=False, warn=warn)
    # a gang short of pods is never settled: a namesake in another namespace (elsewhere_problem)
    # shows in no event of its own; nor is one on a degraded node (the node's recovery is no
    # event of the gang's)
    settled = not made and not ranks and len(pods) >= size and life.settled
    return GangIntent(ranks, life, None, settled=settled, warn=warn)
