"""What re-queueing reads: the store's freed log (freed.py). Each change that may free capacity
names the nodes it freed (a pod gone or finished: its node; a worker bound: its rank's reserved
node; a plan dropped: its nodes), a change of the fabric's shape reads "anywhere", and a change
that frees nothing names nothing."""

from __future__ import annotations

from placer_world import a_node, a_worker, two_leaves
from policy_world import add_job, add_pods, planned

from tpfabric_scheduler.freed import FREED_LOG_LENGTH, FreedLog
from tpfabric_scheduler.store import ClusterStore


def test_a_pod_that_goes_or_finishes_names_its_node() -> None:
    store = ClusterStore()
    two_leaves(store)
    add_pods(store, "busy", range(2), nodes=["leaf-a-n0", "leaf-b-n1"], gated=False)
    since = store.freed_generation
    with store.lock:
        store.delete_pod("ns/busy-worker-0")
        done = a_worker("busy", 1, node="leaf-b-n1", gated=False)
        done["status"]["phase"] = "Succeeded"
        store.upsert_pod(done)
    assert store.freed.since(since) == {"leaf-a-n0", "leaf-b-n1"}


def test_a_worker_that_binds_names_the_node_its_rank_held() -> None:
    store = ClusterStore()
    two_leaves(store)
    add_job(store, "gang", 2, placement=planned())
    add_pods(store, "gang", range(2))
    since = store.freed_generation
    with store.lock:  # rank 1 planned on leaf-a-n1 binds elsewhere
        store.upsert_pod(a_worker("gang", 1, node="leaf-b-n3", gated=False))
    assert store.freed.since(since) == {"leaf-a-n1"}


def test_a_dropped_plan_names_its_nodes_and_a_job_without_one_names_none() -> None:
    store = ClusterStore()
    two_leaves(store)
    add_job(store, "gang", 2, placement=planned())
    add_job(store, "never-planned", 2)
    since = store.freed_generation
    with store.lock:
        store.delete_job("ns/never-planned")
    assert store.freed.since(since) == frozenset()
    with store.lock:
        store.delete_job("ns/gang")
    assert store.freed.since(since) == {"leaf-a-n0", "leaf-a-n1"}


def test_a_node_added_or_relabelled_reads_anywhere() -> None:
    store = ClusterStore()
    two_leaves(store)
    since = store.freed_generation
    with store.lock:
        store.upsert_node(a_node("leaf-a-n0", "leaf-b"))
    assert store.freed.since(since) is None


def test_a_log_kept_short_reads_anywhere_before_what_it_kept() -> None:
    log = FreedLog()
    for k in range(FREED_LOG_LENGTH + 1):
        log.record(f"n{k}")
    assert log.since(0) is None
    assert log.since(log.generation - 1) == {f"n{FREED_LOG_LENGTH}"}
    view = log.view()
    log.record("later")
    assert view.since(view.generation - 1) == {f"n{FREED_LOG_LENGTH}"}, "a view reads its own"
