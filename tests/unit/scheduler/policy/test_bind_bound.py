"""The bind bound (policy/bind_bound.py): a released gang binds whole within the bound, or its
plan is dropped and the gang is made again; ranks whose node left move first, and a worker the
API server refused drops an early plan at once."""

from __future__ import annotations

from builders import a_worker
from placer_world import two_leaves
from policy_world import NOW, add_job, add_pods, cycle_of, planned, rules, work_of

from tpfabric_core.api.placement import read_placement
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.policy import bind_bound
from tpfabric_scheduler.store import ClusterStore
from tpfabric_scheduler.work import PlacerMemory


def released(store: ClusterStore, ago: float, **placement: object) -> None:
    """Job ``job`` planned on leaf-a-n0 and leaf-a-n1, released ``ago`` seconds ago, unbound."""
    plan = planned(plannedAt=rfc3339(NOW - ago), waitingSince=rfc3339(NOW - ago - 20), **placement)
    add_job(store, "job", 2, placement=plan)
    add_pods(store, "job", range(2), gated=False, created=NOW - ago)


def test_a_gang_that_may_still_bind_is_left_alone() -> None:
    store = ClusterStore()
    two_leaves(store)
    released(store, 30)
    intent = bind_bound.decide(work_of(store, "job"), cycle_of(store), rules(), PlacerMemory())
    assert (intent.placement, intent.delete_pods, intent.placed) == (None, False, True)


def test_a_gang_not_bound_within_the_bound_is_dropped_and_keeps_its_first_wait() -> None:
    store = ClusterStore()
    two_leaves(store)
    released(store, 61)
    memory = PlacerMemory()
    intent = bind_bound.decide(work_of(store, "job"), cycle_of(store), rules(), memory)
    dropped = read_placement(intent.placement)
    assert dropped.replanning
    assert dropped.message.startswith("ns/job: worker(s) [0, 1] not bound 61 s after release")
    assert dropped.waiting_since_time == NOW - 81
    assert (intent.event, intent.delete_pods, intent.level) == ("GangReplanning", True, "warning")
    assert not intent.placed
    assert intent.remember is not None
    intent.remember()
    assert memory.replan_deleted == {"uid-job": NOW}


def test_a_node_kube_scheduler_refused_is_recorded_with_its_words() -> None:
    store = ClusterStore()
    two_leaves(store)
    released(store, 61)
    refused = a_worker("job", 1, gated=False)
    refused["metadata"]["creationTimestamp"] = rfc3339(NOW - 61)
    refused["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "node(s) didn't match pod affinity rules",
        }
    ]
    with store.lock:
        store.upsert_pod(refused)
    intent = bind_bound.decide(work_of(store, "job"), cycle_of(store), rules(), PlacerMemory())
    (recorded,) = read_placement(intent.placement).refused_nodes
    assert (recorded.node, recorded.reason) == (
        "leaf-a-n1",
        "node(s) didn't match pod affinity rules",
    )
    assert "without the refused node(s)" in read_placement(intent.placement).message


def test_a_refused_worker_drops_an_early_plan_at_once() -> None:
    store = ClusterStore()
    two_leaves(store)
    quota = {
        "attempt": 0,
        "conditions": [
            {
                "type": "WorkersCreated",
                "status": "False",
                "reason": "CreateFailed",
                "message": "exceeded quota",
            }
        ],
    }
    add_job(
        store,
        "job",
        2,
        placement=planned(plannedAt=rfc3339(NOW - 5)),
        status=quota,
    )
    add_pods(store, "job", [0], gated=False, created=NOW - 5)
    intent = bind_bound.decide(work_of(store, "job"), cycle_of(store), rules(), PlacerMemory())
    assert read_placement(intent.placement).message.startswith(
        "ns/job: the API server refused worker pod(s) of the gang (exceeded quota), rank(s) [1]"
    )
    assert intent.delete_pods


def test_a_rank_whose_node_left_the_cluster_moves_at_once() -> None:
    store = ClusterStore()
    two_leaves(store)
    released(store, 5, nodes=["leaf-a-n0", "leaf-a-gone"])
    intent = bind_bound.decide(work_of(store, "job"), cycle_of(store), rules(), PlacerMemory())
    moved = read_placement(intent.placement)
    assert intent.event == "WorkerReplanned"
    assert moved.nodes[0] == "leaf-a-n0"
    assert moved.nodes[1].startswith("leaf-a-n")
    assert intent.placed
