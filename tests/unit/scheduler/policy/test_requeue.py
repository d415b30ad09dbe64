"""Re-evaluate only what a change can help (policy/requeue.py, with policy/waiting.py): a waiting
gang is planned again for capacity freed where it could fit, its own pods changing, its wait
crossing a level, or a hold; each event that cannot help leaves it waiting.

The world: two leaves of four 8-GPU nodes; gang ``waits`` asks for 4 workers x 8 GPUs in one
leaf. ``leaf-a-n0`` and every node of leaf-b run a bound 8-GPU pod, so leaf-a has room for 3.
"""

from __future__ import annotations

from dataclasses import replace

from placer_world import a_node, a_worker, two_leaves
from policy_world import NOW, add_job, add_pods, cycle_of, rules, work_of

from tpfabric_core.api.placement import StoredPlacement, read_placement
from tpfabric_core.timestamps import rfc3339
from tpfabric_scheduler.policy import plan
from tpfabric_scheduler.policy.requeue import Freed
from tpfabric_scheduler.policy.waiting import still_waiting
from tpfabric_scheduler.store import ClusterStore
from tpfabric_scheduler.work import Attempt, PlacerMemory, Rules


def busy_fabric() -> ClusterStore:
    store = ClusterStore()
    two_leaves(store)
    add_pods(store, "busy", range(5), nodes=["leaf-a-n0", *(f"leaf-b-n{i}" for i in range(4))])
    add_job(store, "waits", 4)
    add_pods(store, "waits", range(4))
    return store


def waited(store: ClusterStore) -> tuple[PlacerMemory, StoredPlacement]:
    """Plan ``waits`` once (it waits); return the memory of that attempt and its placement."""
    memory = PlacerMemory()
    cycle = cycle_of(store)
    freed = Freed.of_view(store, cycle.snapshot.topology).on(cycle.snapshot)
    intent = plan.decide(work_of(store, "waits"), cycle, rules(), memory, freed)
    placement = read_placement({**(intent.placement or {}), "waitingSince": rfc3339(NOW)})
    assert placement.waiting
    return memory, placement


def planned_again(
    store: ClusterStore,
    memory: PlacerMemory,
    placement: StoredPlacement,
    *,
    now: float = NOW + 5,
    settings: Rules | None = None,
) -> bool:
    """Return whether a cycle at ``now`` would plan ``waits`` again (the view's frees)."""
    item = replace(work_of(store, "waits", now), placement=placement)
    freed = Freed.of_view(store, cycle_of(store).snapshot.topology)
    return not still_waiting(item, now, freed, memory, settings or rules())


# -- capacity freed ----------------------------------------------------------------------------


def test_capacity_freed_where_the_gang_now_fits_plans_it_again() -> None:
    store = busy_fabric()
    memory, placement = waited(store)
    with store.lock:
        store.delete_pod("ns/busy-worker-0")  # leaf-a-n0 free: leaf-a holds 4
    assert planned_again(store, memory, placement)


def test_capacity_freed_in_a_domain_still_too_small_does_not() -> None:
    store = busy_fabric()
    memory, placement = waited(store)
    with store.lock:
        store.delete_pod("ns/busy-worker-1")  # leaf-b-n0 free: leaf-b holds 1 of 4
    assert store.freed_generation > memory.attempts["uid-waits"].freed_generation
    assert not planned_again(store, memory, placement)


def test_capacity_freed_short_of_one_worker_does_not() -> None:
    store = ClusterStore()
    two_leaves(store)
    with store.lock:  # leaf-a-n0 holds two 4-GPU pods; every leaf-b node is busy
        store.upsert_pod(a_worker("half", 0, node="leaf-a-n0", gated=False, gpus=4))
        store.upsert_pod(a_worker("half", 1, node="leaf-a-n0", gated=False, gpus=4))
    add_pods(store, "busy", range(4), nodes=[f"leaf-b-n{i}" for i in range(4)])
    add_job(store, "waits", 4)
    add_pods(store, "waits", range(4))
    memory, placement = waited(store)
    with store.lock:
        store.delete_pod("ns/half-worker-0")  # 4 GPUs free on leaf-a-n0: not one worker's 8
    assert not planned_again(store, memory, placement)
    with store.lock:
        store.delete_pod("ns/half-worker-1")  # now 8
    assert planned_again(store, memory, placement)


def test_a_node_relabelled_or_added_plans_every_waiting_gang_again() -> None:
    store = busy_fabric()
    memory, placement = waited(store)
    with store.lock:
        store.upsert_node(a_node("leaf-c-n0", "leaf-c"))  # a domain changed shape
    assert planned_again(store, memory, placement)


def test_a_change_of_a_busy_node_that_keeps_its_labels_does_not() -> None:
    store = busy_fabric()
    memory, placement = waited(store)
    node = a_node("leaf-b-n0", "leaf-b")
    node["spec"]["taints"] = [{"key": "maintenance", "value": "soon", "effect": "NoSchedule"}]
    with store.lock:
        store.upsert_node(node)  # named, in leaf-b, which holds none of the gang
    assert not planned_again(store, memory, placement)


def test_room_a_younger_gang_took_in_the_same_cycle_does_not() -> None:
    store = busy_fabric()
    memory, placement = waited(store)
    with store.lock:
        store.delete_pod("ns/busy-worker-0")
    cycle = cycle_of(store)
    freed = Freed.of_view(store, cycle.snapshot.topology)
    item = replace(work_of(store, "waits", NOW + 5), placement=placement)
    assert not still_waiting(item, NOW + 5, freed.on(cycle.snapshot), memory, rules())
    cycle.snapshot.free_gpus[cycle.snapshot.topology.index_of["leaf-a-n1"]] = 0  # planned
    assert still_waiting(item, NOW + 5, freed.on(cycle.snapshot), memory, rules())


def test_capacity_bound_by_other_pods_never_plans_it_again() -> None:
    store = busy_fabric()
    memory, placement = waited(store)
    with store.lock:
        store.upsert_pod(a_worker("tenant", 0, node="leaf-a-n1", gated=False, gpus=1))
    assert not planned_again(store, memory, placement)


# -- its own pods --------------------------------------------------------------------------------


def test_a_change_of_its_own_pods_plans_it_again() -> None:
    store = busy_fabric()
    memory, placement = waited(store)
    with store.lock:
        store.delete_pod("ns/waits-worker-3")  # its owner makes it again (a new uid)
        replacement = a_worker("waits", 3)
        replacement["metadata"]["uid"] = "uid-waits-3-again"
        store.upsert_pod(replacement)
    assert planned_again(store, memory, placement)


def test_a_change_of_another_gangs_pods_does_not() -> None:
    store = busy_fabric()
    memory, placement = waited(store)
    add_job(store, "other", 2)
    add_pods(store, "other", range(2))  # gated: it takes and frees nothing
    assert not planned_again(store, memory, placement)


# -- its wait crossing a level -------------------------------------------------------------------


def test_its_next_topology_level_opening_plans_it_again() -> None:
    store = busy_fabric()
    memory, placement = waited(store)
    memory.attempts["uid-waits"] = replace(memory.attempts["uid-waits"], relax_at=NOW + 60)
    assert not planned_again(store, memory, placement, now=NOW + 59)
    assert planned_again(store, memory, placement, now=NOW + 60)


def test_reaching_the_head_of_the_line_plans_it_again() -> None:
    store = busy_fabric()
    memory, placement = waited(store)
    assert not planned_again(store, memory, placement, now=NOW + 299)
    assert planned_again(store, memory, placement, now=NOW + 300)


# -- holds ---------------------------------------------------------------------------------------


def test_a_gang_that_met_a_hold_is_planned_again_each_cycle() -> None:
    store = busy_fabric()
    memory, placement = waited(store)
    memory.attempts["uid-waits"] = replace(memory.attempts["uid-waits"], holds=True)
    assert planned_again(store, memory, placement)


def test_a_gang_that_met_no_hold_is_not() -> None:
    store = busy_fabric()
    memory, placement = waited(store)
    assert memory.attempts["uid-waits"].holds is False
    assert not planned_again(store, memory, placement)


# -- what an attempt records ---------------------------------------------------------------------


def test_an_attempt_records_what_freed_capacity_must_reach() -> None:
    store = busy_fabric()
    memory, _ = waited(store)
    attempt = memory.attempts["uid-waits"]
    assert isinstance(attempt, Attempt)
    assert (attempt.depth, attempt.workers, attempt.gpus_per_worker) == (0, 4, 8)


def test_a_log_cut_short_reads_anywhere() -> None:
    store = busy_fabric()
    memory, placement = waited(store)
    store.freed.floor = store.freed_generation + 1  # the log no longer reaches the attempt
    with store.lock:
        store.delete_pod("ns/busy-worker-1")
    assert planned_again(store, memory, placement)
