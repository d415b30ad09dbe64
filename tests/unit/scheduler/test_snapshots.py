"""Each cycle's snapshot is built from the last one (capacity.py ``Snapshots``): only nodes whose
record, use or reservations changed are read again, and the answer is always what a snapshot
built whole says."""

from __future__ import annotations

from typing import Any

from builders import a_job
from placer_world import a_node, a_worker, two_leaves

from tpfabric_core.placement.snapshot import CapacitySnapshot
from tpfabric_core.placement.topology import DEFAULT_LEVELS, ClusterTopology
from tpfabric_scheduler.capacity import Snapshots, build_snapshot, reservations_by_job
from tpfabric_scheduler.store import ClusterStore


def contents(snapshot: CapacitySnapshot) -> dict[str, Any]:
    return {
        "free_gpus": snapshot.free_gpus,
        "free_rdma": snapshot.free_rdma,
        "ready": snapshot.ready,
        "schedulable": snapshot.schedulable,
        "degraded": snapshot.degraded,
        "taints": snapshot.taints,
        "free_other": {k: v for k, v in snapshot.free_other.items() if any(v)},
        "alloc_gpus": snapshot.alloc_gpus,
    }


def topology_of(store: ClusterStore) -> ClusterTopology:
    return ClusterTopology.from_node_labels(
        {name: node.labels for name, node in store.nodes.items()}, DEFAULT_LEVELS
    )


def same_as_whole(store: ClusterStore, snapshots: Snapshots, topology: ClusterTopology) -> None:
    reservations = reservations_by_job(store)
    built = snapshots.build(store.view(), topology, reservations)
    assert contents(built) == contents(build_snapshot(store, topology, reservations))


def test_a_snapshot_built_from_the_last_one_is_the_snapshot_built_whole() -> None:
    store = ClusterStore()
    two_leaves(store)
    topology = topology_of(store)
    snapshots = Snapshots()
    with store.lock:
        store.upsert_pod(a_worker("busy", 0, node="leaf-a-n0", gated=False))
    same_as_whole(store, snapshots, topology)
    with store.lock:  # a pod binds, another goes, a node is cordoned and tainted
        store.upsert_pod(a_worker("busy", 1, node="leaf-b-n1", gated=False, gpus=4))
        store.delete_pod("ns/busy-worker-0")
        cordoned = a_node("leaf-a-n2", "leaf-a")
        cordoned["spec"] = {
            "unschedulable": True,
            "taints": [{"key": "maintenance", "value": "", "effect": "NoSchedule"}],
        }
        store.upsert_node(cordoned)
    same_as_whole(store, snapshots, topology)
    with store.lock:  # the taint goes again; the node's GPUs shrink
        store.upsert_node(a_node("leaf-a-n2", "leaf-a", gpus=4))
    same_as_whole(store, snapshots, topology)


def test_a_cycles_plans_never_reach_the_next_cycles_snapshot() -> None:
    store = ClusterStore()
    two_leaves(store)
    topology = topology_of(store)
    snapshots = Snapshots()
    first = snapshots.build(store.view(), topology, {})
    first.free_gpus[0] = -99  # what a plan of the cycle takes
    assert snapshots.build(store.view(), topology, {}).free_gpus[0] == 8


def test_a_node_whose_agent_falls_silent_or_speaks_again_is_read_again() -> None:
    store = ClusterStore()
    two_leaves(store)
    topology = topology_of(store)
    snapshots = Snapshots()
    index = topology.node_names.index("leaf-a-n0")
    assert not snapshots.build(store.view(), topology, {}).degraded[index]
    with store.lock:
        store.mark_silent(frozenset({"leaf-a-n0"}))
    assert snapshots.build(store.view(), topology, {}).degraded[index]
    same_as_whole(store, snapshots, topology)
    with store.lock:
        store.mark_silent(frozenset())
    assert not snapshots.build(store.view(), topology, {}).degraded[index]
    same_as_whole(store, snapshots, topology)


def test_a_plan_s_reservations_coming_and_going_and_a_node_leaving_are_read_again() -> None:
    store = ClusterStore()
    two_leaves(store)
    topology = topology_of(store)
    snapshots = Snapshots()
    same_as_whole(store, snapshots, topology)
    with store.lock:  # a plan holds two nodes for its workers, not bound yet
        store.upsert_job(a_job("held", 2, plan=("leaf", "leaf-a", ["leaf-a-n1", "leaf-a-n3"])))
        for rank in range(2):
            store.upsert_pod(a_worker("held", rank, gated=False))
    same_as_whole(store, snapshots, topology)
    index = topology.node_names.index("leaf-a-n3")
    assert snapshots.build(store.view(), topology, reservations_by_job(store)).free_gpus[index] == 0
    with store.lock:  # worker 1 binds where its rank held: the hold is its use now
        store.upsert_pod(a_worker("held", 1, node="leaf-a-n3", gated=False))
    same_as_whole(store, snapshots, topology)
    with store.lock:  # the plan goes; a node leaves the cluster
        store.upsert_job(a_job("held", 2))
        store.delete_node("leaf-b-n0")
    same_as_whole(store, snapshots, topology)
