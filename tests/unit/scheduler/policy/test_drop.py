"""Re-plan, never half-bound (policy/drop.py): a plan that can no longer be honoured is dropped
whole (``Replanning``, then the gang's pods deleted), pods a dropped plan left behind are deleted
again, and a suspended job's plan goes."""

from __future__ import annotations

import copy

from placer_world import two_leaves
from policy_world import NOW, add_job, add_pods, planned, work_of
from test_placer_gangs import a_gang_record, gang_pod

from tpfabric_core.api.models import RefusedNode
from tpfabric_core.api.placement import read_placement
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.policy.drop import (
    REPLAN_DELETE_RETRY_SECONDS,
    drop_suspended,
    drop_whole,
    finish,
    suspended,
    unfinished,
)
from tpfabric_scheduler.store import ClusterStore
from tpfabric_scheduler.work import PlacerMemory

PLANNED = planned(waitingSince=rfc3339(NOW - 40), term=3)


def test_a_dropped_plan_says_why_deletes_the_gang_and_waits_since_now_or_its_first_wait() -> None:
    store = ClusterStore()
    two_leaves(store)
    add_job(store, "job", 2, placement=PLANNED)
    add_pods(store, "job", range(2), gated=False)
    item = work_of(store, "job")
    now_dropped = drop_whole(item, "why", NOW, PlacerMemory(), reason="no_room")
    assert read_placement(now_dropped.placement).waiting_since_time == NOW
    assert (now_dropped.event, now_dropped.delete_pods, now_dropped.log) == (
        "GangReplanning",
        True,
        "why",
    )
    assert now_dropped.previous.term == 3, "the write tests the plan it drops"
    refused = [RefusedNode(node="leaf-a-n1", reason="volume", since=rfc3339(NOW))]
    kept = drop_whole(
        item, "why", NOW, PlacerMemory(), reason="node_taken", keep_wait=True, refused=refused
    )
    dropped = read_placement(kept.placement)
    assert dropped.waiting_since_time == NOW - 40
    assert [r.node for r in dropped.refused_nodes] == ["leaf-a-n1"]


def test_released_pods_a_dropped_plan_left_are_deleted_again_at_most_every_retry() -> None:
    store = ClusterStore()
    two_leaves(store)
    add_job(store, "job", 2, placement={"state": "Replanning", "waitingSince": rfc3339(NOW)})
    add_pods(store, "job", range(2), gated=False)
    memory = PlacerMemory()
    (left,) = unfinished(store, NOW, memory, released=())
    deletion = finish(left, NOW, memory)
    assert (deletion.delete_pods, deletion.placement, deletion.level) == (True, None, "warning")
    assert unfinished(store, NOW + REPLAN_DELETE_RETRY_SECONDS - 1, memory, released=()) == []
    assert unfinished(store, NOW + REPLAN_DELETE_RETRY_SECONDS, memory, released=()) == [left]


def test_pods_of_an_earlier_record_of_a_gang_are_orphans_and_its_own_are_not() -> None:
    store = ClusterStore()
    two_leaves(store)
    with store.lock:
        store.upsert_job(copy.deepcopy(a_gang_record("vllm-0", 2)))
        store.upsert_pod(gang_pod("vllm-0", 0))  # gated, waits for a plan
        earlier = gang_pod("vllm-0", 1)
        earlier["spec"]["schedulingGates"] = []  # released under the record deleted before
        store.upsert_pod(earlier)
    memory = PlacerMemory()
    assert [j.name for j in unfinished(store, NOW, memory, released=())] == ["vllm-0"]
    mine = {"uid-vllm-0-1"}  # released by this placer: on its way, not an orphan
    assert unfinished(store, NOW + 60, PlacerMemory(), released=mine) == []


def test_a_suspended_job_s_plan_is_dropped_behind_the_plan_it_read() -> None:
    store = ClusterStore()
    job = add_job(store, "nap", 2, placement=PLANNED)
    job["spec"]["suspend"] = True
    with store.lock:
        store.upsert_job(job)
    ((record, placement),) = suspended(store)
    intent = drop_suspended(record, placement)
    assert intent.drop
    assert intent.previous.term == 3
    assert not intent.placed
