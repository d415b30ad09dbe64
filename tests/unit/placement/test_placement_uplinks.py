"""Uplinks in the cost model, and a planner that fills small pieces first and avoids busy ones."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_builders import a_cluster, a_job, node_name, planned

from tpfabric_core.placement import plan_gang
from tpfabric_core.placement._capacity import pick_fewest
from tpfabric_core.placement.cost import (
    DEFAULT_COST,
    UplinkLoad,
    edge_uplinks,
    uplink_capacity,
)


def leaves_used(plan_nodes: tuple[str, ...]) -> Counter[str]:
    """Return workers per leaf name (``l03-n01`` -> ``l03``)."""
    return Counter(node.split("-")[0] for node in plan_nodes)


def test_a_flow_inside_a_leaf_climbs_no_uplink() -> None:
    topology = a_cluster().with_leaves(4, nodes=4).topology()
    a, b = topology.index_of[node_name(0, 0)], topology.index_of[node_name(0, 1)]
    assert edge_uplinks(topology, a, b) == []


def test_a_flow_across_spines_climbs_its_leaf_and_spine_uplinks() -> None:
    topology = a_cluster().with_leaves(4, nodes=4, per_spine=2).topology()
    a, b = topology.index_of[node_name(0, 0)], topology.index_of[node_name(3, 0)]
    leaf = topology.node_domain[0][a]
    spine = topology.node_domain[1][a]
    assert edge_uplinks(topology, a, b) == [(0, leaf), (1, spine)]
    assert edge_uplinks(topology, b, a)[0] == (0, topology.node_domain[0][b])


def test_an_uplinks_capacity_follows_the_oversubscription_above_it() -> None:
    topology = a_cluster().with_leaves(4, nodes=4, per_spine=2).topology()
    # leaf -> spine: 4 nodes x 8 rails x (1 - 0.1 background) / 1.0
    assert uplink_capacity(topology, 0, 0) == pytest.approx(4 * 8 * 0.9)
    # spine -> block: 8 nodes x 8 rails x (1 - 0.25) / 2.0
    assert uplink_capacity(topology, 1, 0) == pytest.approx(8 * 8 * 0.75 / 2)


def test_uplink_load_is_flows_over_capacity() -> None:
    topology = a_cluster().with_leaves(4, nodes=4, per_spine=2).topology()
    capacity = uplink_capacity(topology, 0, 1)
    load = UplinkLoad.from_flows(topology, {(0, 1): capacity / 2})
    assert len(load.per_depth) == topology.cluster_depth
    assert load.per_depth[0][1] == pytest.approx(0.5)
    assert load.per_depth[0][0] == 0.0
    assert load.after_adding(topology, 0, 1, capacity / 4, DEFAULT_COST) == pytest.approx(0.75)


def test_a_gang_that_must_span_leaves_uses_up_small_pieces_before_a_whole_leaf() -> None:
    # one spine of four leaves: two whole (4 free) and two with one free node each
    snapshot = (
        a_cluster()
        .with_leaves(4, nodes=4, per_spine=4)
        .busy_leaf(2, nodes=3)
        .busy_leaf(3, nodes=3)
        .snapshot()
    )
    plan = planned(plan_gang(snapshot, a_job(workers=6).build()))
    used = leaves_used(plan.nodes_by_rank)
    assert used["l02"] == 1
    assert used["l03"] == 1
    # one whole leaf stays whole for the next gang
    assert sorted((used["l00"], used["l01"])) == [0, 4]


def test_without_uplink_load_the_first_spine_of_equal_ones_is_taken() -> None:
    snapshot = a_cluster().with_leaves(4, nodes=4, per_spine=2).snapshot()
    plan = planned(plan_gang(snapshot, a_job(workers=6).build()))
    assert plan.domain == "spine-0"


def test_a_spanning_gang_goes_where_the_leaf_uplinks_are_not_saturated() -> None:
    snapshot = a_cluster().with_leaves(4, nodes=4, per_spine=2).snapshot()
    topology = snapshot.topology
    busy = {(0, leaf): uplink_capacity(topology, 0, leaf) for leaf in (0, 1)}
    load = UplinkLoad.from_flows(topology, busy)
    plan = planned(plan_gang(snapshot, a_job(workers=6).build(), uplink_load=load))
    assert plan.domain == "spine-1"
    assert set(leaves_used(plan.nodes_by_rank)) == {"l02", "l03"}
    assert any("kept off the 2 leaf uplink(s)" in r and "leaf-0, leaf-1" in r for r in plan.reasons)


def test_uplink_load_never_changes_a_gang_that_fits_one_leaf() -> None:
    snapshot = a_cluster().with_leaves(4, nodes=4, per_spine=2).snapshot()
    topology = snapshot.topology
    load = UplinkLoad.from_flows(topology, {(0, 0): 10 * uplink_capacity(topology, 0, 0)})
    request = a_job(workers=4).build()
    aware = planned(plan_gang(snapshot, request, uplink_load=load))
    assert aware.nodes_by_rank == planned(plan_gang(snapshot, request)).nodes_by_rank
    assert not [r for r in aware.reasons if "uplink" in r], "no uplink crossed, none explained"


def test_saturated_children_are_used_when_nothing_else_fits() -> None:
    snapshot = a_cluster().with_leaves(2, nodes=4, per_spine=2).snapshot()
    topology = snapshot.topology
    load = UplinkLoad.from_flows(
        topology, {(0, leaf): 2 * uplink_capacity(topology, 0, leaf) for leaf in (0, 1)}
    )
    plan = planned(plan_gang(snapshot, a_job(workers=8).build(), uplink_load=load))
    assert plan.leaves_spanned == 2
    assert any(r.startswith("crosses 2 of the 2 leaf uplink(s)") for r in plan.reasons)


def test_pieces_first_takes_small_items_whole_then_best_fits_the_rest() -> None:
    items = [(0, 4, 0), (1, 4, 0), (2, 1, 0), (3, 1, 0)]
    assert pick_fewest(items, 6) == [(0, 4), (1, 2)]
    assert pick_fewest(items, 6, pieces_first=True) == [(2, 1), (3, 1), (0, 4)]


@settings(max_examples=200, deadline=None)
@given(
    capacities=st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=8),
    penalties=st.lists(st.integers(min_value=0, max_value=2), min_size=8, max_size=8),
    data=st.data(),
)
def test_pieces_first_covers_exactly_within_each_items_capacity(
    capacities: list[int], penalties: list[int], data: st.DataObject
) -> None:
    total = sum(capacities)
    if total == 0:
        return
    count = data.draw(st.integers(min_value=1, max_value=total))
    items = [(i, cap, penalties[i]) for i, cap in enumerate(capacities)]
    picks = pick_fewest(items, count, pieces_first=True)
    assert sum(workers for _, workers in picks) == count
    assert len({index for index, _ in picks}) == len(picks)
    for index, workers in picks:
        assert 0 < workers <= capacities[index]
