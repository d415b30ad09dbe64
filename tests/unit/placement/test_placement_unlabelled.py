"""Nodes outside the labelled fabric: usable by a cluster-wide plan only, and said so."""

from __future__ import annotations

from placement_builders import a_cluster, a_job, node_name, planned, waiting

from tpfabric_core import labels
from tpfabric_core.placement import plan_gang


def test_best_fit_never_prefers_an_unlabelled_node() -> None:
    # the unlabelled node would be the tightest "leaf" of all if it were one
    snapshot = a_cluster().with_leaves(1, nodes=4).unlabelled(node_name(0, 3)).snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=1).build()))
    assert plan.level == "leaf"
    assert plan.domain == "leaf-0"
    assert plan.nodes_by_rank != (node_name(0, 3),)


def test_a_required_leaf_gang_never_uses_unlabelled_nodes_and_says_why() -> None:
    cluster = a_cluster().with_leaves(1, nodes=4)
    cluster.unlabelled(node_name(0, 2)).unlabelled(node_name(0, 3))
    answer = waiting(plan_gang(cluster.snapshot(), a_job(workers=3).requiring("leaf").build()))
    assert [(c.domain, c.workers_fit) for c in answer.candidates] == [("leaf-0", 2)]
    assert answer.outside_nodes == 2
    assert (
        "2 node(s) outside the labelled fabric (no topology.tpfabric.io/leaf label)"
        in answer.summary
    )


def test_a_preferred_gang_may_spread_onto_unlabelled_nodes_at_the_cluster_level() -> None:
    cluster = a_cluster().with_leaves(1, nodes=4)
    cluster.unlabelled(node_name(0, 2)).unlabelled(node_name(0, 3), labels.SPINE)
    plan = planned(plan_gang(cluster.snapshot(), a_job(workers=3).preferring("leaf").build()))
    assert plan.level == "cluster"
    assert plan.domain_labels == ()
    # labelled nodes first, then one node from outside the fabric
    assert plan.nodes_by_rank[:2] == (node_name(0, 0), node_name(0, 1))
    assert any("outside the labelled fabric" in r for r in plan.reasons)


def test_a_single_worker_on_an_unlabelled_node_is_still_a_cluster_plan() -> None:
    cluster = a_cluster().with_leaves(1, nodes=2).busy(node_name(0, 0)).unlabelled(node_name(0, 1))
    snapshot = cluster.snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=1).build()))
    assert plan.nodes_by_rank == (node_name(0, 1),)
    assert plan.level == "cluster"
    assert plan.hops == 0


def test_a_cluster_without_labels_has_no_leaf_to_wait_for() -> None:
    cluster = a_cluster().with_leaves(1, nodes=2)
    cluster.unlabelled(node_name(0, 0)).unlabelled(node_name(0, 1))
    answer = waiting(plan_gang(cluster.snapshot(), a_job(workers=2).requiring("leaf").build()))
    assert answer.candidates == ()
    assert answer.summary.startswith("job: there is no leaf domain; 2 node(s) outside")
    assert "can never be met" in answer.summary
