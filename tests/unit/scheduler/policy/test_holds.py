"""Order (policy/holds.py): a gang that waited longer than the head-of-line bound holds the best
domain it would take; younger gangs are not planned into it and are told who holds it."""

from __future__ import annotations

from placer_world import two_leaves
from policy_world import NOW, add_job, add_pods, cycle_of, rules, work_of

from tpfabric_core.api.placement import read_placement
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.policy import plan
from tpfabric_scheduler.policy.holds import head_of_line, without_held
from tpfabric_scheduler.policy.requeue import Freed
from tpfabric_scheduler.store import ClusterStore
from tpfabric_scheduler.work import Cycle, PlacerMemory


def one_node_busy_in_each_leaf(store: ClusterStore) -> None:
    two_leaves(store)
    add_job(store, "busy", 2)
    add_pods(store, "busy", range(2), nodes=["leaf-a-n3", "leaf-b-n3"], gated=False)


def waited_long(store: ClusterStore, name: str, workers: int) -> None:
    since = {"state": "Waiting", "waitingSince": rfc3339(NOW - 400)}
    add_job(store, name, workers, placement=since, created=NOW - 500)
    add_pods(store, name, range(workers))


def test_a_head_of_line_gang_holds_its_best_domain_from_younger_gangs() -> None:
    store = ClusterStore()
    one_node_busy_in_each_leaf(store)
    waited_long(store, "old", 4)
    add_job(store, "young", 1)
    add_pods(store, "young", range(1))
    cycle = cycle_of(store)
    waits = plan.decide(work_of(store, "old"), cycle, rules(), PlacerMemory(), Freed.anywhere(0))
    assert "holds leaf 'leaf-a', younger or lower-priority gangs may not take it" in (
        read_placement(waits.placement).message
    )
    held = {str(hold) for hold in cycle.held_for_hol.values()}
    assert held == {
        f"leaf 'leaf-a' is held for head-of-line job ns/old (waiting since {rfc3339(NOW - 400)})"
    }
    trimmed = without_held(cycle, work_of(store, "young"))
    index_of = cycle.snapshot.topology.index_of
    assert trimmed.free_gpus[index_of["leaf-a-n0"]] == 0
    assert cycle.snapshot.free_gpus[index_of["leaf-a-n0"]] == 8, "the cycle's own stays"


def test_a_gang_that_could_never_fit_holds_nothing_and_says_so() -> None:
    store = ClusterStore()
    one_node_busy_in_each_leaf(store)
    waited_long(store, "huge", 9)
    cycle = cycle_of(store)
    waits = plan.decide(work_of(store, "huge"), cycle, rules(), PlacerMemory(), Freed.anywhere(0))
    assert "it holds no domain, none it may use could ever hold it" in (
        read_placement(waits.placement).message
    )
    assert cycle.held_for_hol == {}


def test_a_surge_group_never_holds_a_domain() -> None:
    store = ClusterStore()
    surge = {"conditions": [{"type": "Surge", "status": "True"}]}
    add_job(store, "extra", 2, status=surge)
    add_job(store, "plain", 2)
    extra, plain = store.jobs["ns/extra"], store.jobs["ns/plain"]
    assert head_of_line(plain, 400, rules())
    assert not head_of_line(extra, 400, rules())
    assert not head_of_line(plain, 299, rules())


def test_older_gangs_returning_to_their_nodes_keep_them_from_younger_ones() -> None:
    store = ClusterStore()
    two_leaves(store)
    add_job(store, "young", 1)
    add_pods(store, "young", range(1))
    cycle: Cycle = cycle_of(store)
    index_of = cycle.snapshot.topology.index_of
    cycle.returning = {index_of["leaf-b-n0"]: ("2000-01-01T00:00:00Z", "ns/older")}
    trimmed = without_held(cycle, work_of(store, "young"))
    assert trimmed.free_gpus[index_of["leaf-b-n0"]] == 0
