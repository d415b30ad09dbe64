"""A deep queue is not built again each cycle (queue.py): a waiting gang's work item is kept from
cycle to cycle while its job record, its pods and its fresh plan are the same records and the
nodes stand, and built again on any change of one of them; an item that reads more than that (a
refusal that expires, a host port, a pod this placer released, a partner) is built every cycle.

The world: two leaves of four 8-GPU nodes, every node of leaf-b busy; gang ``waits`` asks for 6
workers x 8 GPUs in one leaf, which no leaf of four holds.
"""

from __future__ import annotations

import copy
from typing import Any

from placer_world import a_node, a_worker, gang, placement, two_leaves
from policy_world import NOW, add_job, add_pods
from test_placer_gangs import _occupy, a_gang_record, gang_pod

from tpfabric_core.api.placement import REFUSAL_SECONDS
from tpfabric_core.placement.topology import ClusterTopology
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.capacity import reservations_by_job
from tpfabric_scheduler.placer import GangPlacer
from tpfabric_scheduler.queue import Queue
from tpfabric_scheduler.store import ClusterStore
from tpfabric_scheduler.work import PlacementWork


def waiting_fabric() -> ClusterStore:
    store = ClusterStore()
    two_leaves(store)
    add_pods(store, "busy", range(4), nodes=[f"leaf-b-n{i}" for i in range(4)])
    add_job(store, "waits", 6, placement={"state": "Waiting", "waitingSince": rfc3339(NOW)})
    add_pods(store, "waits", range(6))
    return store


def due(
    queue: Queue,
    store: ClusterStore,
    *,
    now: float = NOW,
    released: frozenset[str] = frozenset(),
    name: str = "waits",
) -> PlacementWork:
    """Return the work item of job ``name`` in a cycle of ``queue`` at ``now``."""
    topology = ClusterTopology.from_node_labels(
        {name: node.labels for name, node in store.nodes.items()}
    )
    work = queue.pending(store, reservations_by_job(store), topology, released, now)
    (item,) = [w for w in work if w.job.name == name]
    return item


def test_a_waiting_gang_whose_records_stand_is_kept() -> None:
    store, queue = waiting_fabric(), Queue()
    first = due(queue, store)
    with store.lock:
        store.delete_pod("ns/busy-worker-0")  # capacity of another gang: not what it reads
    assert due(queue, store, now=NOW + 5) is first


def test_its_pods_changing_builds_it_again() -> None:
    store, queue = waiting_fabric(), Queue()
    first = due(queue, store)
    with store.lock:
        store.delete_pod("ns/waits-worker-5")
        replacement = a_worker("waits", 5)
        replacement["metadata"]["uid"] = "uid-waits-5-again"
        store.upsert_pod(replacement)
    again = due(queue, store)
    assert again is not first
    assert ("uid-waits-5-again", True, None) in again.member_states


def test_its_record_changing_builds_it_again() -> None:
    store, queue = waiting_fabric(), Queue()
    first = due(queue, store)
    later = rfc3339(NOW + 1)
    add_job(store, "waits", 6, placement={"state": "Waiting", "waitingSince": later})
    again = due(queue, store)
    assert again is not first
    assert again.placement.waiting_since == later


def test_a_fresh_plan_of_its_own_builds_it_again() -> None:
    store, queue = waiting_fabric(), Queue()
    first = due(queue, store)
    nodes = [f"leaf-a-n{i % 4}" for i in range(6)]
    with store.lock:  # the placer's write, before its watch event
        store.record_plan(store.jobs["ns/waits"], {"state": "Planned", "nodes": nodes})
    again = due(queue, store)
    assert again is not first
    assert again.planned
    assert list(again.placement.nodes) == nodes


def test_a_node_added_builds_it_again_with_the_nodes_it_may_use() -> None:
    store, queue = waiting_fabric(), Queue()
    first = due(queue, store)
    with store.lock:
        store.upsert_node(a_node("leaf-c-n0", "leaf-c"))
    again = due(queue, store)
    assert again is not first
    assert again.eligible is None or "leaf-c-n0" in again.eligible


def test_a_pod_this_placer_released_is_read_each_cycle() -> None:
    store, queue = waiting_fabric(), Queue()
    first = due(queue, store)
    again = due(queue, store, released=frozenset({"uid-waits-0"}))
    assert again is not first
    assert "uid-waits-0" not in {p.uid for p in again.gated}
    assert due(queue, store) is not again, "one released pod: not kept"


def test_a_refusal_is_read_each_cycle_and_expires() -> None:
    store = waiting_fabric()
    refused = {"node": "leaf-a-n0", "reason": "volume node affinity", "since": rfc3339(NOW)}
    waiting = {"state": "Waiting", "waitingSince": rfc3339(NOW), "refusedNodes": [refused]}
    add_job(store, "waits", 6, placement=waiting)
    queue = Queue()
    assert due(queue, store).refused == {"leaf-a-n0"}
    assert due(queue, store, now=NOW + REFUSAL_SECONDS + 1).refused == frozenset()


def test_a_worker_with_a_host_port_is_read_each_cycle() -> None:
    store = ClusterStore()
    two_leaves(store)
    add_job(store, "waits", 6, placement={"state": "Waiting", "waitingSince": rfc3339(NOW)})
    for rank in range(6):
        pod = a_worker("waits", rank)
        pod["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        with store.lock:
            store.upsert_pod(copy.deepcopy(pod))
    queue = Queue()
    assert due(queue, store).refused == frozenset()
    busy = a_worker("web", 0, node="leaf-a-n1", gated=False, gpus=0)
    busy["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    with store.lock:
        store.upsert_pod(busy)  # another tenant takes the port: the node's ports changed only
    assert due(queue, store).refused == {"leaf-a-n1"}


def test_a_gang_near_another_reads_where_that_one_runs_each_cycle() -> None:
    store = ClusterStore()
    two_leaves(store)
    decode = a_gang_record("decode-0", 1)
    decode["spec"]["near"] = {"target": "prefill", "level": "leaf", "mode": "required"}
    decode["status"] = {"placement": {"state": "Waiting", "waitingSince": rfc3339(NOW)}}
    prefill = a_gang_record("prefill-0", 2)
    with store.lock:
        store.upsert_job(decode)
        store.upsert_pod(gang_pod("decode-0", 0))
        store.upsert_job(copy.deepcopy(prefill))
    queue = Queue()
    near = due(queue, store, name="decode-0").near
    assert near is not None
    assert near.nodes is None, "its partner is not placed yet"
    prefill["status"] = {"placement": {"state": "Planned", "nodes": ["leaf-b-n0", "leaf-b-n1"]}}
    with store.lock:
        store.upsert_job(prefill)  # the partner's record changed, not its own
    near = due(queue, store, name="decode-0").near
    assert near is not None
    assert near.nodes == {f"leaf-b-n{i}" for i in range(4)}


def test_a_kept_gang_is_planned_again_only_when_room_frees_where_it_fits(world: Any) -> None:
    store, writer, placer, clock = world
    two_leaves(store)
    for node in ("leaf-a-n0", *(f"leaf-b-n{i}" for i in range(4))):
        _occupy(writer, node)
    gang(writer, "waits", 4)
    placer.run_cycle()
    assert placement(writer, "waits")["state"] == "Waiting"
    attempts = plan_attempts(placer)
    clock.now += 5
    placer.run_cycle()
    with store.lock:
        store.delete_pod("ns/tenant-leaf-b-n0")  # leaf-b holds 1 of 4: cannot help
    placer.run_cycle()
    assert plan_attempts(placer) == attempts, "kept, and not planned again"
    with store.lock:
        store.delete_pod("ns/tenant-leaf-a-n0")  # leaf-a holds 4
    placer.run_cycle()
    assert placement(writer, "waits")["state"] == "Planned"
    assert plan_attempts(placer) == attempts + 1


def plan_attempts(placer: GangPlacer) -> float:
    return placer.metrics.registry.get_sample_value("tpfabric_placer_plan_seconds_count") or 0.0
