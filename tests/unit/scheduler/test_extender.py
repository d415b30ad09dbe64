from __future__ import annotations

from typing import Any

import orjson
from builders import a_job, a_node, a_worker, extender_args

from tpfabric_core import labels
from tpfabric_scheduler.extender import filter_nodes, prioritize_nodes
from tpfabric_scheduler.protocol import ExtenderArgs, parse_extender_args
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


def a_planned_job(
    name: str, nodes: list[str], domain_labels: dict[str, str], *, level: str = "leaf"
) -> dict[str, Any]:
    """A job whose persisted plan carries the full label path of its domain."""
    job = a_job(name, len(nodes), plan=(level, domain_labels.get(labels.LEAF, level), nodes))
    job["status"]["placement"]["domainLabels"] = domain_labels
    return job


def args_for(pod: dict[str, Any], nodes: list[str] = NODES) -> ExtenderArgs:
    return parse_extender_args(orjson.dumps(extender_args(pod, nodes)))


LEAF_A = {labels.BLOCK: "b1", labels.SPINE: "su1", labels.LEAF: "leaf-a"}


# -- pods that are not workers ---------------------------------------------------------------


def test_a_pod_that_is_not_a_worker_passes_through() -> None:
    pod = {"metadata": {"name": "web", "namespace": "ns"}}
    result, counts = filter_nodes(a_store(), args_for(pod))
    assert result.node_names == NODES
    assert counts == {}
    assert prioritize_nodes(a_store(), args_for(pod)) == []


def test_a_pod_that_is_not_a_worker_may_land_on_a_reserved_node() -> None:
    store = a_store(["a1", "a2"])  # a1, a2 reserved: the job's pods are not bound yet
    result, _ = filter_nodes(store, args_for({"metadata": {"name": "web", "namespace": "ns"}}))
    assert result.node_names == NODES


# -- the planned domain ----------------------------------------------------------------------


#: what kube-scheduler sends once its own filters rejected a worker's planned node a1
WITHOUT_A1 = ["a2", "a3", "b1", "b2"]


def test_a_worker_gets_its_planned_node_alone_and_no_reasons_for_the_others() -> None:
    store = a_store(["a1", "a2"])
    result, counts = filter_nodes(store, args_for(a_worker("job", 0, gated=False)))
    # one feasible node: kube-scheduler scores nothing, does not call prioritize and binds the
    # pod there, so it never shows why the other nodes were left out: none are worded
    assert result.node_names == ["a1"]
    assert result.failed == {}
    assert result.failed_unresolvable == {}
    assert result.error == ""
    # the filter metric still counts every node left out, by its reason
    assert counts == {
        "outside-planned-domain": 2,
        "planned-for-another-rank": 1,
        "not-the-planned-node": 1,
    }


def test_a_worker_whose_planned_node_failed_is_kept_inside_its_planned_domain() -> None:
    store = a_store(["a1", "a2"])
    result, counts = filter_nodes(store, args_for(a_worker("job", 0, gated=False), WITHOUT_A1))
    assert result.node_names == ["a3"]  # a2 holds rank 1; b1, b2 are outside leaf-a
    assert set(result.failed_unresolvable) == {"a2", "b1", "b2"}
    assert "outside the planned leaf leaf-a" in result.failed_unresolvable["b1"]
    assert result.failed_unresolvable["a2"] == "tpfabric: planned for rank 1 of job ns/job"
    assert counts == {"outside-planned-domain": 2, "planned-for-another-rank": 1}


def test_the_domain_is_matched_on_its_full_label_path() -> None:
    # two leaves named "leaf-1", under different spines: only the planned one's nodes are in
    store = ClusterStore()
    for name, spine in (("s1-n1", "su1"), ("s1-n2", "su1"), ("s2-n1", "su2"), ("s2-n2", "su2")):
        store.upsert_node(a_node(name, "leaf-1", spine))
    domain = {labels.BLOCK: "b1", labels.SPINE: "su1", labels.LEAF: "leaf-1"}
    store.upsert_job(a_planned_job("job", ["s1-n1"], domain))
    names = ["s1-n2", "s2-n1", "s2-n2"]  # its planned s1-n1 failed kube-scheduler's filters
    result, counts = filter_nodes(store, args_for(a_worker("job", 0), names))
    assert result.node_names == ["s1-n2"]
    assert set(result.failed_unresolvable) == {"s2-n1", "s2-n2"}
    assert counts == {"outside-planned-domain": 2}
    scores = dict(prioritize_nodes(store, args_for(a_worker("job", 0), names)))
    assert scores["s2-n1"] == scores["s2-n2"] == 0
    assert scores["s1-n2"] > 0


def test_a_plan_persisted_without_domain_labels_falls_back_to_the_level_key() -> None:
    store = a_store(["a1", "a2"])  # a_job's plan has no domainLabels
    result, _ = filter_nodes(store, args_for(a_worker("job", 0), WITHOUT_A1))
    assert result.node_names == ["a3"]


def test_domain_labels_win_over_the_level_and_domain_fields() -> None:
    store = a_store()
    store.upsert_job(a_planned_job("job", ["b1", "b2"], {labels.SPINE: "su1"}, level="spine"))
    result, _ = filter_nodes(store, args_for(a_worker("job", 0), ["a1", "a2", "a3", "b2"]))
    assert sorted(result.node_names) == ["a1", "a2", "a3"]


def test_a_plan_spread_over_the_whole_cluster_keeps_every_node_but_other_ranks() -> None:
    store = a_store()
    store.upsert_job(a_job("job", 2, plan=("cluster", "cluster", ["a1", "b2"])))
    result, _ = filter_nodes(store, args_for(a_worker("job", 0, gated=False), WITHOUT_A1))
    assert sorted(result.node_names) == ["a2", "a3", "b1"]
    assert result.failed == {}
    assert set(result.failed_unresolvable) == {"b2"}
    scores = dict(prioritize_nodes(store, args_for(a_worker("job", 0, gated=False))))
    assert scores["a1"] == 10
    assert scores["b2"] == 0


# -- the freshest plan -----------------------------------------------------------------------


def test_a_plan_just_written_by_the_placer_counts_before_its_watch_event() -> None:
    store = a_store()  # the job as the watch delivered it: no plan yet
    job = store.jobs["ns/job"]
    store.record_plan(
        job,
        {"state": "Planned", "level": "leaf", "domain": "leaf-b", "nodes": ["b1", "b2"],
         "domainLabels": {labels.SPINE: "su1", labels.LEAF: "leaf-b"}},
    )  # fmt: skip
    result, _ = filter_nodes(store, args_for(a_worker("job", 1)))
    assert result.node_names == ["b2"]


def test_a_job_created_again_under_the_same_name_never_sees_the_old_plan() -> None:
    store = a_store()
    store.record_plan(
        store.jobs["ns/job"],
        {"state": "Planned", "level": "leaf", "domain": "leaf-b", "nodes": ["b1", "b2"]},
    )
    again = a_job("job", 2)
    again["metadata"]["uid"] = "uid-job-2"  # its delete event was missed
    store.upsert_job(again)
    result, counts = filter_nodes(store, args_for(a_worker("job", 0)))
    assert result.node_names == []
    assert counts == {"job-not-planned": len(NODES)}


# -- reservations of every gang ----------------------------------------------------------------


def test_a_node_reserved_for_another_gang_is_filtered_out_unresolvably() -> None:
    store = a_store(["a1", "a2"])
    store.upsert_job(a_job("other", 2, plan=("leaf", "leaf-a", ["a3", "b1"])))
    result, counts = filter_nodes(store, args_for(a_worker("job", 0)))
    assert result.node_names == ["a1"]
    assert counts == {
        "outside-planned-domain": 2,
        "planned-for-another-rank": 1,
        "reserved-by-another-gang": 1,
    }
    # the reasons are worded when they are answered: the planned node failed kube-scheduler's
    # own filters
    result, counts = filter_nodes(store, args_for(a_worker("job", 0), WITHOUT_A1))
    assert result.node_names == []
    assert result.failed_unresolvable["a3"] == "tpfabric: reserved for rank 0 of job ns/other"
    assert counts == {
        "outside-planned-domain": 2,
        "planned-for-another-rank": 1,
        "reserved-by-another-gang": 1,
    }
    scores = dict(prioritize_nodes(store, args_for(a_worker("job", 0))))
    assert scores["a3"] == 0
    assert scores["a1"] == 10


def test_a_reservation_ends_when_its_rank_binds() -> None:
    store = a_store(["a1", "a2"])
    store.upsert_job(a_job("other", 1, plan=("leaf", "leaf-a", ["a3"])))
    store.upsert_pod(a_worker("other", 0, node="a3", gated=False))
    result, _ = filter_nodes(store, args_for(a_worker("job", 0), WITHOUT_A1))
    assert result.node_names == ["a3"]  # a3's fit is kube-scheduler's own filter's call


def test_the_workers_own_planned_node_is_kept_though_it_is_reserved_for_it() -> None:
    store = a_store(["a1", "a2"])
    assert store.reservations()["a1"] == (("ns/job", 0),)
    result, _ = filter_nodes(store, args_for(a_worker("job", 0)))
    assert "a1" in result.node_names


def test_another_ranks_reservation_names_the_rank() -> None:
    store = a_store()
    store.upsert_job(a_planned_job("job", ["a1", "a2"], LEAF_A))
    # what kube-scheduler sends once its own filters rejected rank 1's planned node a2
    result, _ = filter_nodes(store, args_for(a_worker("job", 1), ["a1", "a3", "b1", "b2"]))
    assert result.node_names == ["a3"]
    assert result.failed_unresolvable["a1"] == "tpfabric: planned for rank 0 of job ns/job"


# -- workers without a plan ------------------------------------------------------------------


def test_a_released_worker_whose_plan_is_not_visible_yet_is_retried_not_parked() -> None:
    # released pods always have a plan: this replica's watch lags (or another replica placed
    # it). An Error makes kube-scheduler retry after a backoff; an unresolvable answer would
    # park the pod as unschedulable until some cluster event, for minutes.
    result, counts = filter_nodes(a_store(), args_for(a_worker("job", 0, gated=False)))
    assert result.node_names == []
    assert result.failed == {}
    assert result.failed_unresolvable == {}
    assert result.error == "tpfabric: the gang plan of job ns/job is not visible here yet"
    assert counts == {"job-not-planned": len(NODES)}


def test_a_worker_without_a_job_is_retried_with_the_reason() -> None:
    result, counts = filter_nodes(a_store(), args_for(a_worker("ghost", 0, gated=False)))
    assert result.node_names == []
    assert result.failed_unresolvable == {}
    assert "ns/ghost not known yet" in result.error
    assert counts == {"unknown-job": len(NODES)}


# -- prioritize --------------------------------------------------------------------------------


def test_the_planned_node_scores_highest_and_degraded_nodes_lowest_in_the_domain() -> None:
    store = a_store(["b1", "a2"])  # rank 0 outside leaf-a: a1 is a free domain node
    scores = dict(prioritize_nodes(store, args_for(a_worker("job", 1, gated=False))))
    assert scores["a2"] == 10
    assert scores["a3"] == 1
    assert scores["b1"] == scores["b2"] == 0
    assert 1 < scores["a1"] < 10


def test_best_fit_prefers_the_fuller_node_of_the_domain() -> None:
    store = a_store()
    store.upsert_node(a_node("a1", "leaf-a", gpus=16))
    store.upsert_pod(a_worker("other", 0, node="a1", gated=False))  # a1: 8 of 16 used
    store.upsert_node(a_node("a2", "leaf-a"))
    store.upsert_job(a_job("job", 2, plan=("leaf", "leaf-a", ["a3", "b1"])))
    scores = dict(prioritize_nodes(store, args_for(a_worker("job", 0, gated=False))))
    assert scores["a3"] == 10
    assert scores["a1"] > scores["a2"]


def test_a_node_off_the_roce_contract_scores_lowest_in_the_domain_as_a_degraded_one() -> None:
    store = a_store(["b1", "a2"])
    node = a_node("a1", "leaf-a")  # links healthy, PFC off on the lossless priority
    node["status"]["conditions"].append({"type": "FabricContractMet", "status": "False"})
    store.upsert_node(node)
    scores = dict(prioritize_nodes(store, args_for(a_worker("job", 1, gated=False))))
    assert scores["a1"] == scores["a3"] == 1
