from __future__ import annotations

from builders import a_job, a_node, a_worker

from tpfabric_core.placement.pod_fit import parse_quantity
from tpfabric_scheduler.store import ClusterStore


def test_bound_pods_use_node_capacity_and_deletion_gives_it_back() -> None:
    store = ClusterStore()
    store.upsert_node(a_node("n1", "leaf-a"))
    store.upsert_pod(a_worker("job", 0, node="n1", gated=False, gpus=6))
    assert store.free("n1", "nvidia.com/gpu") == 2
    store.delete_pod("ns/job-worker-0")
    assert store.free("n1", "nvidia.com/gpu") == 8


def test_an_update_moves_the_use_to_the_new_node() -> None:
    store = ClusterStore()
    store.upsert_node(a_node("n1", "leaf-a"))
    store.upsert_node(a_node("n2", "leaf-a"))
    store.upsert_pod(a_worker("job", 0, gated=True))
    assert store.free("n1", "nvidia.com/gpu") == 8
    store.upsert_pod(a_worker("job", 0, node="n2", gated=False))
    assert (store.free("n1", "nvidia.com/gpu"), store.free("n2", "nvidia.com/gpu")) == (8, 0)


def test_finished_pods_use_nothing() -> None:
    store = ClusterStore()
    store.upsert_node(a_node("n1", "leaf-a"))
    pod = a_worker("job", 0, node="n1", gated=False)
    pod["status"]["phase"] = "Succeeded"
    store.upsert_pod(pod)
    assert store.free("n1", "nvidia.com/gpu") == 8


def test_workers_are_grouped_by_job() -> None:
    store = ClusterStore()
    for index in range(3):
        store.upsert_pod(a_worker("job", index))
    assert sorted(store.workers["ns/job"]) == [f"ns/job-worker-{i}" for i in range(3)]
    store.delete_pod("ns/job-worker-1")
    assert len(store.workers["ns/job"]) == 2


def test_label_changes_bump_the_topology_generation_and_status_changes_do_not() -> None:
    store = ClusterStore()
    store.upsert_node(a_node("n1", "leaf-a"))
    generation = store.topology_generation
    store.upsert_node(a_node("n1", "leaf-a", ready=False))
    assert store.topology_generation == generation
    store.upsert_node(a_node("n1", "leaf-b"))
    assert store.topology_generation == generation + 1


def test_an_invalid_job_is_kept_and_flagged_not_dropped() -> None:
    store = ClusterStore()
    job = a_job("bad", 2)
    job["spec"]["tensorParallelSize"] = 3
    store.upsert_job(job)
    assert store.jobs["ns/bad"].job is None
    assert "tensorParallelSize 3" in store.jobs["ns/bad"].invalid_reason


def test_quantities_of_countable_resources() -> None:
    assert [parse_quantity(v) for v in ("8", 8, "1k", "2Ki", "3000m")] == [8, 8, 1000, 2048, 3]
