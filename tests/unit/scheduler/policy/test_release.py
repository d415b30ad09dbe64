"""A persisted plan is checked again before its gated pods are released (policy/release.py):
pods whose planned node still holds their reservation are released onto the plan; a
replacement moves inside the domain; a plan whose domain has no room any more is made afresh
while nothing of its gang runs."""

from __future__ import annotations

from placer_world import two_leaves
from policy_world import NOW, add_job, add_pods, cycle_of, planned, rules, work_of

from tpfabric_core.api.placement import read_placement
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.policy import release
from tpfabric_scheduler.store import ClusterStore
from tpfabric_scheduler.work import PlacerMemory

PLANNED = planned()


def test_gated_pods_whose_nodes_hold_their_reservations_are_released_onto_the_plan() -> None:
    store = ClusterStore()
    two_leaves(store)
    add_job(store, "job", 2, placement=PLANNED)
    add_pods(store, "job", range(2))
    intent = release.decide(work_of(store, "job"), cycle_of(store), rules(), PlacerMemory())
    assert intent.placement is None, "the plan stands as written"
    assert [p.name for p in intent.release] == ["job-worker-0", "job-worker-1"]
    assert intent.onto.nodes == ["leaf-a-n0", "leaf-a-n1"]
    assert intent.placed


def test_a_replacement_worker_moves_to_another_node_of_the_domain() -> None:
    store = ClusterStore()
    two_leaves(store)
    add_job(store, "job", 2, placement=PLANNED, status={"attempt": 1})
    add_pods(store, "job", [0], nodes=["leaf-a-n0"], gated=False)
    add_pods(store, "job", [1], attempt=1)  # rank 1 failed; its replacement is gated
    intent = release.decide(work_of(store, "job"), cycle_of(store), rules(), PlacerMemory())
    moved = read_placement(intent.placement)
    assert intent.event == "WorkerReplanned"
    assert moved.nodes[0] == "leaf-a-n0", "the other rank stays"
    assert moved.nodes[1] != "leaf-a-n1"
    assert moved.nodes[1].startswith("leaf-a-")
    assert moved.replaced_ranks == {"1": "uid-job-1"}
    assert moved.message.endswith(f"[replaced: rank 1 -> {moved.nodes[1]}]")
    assert [p.name for p in intent.release] == ["job-worker-1"]
    assert intent.onto.nodes == moved.nodes


def test_a_plan_whose_domain_filled_up_is_made_afresh_while_nothing_of_it_runs() -> None:
    store = ClusterStore()
    two_leaves(store)
    add_job(store, "busy", 3)
    add_pods(store, "busy", range(3), nodes=["leaf-a-n0", "leaf-a-n2", "leaf-a-n3"], gated=False)
    add_job(store, "job", 2, placement={**PLANNED, "waitingSince": rfc3339(NOW - 90)})
    add_pods(store, "job", range(2))
    intent = release.decide(work_of(store, "job"), cycle_of(store), rules(), PlacerMemory())
    fresh = read_placement(intent.placement)
    assert intent.fresh_plan
    assert fresh.domain == "leaf-b"
    assert fresh.waiting_since_time == NOW - 90, "the gang keeps its first wait"
