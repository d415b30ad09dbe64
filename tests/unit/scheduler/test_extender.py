from __future__ import annotations

import orjson
from builders import a_job, a_node, a_worker, extender_args

from tpfabric_scheduler.extender import filter_nodes, prioritize_nodes
from tpfabric_scheduler.protocol import parse_extender_args
from tpfabric_scheduler.store import ClusterStore

NODES = ["a1", "a2", "a3", "b1", "b2"]


def a_store(plan_nodes: list[str] | None = None) -> ClusterStore:
    store = ClusterStore()
    for name in NODES:
        store.upsert_node(
            a_node(
                name,
                leaf="leaf-a" if name.startswith("a") else "leaf-b",
                health="degraded" if name == "a3" else "ok",
            )
        )
    plan = ("leaf", "leaf-a", plan_nodes) if plan_nodes is not None else None
    store.upsert_job(a_job("job", 2, plan=plan))
    return store


def args_for(pod: dict[str, object]) -> object:
    return parse_extender_args(orjson.dumps(extender_args(pod, NODES)))


def test_a_pod_that_is_not_a_worker_passes_through() -> None:
    pod = {"metadata": {"name": "web", "namespace": "ns"}}
    result, counts = filter_nodes(a_store(), args_for(pod))
    assert result.node_names == NODES
    assert counts == {}
    assert prioritize_nodes(a_store(), args_for(pod)) == []


def test_a_worker_is_kept_inside_its_planned_domain() -> None:
    store = a_store(["a1", "a2"])
    result, counts = filter_nodes(store, args_for(a_worker("job", 0, gated=False)))
    assert sorted(result.node_names) == ["a1", "a3"]
    assert set(result.failed_unresolvable) == {"b1", "b2"}
    assert "outside the planned leaf leaf-a" in result.failed_unresolvable["b1"]
    assert result.failed == {"a2": "tpfabric: planned for rank 1 of job ns/job"}
    assert counts == {"outside-planned-domain": 2, "planned-for-another-rank": 1}


def test_the_planned_node_scores_highest_and_degraded_nodes_lowest_in_the_domain() -> None:
    store = a_store(["a1", "a2"])
    scores = dict(prioritize_nodes(store, args_for(a_worker("job", 1, gated=False))))
    assert scores["a2"] == 10
    assert scores["a3"] == 1
    assert scores["b1"] == scores["b2"] == 0
    assert 1 < scores["a1"] < 10


def test_best_fit_prefers_the_fuller_node_of_the_domain() -> None:
    store = a_store(["a3", "b1"])  # neither a1 nor a2 is planned for rank 0
    store.upsert_node(a_node("a1", "leaf-a", gpus=16))
    store.upsert_pod(a_worker("other", 0, node="a1", gated=False))  # a1: 8 of 16 used
    store.upsert_job(a_job("job", 2, plan=("leaf", "leaf-a", ["a3", "a2"])))
    scores = dict(prioritize_nodes(store, args_for(a_worker("job", 0, gated=False))))
    assert scores["a3"] == 10
    assert scores["a1"] > scores["b1"]


def test_a_worker_of_a_job_without_a_plan_is_held_back_with_the_reason() -> None:
    result, _ = filter_nodes(a_store(), args_for(a_worker("job", 0, gated=False)))
    assert result.node_names == []
    assert set(result.failed.values()) == {"tpfabric: job ns/job has no gang plan yet"}


def test_a_worker_without_a_job_cannot_be_placed() -> None:
    result, counts = filter_nodes(a_store(), args_for(a_worker("ghost", 0, gated=False)))
    assert result.node_names == []
    assert counts == {"unknown-job": len(NODES)}


def test_a_plan_spread_over_the_whole_cluster_keeps_every_node_but_other_ranks() -> None:
    store = a_store()
    store.upsert_job(a_job("job", 2, plan=("cluster", "cluster", ["a1", "b2"])))
    result, _ = filter_nodes(store, args_for(a_worker("job", 0, gated=False)))
    assert sorted(result.node_names) == ["a1", "a2", "a3", "b1"]
    assert set(result.failed) == {"b2"}
    assert result.failed_unresolvable == {}
    scores = dict(prioritize_nodes(store, args_for(a_worker("job", 0, gated=False))))
    assert scores["a1"] == 10
