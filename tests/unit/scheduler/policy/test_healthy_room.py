"""Healthy room (policy/healthy_room.py): a running gang that asks to move off its degraded
nodes is told whether the whole gang has room elsewhere now, the answer written only when it
changes and looked for again at most every RECHECK_SECONDS."""

from __future__ import annotations

from builders import a_node
from placer_world import two_leaves
from policy_world import NOW, add_job, add_pods, cycle_of, rules

from tpfabric_core.api.placement import healthy_room as room_of
from tpfabric_core.api.placement import read_placement
from tpfabric_scheduler.gang_request import EligibleNodes
from tpfabric_scheduler.policy import healthy_room
from tpfabric_scheduler.policy.healthy_room import RECHECK_SECONDS
from tpfabric_scheduler.store import ClusterStore
from tpfabric_scheduler.work import PlacerMemory

NODES = ["leaf-a-n0", "leaf-a-n1"]


def running_on_a_degraded_node(store: ClusterStore, **placement: object) -> None:
    two_leaves(store)
    with store.lock:
        store.upsert_node(a_node("leaf-a-n1", "leaf-a", health="degraded"))
    plan = {"state": "Planned", "level": "leaf", "domain": "leaf-a", "nodes": NODES, **placement}
    job = add_job(store, "slow", 2, placement=plan)
    job["spec"]["topology"]["onDegradedLink"] = "restart-elsewhere"
    with store.lock:
        store.upsert_job(job)
    add_pods(store, "slow", range(2), nodes=NODES, gated=False)


def test_a_gang_on_a_degraded_node_is_told_where_it_has_room_off_it() -> None:
    store = ClusterStore()
    running_on_a_degraded_node(store)
    memory = PlacerMemory()
    (mover,) = healthy_room.due(store, NOW, rules(), memory, EligibleNodes())
    assert mover.degraded == {"leaf-a-n1"}
    intent = healthy_room.decide(mover, cycle_of(store), 0, rules(), memory)
    assert intent is not None
    room = read_placement(intent.placement).healthy_room
    assert room is not None
    assert room.found
    assert room.degraded_nodes == ["leaf-a-n1"]
    assert room.message.startswith("leaf 'leaf-a' has room for the whole gang off leaf-a-n1: ")
    assert "against" in room.message, "room only where the gang would run faster"
    assert (
        healthy_room.due(store, NOW + RECHECK_SECONDS - 1, rules(), memory, EligibleNodes()) == []
    )


def test_a_room_found_is_not_looked_for_again_and_a_stale_one_is_cleared() -> None:
    store = ClusterStore()
    found = room_of(True, ["leaf-a-n1"], "leaf 'leaf-b' has room", NOW).model_dump(by_alias=True)
    running_on_a_degraded_node(store, healthyRoom=found)
    memory = PlacerMemory()
    (mover,) = healthy_room.due(store, NOW, rules(), memory, EligibleNodes())
    assert healthy_room.decide(mover, cycle_of(store), 0, rules(), memory) is None
    with store.lock:  # the link is healthy again: the answer no longer holds
        store.upsert_node(a_node("leaf-a-n1", "leaf-a"))
    (stale,) = healthy_room.due(store, NOW, rules(), memory, EligibleNodes())
    cleared = healthy_room.decide(stale, None, 0, rules(), memory)
    assert cleared is not None
    assert read_placement(cleared.placement).healthy_room is None
