"""Keeps one Gang record per gang another controller made: one sync of one gang, as a script.

The gang pods come from one list+watch of their own (:mod:`.pods`: a server-side label selector,
no other pod reaches the operator): every change marks its gang, and the syncer's threads bring
each marked gang's record in step once, from the watched pods. A record's own changes (the
placer's plan, a deletion by hand) mark its gang too, and every ``sync_seconds`` each gang and
record whose last sync did not find it in step is marked again (no kopf timer: it would put
kopf's finalizer on every record). Only the leader writes.

One sync of a gang (:func:`sync_gang`), each write only when it changes something:

1. read the gang's live pods and its record;
2. a gang without pods: its record is deleted once they have been gone ``idle_seconds``
   (:mod:`.idle`; a pod group has no owner to take its record along);
3. pods labelled where no one opted in are told so, and left alone;
4. who the gang is: its first pod, size and owner, the owner read only when needed
   (:mod:`.owners`);
5. the record, made once the gang has a size and its owner exists, owned by the
   LeaderWorkerSet, JobSet or PodGroup so that garbage collection removes it (:mod:`.records`);
6. what else the record's status needs, read only for this gang's kind: namesakes in other
   namespaces, the nodes under it that are degraded, its LeaderWorkerSet, the gangs near it;
7. decide (:mod:`.decide`: the ranks still missing once every pod exists, the status, a degraded
   group to move, :mod:`.serving`) and write it (:mod:`.apply_intent`).
"""

from __future__ import annotations

from tpfabric_operator import leadership
from tpfabric_operator.gangs.apply_intent import apply_intent, apply_record_step, forget_idle
from tpfabric_operator.gangs.decide import (
    SyncFacts,
    not_opted_in_step,
    record_step,
    sync_intent,
)
from tpfabric_operator.gangs.owners import (
    Identity,
    first_pod,
    identify,
    owner_needed,
    record_size,
)
from tpfabric_operator.gangs.pods import GangKey
from tpfabric_operator.gangs.records import GangPod
from tpfabric_operator.gangs.serving import Unready
from tpfabric_operator.gangs.state import GangState

__all__ = ["sync_gang"]


def sync_gang(gangs: GangState, key: GangKey) -> bool:
    """Bring the Gang record of ``key`` (namespace, gang) in step with its pods (leader only);
    return whether it was in step already (nothing written, nothing missing)."""
    if not leadership.leading():
        return False
    with gangs.lock(key):
        return _sync(gangs, key)


def _sync(gangs: GangState, key: GangKey) -> bool:
    api = gangs.api
    pods = gangs.pods_of(key)  # 1.
    record = gangs.record(key)
    if not pods:  # 2.
        forget_idle(gangs, key, record)
        return False
    gangs.idle_since.pop(key, None)
    if not api.opted_in(key[0]):  # 3.
        apply_record_step(gangs, key, pods, not_opted_in_step(key[0]))
        return False
    first = first_pod(pods)  # 4.
    owner = api.owner(first.member) if owner_needed(first, pods, record) else None
    identity = identify(first, record, owner)
    step = record_step(identity, record)  # 5.
    made = apply_record_step(gangs, key, pods, step)
    if step.stop:
        return False
    record = made if made is not None else record
    facts = _facts(gangs, key, identity, pods, record)  # 6.
    intent = sync_intent(identity, record, pods, facts, made=made is not None)  # 7.
    return apply_intent(gangs, key, identity.first, pods, intent)


def _facts(
    gangs: GangState, key: GangKey, identity: Identity, pods: list[GangPod], record: object
) -> SyncFacts:
    """Return what the record's status needs besides the pods, each read only where this gang
    needs it (the other namespaces only for a pod group short of pods, the LeaderWorkerSet only
    for its groups)."""
    member = identity.first.member
    size = record_size(record, identity.size)  # type: ignore[arg-type]
    lws = None
    if member.kind == "LeaderWorkerSet":
        lws = gangs.api.lws(member.namespace, member.owner)
    degraded = gangs.on_degraded_nodes(pods)
    # the LWS's other groups are counted only where a move off a degraded link may be decided
    # (serving.move_decision), not on every sync of every group
    unready = Unready(0)
    if lws is not None and degraded and lws.on_degraded_link == "restart-elsewhere":
        unready = gangs.unready_groups(member.namespace, lws, identity.first)
    return SyncFacts(
        elsewhere=gangs.api.elsewhere(key, pods, size),
        degraded=degraded,
        lws=lws,
        unready=unready,
        moving=gangs.moving.get((member.namespace, member.owner)),
        placed_back=gangs.moved_back.get((member.namespace, member.gang)),
        near_by=gangs.near.lines(member.namespace, member.owner, key[1]),
        now=gangs.wall(),
        monotonic=gangs.monotonic(),
        short_notice_seconds=gangs.short_notice_seconds,
    )
