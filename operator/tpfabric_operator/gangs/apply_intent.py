"""Carry out what a sync of a gang decided (:mod:`.decide`): the one place the gang half writes.

In the order a sync needs it: :func:`apply_record_step` warns the pods no record can speak for
and makes the record; :func:`apply_intent` labels the ranks still missing, keeps what the
group's moves became (:mod:`.serving`), deletes the leader pod of a group moved off a degraded
node, and writes the record's status; :func:`forget_idle` deletes a record whose pods have been
gone long enough (:mod:`.idle`). Every call goes through :class:`.kube.GangApi`; what a sync
remembers for the next goes into the :class:`.state.GangState`.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes.client.rest import ApiException

from tpfabric_operator.gangs.decide import GangIntent, RecordStep
from tpfabric_operator.gangs.idle import idle_step
from tpfabric_operator.gangs.pods import GangKey
from tpfabric_operator.gangs.records import GangPod
from tpfabric_operator.gangs.serving import Moving
from tpfabric_operator.gangs.state import GangState

__all__ = ["apply_intent", "apply_record_step", "forget_idle"]

log = logging.getLogger("tpfabric.operator.gangs")


def apply_record_step(gangs: GangState, key: GangKey, pods: list[GangPod], step: RecordStep) -> Any:
    """Warn the gang's pods and make its record as ``step`` says; return the record made (None:
    none made)."""
    if step.warn is not None:
        gangs.api.warn_pods(key, pods, reason=step.warn.reason, words=step.warn.words)
    if step.owner_gone:
        log.info("gang %s/%s: no record: its %s is gone", key[0], key[1], step.owner_gone)
    if step.make is None:
        return None
    made = gangs.api.make_record(key, step.make)
    if made is not None:
        gangs.keep_record(key, made)
    return made


def apply_intent(
    gangs: GangState, key: GangKey, first: GangPod, pods: list[GangPod], intent: GangIntent
) -> bool:
    """Write what ``intent`` says for gang ``key`` (``first``: its first pod, whose owner's
    group moves); return whether the gang was settled (nothing written, nothing pending)."""
    if intent.warn is not None:
        gangs.api.warn_pods(key, pods, reason=intent.warn.reason, words=intent.warn.words)
    for name, rank in intent.ranks.items():
        gangs.api.label_rank(key, name, rank)
    member = first.member
    owner_key, group_key = (member.namespace, member.owner), (member.namespace, member.gang)
    life = intent.life
    if life.move_over:
        gangs.moving.pop(owner_key, None)
    if life.placed_back is None:
        gangs.moved_back.pop(group_key, None)
    else:
        gangs.moved_back[group_key] = life.placed_back
    if life.move_leader is not None:
        uids = frozenset(p.uid for p in pods)
        gangs.moving[owner_key] = Moving(member.gang, gangs.monotonic(), uids)
        try:
            gangs.api.move_group((member.namespace, member.gang), life.move_leader)
        except ApiException:
            gangs.moving.pop(owner_key, None)
            raise
    if intent.status is not None:
        written = gangs.api.write_status(key, intent.status)
        if written is not None:
            gangs.keep_record(key, written)
    return intent.settled


def forget_idle(gangs: GangState, key: GangKey, record: Any) -> None:
    """Delete the record of gang ``key`` once its pods have been gone ``idle_seconds``."""
    step = idle_step(record, gangs.idle_since.get(key), gangs.monotonic(), gangs.idle_seconds)
    if step.since is None:
        gangs.idle_since.pop(key, None)
        return
    gangs.moved_back.pop(key, None)
    gangs.idle_since[key] = step.since
    if step.delete:
        gangs.api.delete_record(key, record)
        gangs.bodies[key] = None
        gangs.idle_since.pop(key, None)
