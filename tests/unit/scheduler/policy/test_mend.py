"""Re-plan a rank, not the gang (policy/mend.py): a rank that needs a new node moves inside the
planned domain while every other rank stays; with no room there the plan is dropped when part of
the gang runs, and left to be planned afresh when nothing of it does."""

from __future__ import annotations

from placer_world import two_leaves
from policy_world import NOW, add_job, add_pods, cycle_of, planned, rules, work_of

from tpfabric_core.api.placement import read_placement
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.policy.mend import replace_gone, replace_ranks
from tpfabric_scheduler.store import ClusterStore
from tpfabric_scheduler.work import PlacerMemory

PLAN = planned(waitingSince=rfc3339(NOW - 50), message="planned")


def fill_leaf_a(store: ClusterStore) -> None:
    add_job(store, "busy", 2)
    add_pods(store, "busy", range(2), nodes=["leaf-a-n2", "leaf-a-n3"], gated=False)


def test_a_rank_moves_inside_its_domain_and_the_other_ranks_stay() -> None:
    store = ClusterStore()
    two_leaves(store)
    add_job(store, "job", 2, placement=PLAN)
    add_pods(store, "job", range(2))
    item, cycle = work_of(store, "job"), cycle_of(store)
    moves = [p for p in item.gated if p.worker_index == 1]
    replaced: dict[str, str] = {}
    mend = replace_ranks(
        item, cycle, moves, PLAN["nodes"], replaced, rules=rules(), memory=PlacerMemory()
    )
    assert mend.placement is not None
    assert mend.placement.nodes[0] == "leaf-a-n0"
    new = mend.placement.nodes[1]
    assert new.startswith("leaf-a-n")
    assert replaced == {"1": "uid-job-1"}
    assert mend.intent is not None
    assert mend.intent.event == "WorkerReplanned"
    assert cycle.snapshot.free_gpus[cycle.snapshot.topology.index_of[new]] == 0, "taken"


def test_with_no_room_and_nothing_running_the_gang_is_left_to_be_planned_afresh() -> None:
    store = ClusterStore()
    two_leaves(store)
    fill_leaf_a(store)
    add_job(store, "job", 2, placement=PLAN)
    add_pods(store, "job", range(2))
    item, cycle = work_of(store, "job"), cycle_of(store)
    index_of = cycle.snapshot.topology.index_of
    mend = replace_ranks(
        item, cycle, item.gated[:1], PLAN["nodes"], {}, rules=rules(), memory=PlacerMemory()
    )
    assert (mend.intent, mend.placement) == (None, None)
    freed = [cycle.snapshot.free_gpus[index_of[n]] for n in ("leaf-a-n0", "leaf-a-n1")]
    assert freed == [8, 8], "the gang's reservations are given back for its fresh plan"


def test_with_no_room_and_part_of_the_gang_running_the_plan_is_dropped() -> None:
    store = ClusterStore()
    two_leaves(store)
    fill_leaf_a(store)
    add_job(store, "job", 2, placement=PLAN)
    add_pods(store, "job", [0], nodes=["leaf-a-n0"], gated=False)
    add_pods(store, "job", [1], attempt=1)
    item, cycle = work_of(store, "job"), cycle_of(store)
    with store.lock:  # rank 1's node is taken meanwhile
        add_job(store, "taker", 1)
        add_pods(store, "taker", [0], nodes=["leaf-a-n1"], gated=False)
    cycle = cycle_of(store)
    mend = replace_ranks(
        item, cycle, item.gated, PLAN["nodes"], {}, rules=rules(), memory=PlacerMemory()
    )
    assert mend.placement is None
    assert mend.intent is not None
    assert read_placement(mend.intent.placement).replanning
    assert mend.intent.delete_pods


def test_a_node_that_left_with_no_room_for_its_rank_drops_the_plan_keeping_the_wait() -> None:
    store = ClusterStore()
    two_leaves(store)
    fill_leaf_a(store)
    add_job(store, "more", 1)
    add_pods(store, "more", [0], nodes=["leaf-a-n1"], gated=False)
    gone = {**PLAN, "nodes": ["leaf-a-n0", "leaf-a-gone"]}
    add_job(store, "job", 2, placement=gone)
    add_pods(store, "job", [0], gated=False)  # released, not bound yet; rank 1 not made yet
    item, cycle = work_of(store, "job"), cycle_of(store)
    intent = replace_gone(item, cycle, gone["nodes"], rules(), PlacerMemory())
    assert not intent.placed
    first = read_placement(intent.placement)
    assert first.replanning
    # its rank 0 is on its way to its node: the plan was dropped for that first, then for the
    # node that left, keeping the gang's first wait
    assert intent.then is not None
    second = read_placement(intent.then.placement)
    assert second.message.startswith("ns/job: planned node(s) ['leaf-a-gone'] left the cluster")
    assert second.waiting_since_time == NOW - 50
