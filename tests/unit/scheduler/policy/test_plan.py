"""Smallest domain that fits, for the whole gang at once (policy/plan.py): a gated gang gets
one plan of every rank, taken off the cycle's snapshot, written and then released."""

from __future__ import annotations

from builders import a_worker
from placer_world import two_leaves
from policy_world import NOW, add_job, add_pods, cycle_of, rules, work_of

from tpfabric_core.api.placement import read_placement
from tpfabric_scheduler.policy import plan
from tpfabric_scheduler.policy.requeue import Freed
from tpfabric_scheduler.store import ClusterStore
from tpfabric_scheduler.work import PlacerMemory


def test_a_gang_that_fits_gets_one_plan_of_every_rank_released_once_written() -> None:
    store = ClusterStore()
    two_leaves(store)
    add_job(store, "llama", 4)
    add_pods(store, "llama", range(4))
    cycle = cycle_of(store)
    intent = plan.decide(work_of(store, "llama"), cycle, rules(), PlacerMemory(), Freed.anywhere(0))
    written = read_placement(intent.placement)
    assert intent.fresh_plan
    assert intent.placed
    assert written.planned
    assert len({node.rsplit("-n", 1)[0] for node in written.nodes}) == 1, "one leaf"
    assert [p.name for p in intent.release] == [f"llama-worker-{i}" for i in range(4)]
    assert (intent.released_event, intent.outcome) == ("GangPlaced", "planned")
    index_of = cycle.snapshot.topology.index_of
    assert all(cycle.snapshot.free_gpus[index_of[n]] == 0 for n in written.nodes), "taken"


def test_a_level_the_cluster_lacks_makes_the_job_invalid_not_waiting() -> None:
    store = ClusterStore()
    two_leaves(store)
    add_job(store, "odd", 2, level="rack")
    add_pods(store, "odd", range(2))
    intent = plan.decide(
        work_of(store, "odd"), cycle_of(store), rules(), PlacerMemory(), Freed.anywhere(0)
    )
    assert read_placement(intent.placement).state == "Invalid"
    assert intent.event == "InvalidTopology"
    assert not intent.placed
    assert intent.release == ()


def test_a_gang_whose_old_pods_still_leave_its_previous_nodes_waits_without_a_word() -> None:
    store = ClusterStore()
    two_leaves(store)
    previous = {"state": "Replanning", "previousNodes": ["leaf-a-n0", "leaf-a-n1"]}
    add_job(store, "back", 2, placement=previous)
    add_pods(store, "back", range(2))
    old = a_worker("back", 0, node="leaf-a-n0", gated=False)
    old["metadata"].update(
        name="back-old-0", uid="uid-old", deletionTimestamp="2026-01-01T00:00:00Z"
    )
    with store.lock:
        store.upsert_pod(old)
    memory = PlacerMemory()
    intent = plan.decide(
        work_of(store, "back"), cycle_of(store), rules(), memory, Freed.anywhere(0)
    )
    assert (intent.placement, intent.placed) == (None, False)
    assert memory.leaving_since == {"uid-back": NOW}
