"""Plans kube-scheduler can bind (policy/refusals.py): the nodes its own filters refuse a
gang's workers are planned without, for as long as the refusal lasts."""

from __future__ import annotations

from builders import a_worker
from placer_world import two_leaves
from policy_world import NOW, add_job, add_pods

from tpfabric_core.api.placement import REFUSAL_SECONDS, read_placement, refusal
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.policy.refusals import recorded, refused_nodes, turned_down
from tpfabric_scheduler.store import ClusterStore, PodRecord


def test_a_gang_is_planned_without_the_nodes_refused_lately_and_those_whose_ports_are_taken() -> (
    None
):
    store = ClusterStore()
    two_leaves(store)
    port = {"containerPort": 8000, "hostPort": 8000, "protocol": "TCP"}
    holder = a_worker("other", 0, node="leaf-b-n2", gated=False)
    holder["spec"]["containers"][0]["ports"] = [port]
    worker = a_worker("job", 0)
    worker["spec"]["containers"][0]["ports"] = [port]
    with store.lock:
        store.upsert_pod(holder)
    placement = read_placement(
        {
            "refusedNodes": [
                refusal("leaf-a-n1", "pod affinity", rfc3339(NOW - 10)),
                refusal("leaf-a-n2", "volume", rfc3339(NOW - REFUSAL_SECONDS)),
            ]
        }
    )
    nodes = refused_nodes(store, placement, PodRecord.from_object(worker), NOW)
    assert nodes == {"leaf-a-n1", "leaf-b-n2"}, "the expired refusal is forgotten"


def test_only_ranks_kube_scheduler_tried_on_a_node_with_room_are_refusals() -> None:
    store = ClusterStore()
    add_job(store, "job", 3)
    add_pods(store, "job", range(3), gated=False)
    said = a_worker("job", 2, gated=False)
    said["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "x" * 400}
    ]
    with store.lock:
        store.upsert_pod(said)
        members = list(store.workers["ns/job"].values())
    nodes = ["n0", "n1", "n2"]
    (only,) = turned_down(members, [0, 1, 2], [1], nodes, NOW)
    assert (only.node, len(only.reason), only.since) == ("n2", 300, rfc3339(NOW))
    assert turned_down(members, [0, 1, 2], [2], nodes, NOW) == [], "rank 2's node was taken"


def test_a_dropped_plan_records_its_new_refusals_with_the_live_ones() -> None:
    live = refusal("n1", "pod affinity", rfc3339(NOW - 5))
    previous = read_placement({"refusedNodes": [live]})
    assert recorded(previous, [], NOW) is None, "the write carries the live ones by itself"
    (new,) = turned_down([PodRecord.from_object(_unschedulable("job", 0))], [0], [], ["n2"], NOW)
    assert recorded(previous, [new], NOW) == [live, refusal("n2", "volume", rfc3339(NOW))]


def _unschedulable(job: str, rank: int) -> dict[str, object]:
    pod = a_worker(job, rank, gated=False)
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "volume"}
    ]
    return pod
