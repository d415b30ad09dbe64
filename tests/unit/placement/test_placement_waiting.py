"""Waiting gangs: no wait for a level that can never hold them, and messages that stay put."""

from __future__ import annotations

import pytest
from placement_builders import a_cluster, a_job, node_name, planned, waiting

from tpfabric_core.errors import InputError
from tpfabric_core.placement import (
    CapacitySnapshot,
    ClusterTopology,
    NodeState,
    parse_levels,
    plan_gang,
)


def test_a_gang_bigger_than_any_leaf_considers_a_spine_at_once() -> None:
    snapshot = a_cluster().with_leaves(4, nodes=4).snapshot()
    job = a_job(workers=6).preferring("leaf", max_wait=300).build()
    plan = planned(plan_gang(snapshot, job, waited_seconds=0))
    assert plan.level == "spine"
    assert (
        "no leaf domain can ever hold 6 workers (largest holds 4): considered spine at once"
        in plan.reasons
    )


def test_a_gang_too_big_for_leaves_waits_at_the_spine_with_the_reason() -> None:
    cluster = a_cluster().with_leaves(4, nodes=4, per_spine=2, spines_per_block=2)
    cluster.busy(node_name(0, 0), node_name(2, 0))  # each spine has 7 free now, 8 ever
    job = a_job(workers=8).preferring("leaf", max_wait=20).build()
    answer = waiting(plan_gang(cluster.snapshot(), job, waited_seconds=5))
    assert answer.level == "spine"
    assert "no leaf domain can ever hold 8 workers (largest holds 4): considered spine at once" in (
        answer.summary
    )
    assert "will consider a block domain once it has waited 20 s" in answer.summary
    assert answer.relax_after_seconds == 20


def test_skipped_levels_do_not_eat_into_the_wait_of_the_next() -> None:
    cluster = a_cluster().with_leaves(4, nodes=4, per_spine=2, spines_per_block=2)
    cluster.busy(node_name(0, 0), node_name(2, 0))
    job = a_job(workers=8).preferring("leaf", max_wait=20).build()
    plan = planned(plan_gang(cluster.snapshot(), job, waited_seconds=20))
    assert plan.level == "block"
    assert any("no spine domain fits; relaxed to block" in r for r in plan.reasons)


def test_a_required_level_that_can_never_hold_the_gang_says_so_plainly() -> None:
    snapshot = a_cluster().with_leaves(2, nodes=4).snapshot()
    answer = waiting(plan_gang(snapshot, a_job(workers=6).requiring("leaf").build()))
    assert "no leaf domain can ever hold 6 workers (the largest holds 4" in answer.summary
    assert "can never be met" in answer.summary
    assert answer.relax_after_seconds is None


def test_a_required_level_that_could_hold_the_gang_later_is_a_capacity_wait() -> None:
    snapshot = a_cluster().with_leaves(1, nodes=4).busy(node_name(0, 0)).snapshot()
    answer = waiting(plan_gang(snapshot, a_job(workers=4).requiring("leaf").build()))
    assert "waiting for one leaf domain" in answer.summary
    assert "never" not in answer.summary


def test_a_gang_bigger_than_the_whole_cluster_is_told_so() -> None:
    snapshot = a_cluster().with_leaves(1, nodes=2).snapshot()
    answer = waiting(plan_gang(snapshot, a_job(workers=3).preferring("leaf", 60).build()))
    assert "not even the whole cluster can ever hold 3 workers (it holds 2" in answer.summary
    assert answer.relax_after_seconds is None


def test_the_pods_node_selector_bounds_what_a_domain_could_ever_hold() -> None:
    eligible = [node_name(leaf, k) for leaf in range(2) for k in range(2)]
    snapshot = a_cluster().with_leaves(2, nodes=4).snapshot()
    job = a_job(workers=3).preferring("leaf", max_wait=300).only_on(*eligible).build()
    plan = planned(plan_gang(snapshot, job))
    assert plan.level == "spine"
    assert any("largest holds 2" in r for r in plan.reasons)


def test_a_waiting_summary_is_the_same_every_second_of_a_step() -> None:
    snapshot = a_cluster().with_leaves(2, nodes=4).busy(node_name(0, 0), node_name(1, 0)).snapshot()
    job = a_job(workers=4).preferring("leaf", max_wait=20).build()
    answers = [waiting(plan_gang(snapshot, job, waited_seconds=t)) for t in (0, 1, 7.5, 19.9)]
    assert len({a.summary for a in answers}) == 1
    assert {a.relax_after_seconds for a in answers} == {20}
    assert planned(plan_gang(snapshot, job, waited_seconds=20)).level == "spine"


def test_top_candidates_bound_what_a_status_shows() -> None:
    snapshot = a_cluster().with_leaves(12, nodes=2).busy(*(node_name(i, 0) for i in range(12)))
    answer = waiting(plan_gang(snapshot.snapshot(), a_job(workers=2).requiring("leaf").build()))
    shown, more = answer.top_candidates(5)
    assert len(shown) == 5
    assert more == 7
    assert answer.top_candidates(50) == (answer.candidates, 0)
    assert answer.explain(limit=3).endswith("and 9 more domain(s)")


def test_any_configured_level_name_can_be_asked_for() -> None:
    levels = parse_levels("zone=example.com/zone,rack=example.com/rack")
    topology = ClusterTopology.from_node_labels(
        {f"n{k}": {"example.com/zone": "z", "example.com/rack": f"r{k // 2}"} for k in range(4)},
        levels,
    )
    snapshot = CapacitySnapshot.from_node_states(
        topology, [NodeState(f"n{k}", free_gpus=8, free_rdma=8) for k in range(4)]
    )
    plan = planned(plan_gang(snapshot, a_job(workers=2).requiring("rack").build()))
    assert plan.level == "rack"
    assert plan.domain_labels == (("example.com/zone", "z"), ("example.com/rack", "r0"))
    with pytest.raises(InputError, match="use one of rack, zone, cluster"):
        plan_gang(snapshot, a_job(workers=2).requiring("leaf").build())
