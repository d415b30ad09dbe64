"""Gangs stay whole, and quiet while they wait (policy/waiting.py): a gang that fits nowhere
says why, once per change of meaning and at most every WAITING_REWRITE_SECONDS, and each of its
gated pods is told once."""

from __future__ import annotations

from dataclasses import replace

from placer_world import two_leaves
from policy_world import NOW, add_job, add_pods, cycle_of, rules, work_of

from tpfabric_core.api.placement import read_placement
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.policy import plan
from tpfabric_scheduler.policy.requeue import Freed
from tpfabric_scheduler.policy.waiting import WAITING_REWRITE_SECONDS, still_waiting
from tpfabric_scheduler.store import ClusterStore
from tpfabric_scheduler.work import PlacerMemory


def too_big(store: ClusterStore) -> None:
    """Two leaves of four nodes and a gang of six that must fit in one leaf."""
    two_leaves(store)
    add_job(store, "big", 6)
    add_pods(store, "big", range(6))


def test_a_gang_that_fits_nowhere_says_why_and_tells_each_gated_pod_once() -> None:
    store = ClusterStore()
    too_big(store)
    memory = PlacerMemory()
    intent = plan.decide(work_of(store, "big"), cycle_of(store), rules(), memory, Freed.anywhere(0))
    waiting = read_placement(intent.placement)
    assert waiting.waiting
    assert waiting.waiting_since_time == NOW
    assert [r.domain for r in waiting.reasons] == ["leaf-a", "leaf-b"]
    assert (intent.event, intent.outcome, intent.placed) == ("WaitingForCapacity", "waiting", False)
    assert len(intent.tell) == 6
    assert intent.tell_words.startswith("waits with its gang, TensorParallelJob big")
    assert memory.told == {}, "told only once the wait is written"
    assert intent.remember is not None
    intent.remember()
    assert memory.told["uid-big"] == {f"uid-big-{i}" for i in range(6)}
    assert memory.waiting_written["uid-big"] == NOW


def test_a_wait_is_rewritten_at_most_every_waiting_rewrite_seconds() -> None:
    store = ClusterStore()
    too_big(store)
    memory = PlacerMemory()
    first = plan.decide(work_of(store, "big"), cycle_of(store), rules(), memory, Freed.anywhere(0))
    assert first.remember is not None
    first.remember()
    stored = {**read_placement(first.placement).raw, "message": "an older count"}
    item = replace(work_of(store, "big"), placement=read_placement(stored))
    soon = rules(clock=lambda: NOW + WAITING_REWRITE_SECONDS - 1)
    assert plan.decide(item, cycle_of(store), soon, memory, Freed.anywhere(1)).placement is None
    later = rules(clock=lambda: NOW + WAITING_REWRITE_SECONDS)
    again = plan.decide(item, cycle_of(store), later, memory, Freed.anywhere(2))
    assert again.placement is not None
    assert again.event == "", "the first wait had its Event"
    assert again.tell == (), "every pod was told"


def test_a_waiting_gang_is_planned_again_only_when_capacity_may_have_grown() -> None:
    store = ClusterStore()
    too_big(store)
    memory = PlacerMemory()
    first = plan.decide(work_of(store, "big"), cycle_of(store), rules(), memory, Freed.anywhere(7))
    waiting = {**read_placement(first.placement).raw, "waitingSince": rfc3339(NOW)}
    item = replace(work_of(store, "big"), placement=read_placement(waiting))
    assert still_waiting(item, NOW + 5, Freed.anywhere(7), memory, rules())
    assert not still_waiting(item, NOW + 5, Freed.anywhere(8), memory, rules()), (
        "a pod went, a node came"
    )
