"""A gang made again returns where it ran (policy/returning.py): its previous nodes are kept
from younger gangs, it waits for its own old pods to leave them, and a Gang record's pod made
again goes back to its planned node, each for RETURN_GRACE_SECONDS at most."""

from __future__ import annotations

import copy

from builders import a_node, a_worker
from placer_world import two_leaves
from policy_world import NOW, add_job, add_pods, cycle_of, work_of
from test_placer_gangs import a_gang_record, gang_pod

from tpfabric_core.placement.topology import DEFAULT_LEVELS, ClusterTopology
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.policy.returning import (
    RETURN_GRACE_SECONDS,
    made_again,
    old_pods_leaving,
    returning_nodes,
)
from tpfabric_scheduler.store import ClusterStore
from tpfabric_scheduler.work import PlacerMemory

DROPPED = {"state": "Replanning", "previousNodes": ["leaf-a-n0", "leaf-a-n1"]}


def topology(store: ClusterStore) -> ClusterTopology:
    return ClusterTopology.from_node_labels(
        {name: node.labels for name, node in store.nodes.items()}, DEFAULT_LEVELS
    )


def leaving(store: ClusterStore, name: str, node: str) -> None:
    """An old pod of ``name`` still terminating on ``node``."""
    old = a_worker(name, 0, node=node, gated=False)
    old["metadata"].update(name=f"{name}-old", uid=f"uid-{name}-old")
    old["metadata"]["deletionTimestamp"] = rfc3339(NOW - 1)
    with store.lock:
        store.upsert_pod(old)


def test_the_nodes_of_a_plan_dropped_lately_are_kept_for_its_gang() -> None:
    store = ClusterStore()
    two_leaves(store)
    add_job(store, "lately", 2, placement={**DROPPED, "waitingSince": rfc3339(NOW - 10)})
    held = returning_nodes(store, topology(store), NOW)
    index_of = topology(store).index_of
    assert set(held) == {index_of["leaf-a-n0"], index_of["leaf-a-n1"]}
    assert {gang for _, gang in held.values()} == {"ns/lately"}
    later = NOW + RETURN_GRACE_SECONDS
    assert returning_nodes(store, topology(store), later) == {}, "past the grace"


def test_a_gang_waits_for_its_old_pods_to_leave_its_nodes_until_the_grace_ends() -> None:
    store = ClusterStore()
    two_leaves(store)
    add_job(store, "back", 2, placement={**DROPPED, "waitingSince": rfc3339(NOW)})
    add_pods(store, "back", range(2))
    leaving(store, "back", "leaf-a-n1")
    item, memory = work_of(store, "back"), PlacerMemory()
    assert old_pods_leaving(item, NOW, memory)
    assert old_pods_leaving(item, NOW + RETURN_GRACE_SECONDS - 1, memory)
    assert not old_pods_leaving(item, NOW + RETURN_GRACE_SECONDS, memory), (
        "planned with what is free"
    )


def planned_gang_record(store: ClusterStore) -> None:
    """Gang record vllm-0 planned on leaf-a-n0 and leaf-a-n1, its two pods made again, gated."""
    record = a_gang_record("vllm-0", 2)
    record["status"] = {
        "placement": {
            "state": "Planned",
            "level": "leaf",
            "domain": "leaf-a",
            "nodes": ["leaf-a-n0", "leaf-a-n1"],
        }
    }
    with store.lock:
        store.upsert_job(copy.deepcopy(record))
        for rank in range(2):
            store.upsert_pod(gang_pod("vllm-0", rank))


def test_a_gang_pod_made_again_returns_to_its_planned_node_or_waits_for_the_old_one() -> None:
    store = ClusterStore()
    two_leaves(store)
    planned_gang_record(store)
    memory = PlacerMemory()
    assert made_again(work_of(store, "vllm-0"), cycle_of(store), "leaf-a-n0", memory) == "release"
    old = gang_pod("vllm-0", 0)
    old["metadata"].update(name="vllm-0-old", uid="uid-old", deletionTimestamp=rfc3339(NOW))
    old["spec"].update(nodeName="leaf-a-n0", schedulingGates=[])
    with store.lock:
        store.upsert_pod(old)
    item = work_of(store, "vllm-0")
    assert made_again(item, cycle_of(store), "leaf-a-n0", memory) == "wait"
    past = cycle_of(store, NOW + RETURN_GRACE_SECONDS)
    assert made_again(item, past, "leaf-a-n0", memory) == "move"


def test_a_gang_pod_made_again_moves_off_a_degraded_node() -> None:
    store = ClusterStore()
    two_leaves(store)
    with store.lock:
        store.upsert_node(a_node("leaf-a-n0", "leaf-a", health="degraded"))
    planned_gang_record(store)
    item = work_of(store, "vllm-0")
    assert made_again(item, cycle_of(store), "leaf-a-n0", PlacerMemory()) == "move"
    assert made_again(item, cycle_of(store), "gone-node", PlacerMemory()) == "move"
