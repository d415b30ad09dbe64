from __future__ import annotations

import networkx as nx
import pytest
from fabric_builders import TinyFabric, storage_on_a_spine, two_unit_rail_fabric

from tpfabric_core import labels
from tpfabric_core.fabric.builder import fabric_from_description
from tpfabric_core.fabric.model import HcaRole, Link
from tpfabric_core.fabric_description import parse_fabric_description, uniform_fabric


def test_leaves_are_the_switches_nodes_plug_into_whatever_their_names() -> None:
    fabric = (
        TinyFabric().switch("SPINE-looking-leaf").switch("LEAF-looking-spine", "SPINE-looking-leaf")
        .node("n1", "SPINE-looking-leaf").build()
    )  # fmt: skip
    assert fabric.leaves == ("SPINE-looking-leaf",)
    assert fabric.level_of("LEAF-looking-spine") == 1


def test_switches_above_spines_are_core_tier() -> None:
    fabric = (
        TinyFabric().switch("l1").switch("s1", "l1").switch("c1", "s1").node("n1", "l1").build()
    )
    assert [fabric.level_of(s) for s in ("l1", "s1", "c1")] == [0, 1, 2]


def test_management_hosts_do_not_make_a_switch_a_leaf() -> None:
    fabric = (
        TinyFabric().switch("l1").switch("s1", "l1").node("n1", "l1")
        .hca("s1", role=HcaRole.MANAGEMENT, description="Aggregation Node").build()
    )  # fmt: skip
    assert fabric.leaves == ("l1",)
    assert fabric.level_of("s1") == 1


def test_a_spine_with_a_host_on_it_stays_a_spine() -> None:
    fabric = storage_on_a_spine()
    assert fabric.leaves == ("l1", "l2", "l3", "l4")
    assert fabric.switches_at(1) == ("s1", "s2")
    assert fabric.oversubscription("l1") == 2.0  # 8 down, 4 up: not 8 down over s2's 2
    assert "nfs-01" not in fabric.nodes
    assert [h.node for h in fabric.off_leaf_hcas] == ["nfs-01"]


def test_a_switch_without_hosts_cabled_like_a_leaf_is_not_a_core() -> None:
    fabric = (
        TinyFabric().switch("l1").switch("l2").switch("s1", "l1", "l2").switch("s2", "l1", "l2")
        .switch("x", "s1").node("n1", "l1").node("n2", "l2").build()
    )  # fmt: skip
    assert fabric.level_of("x") == 0
    assert fabric.switches_at(2) == ()
    assert fabric.block_of("n1") == fabric.spine_domain_of("n1")
    assert fabric.uplinks("s1") == ()


def test_leaf_of_gives_each_rails_leaf() -> None:
    fabric = two_unit_rail_fabric()
    assert fabric.leaf_of("u1-n1", 0) == "u1r0"
    assert fabric.leaf_of("u1-n1", 1) == "u1r1"
    assert fabric.leaf_of("u1-n1", 7) is None


def test_nodes_of_a_unit_share_a_leaf_domain_and_units_differ() -> None:
    fabric = two_unit_rail_fabric()
    assert fabric.leaf_domain_of("u1-n1") == fabric.leaf_domain_of("u1-n2")
    assert fabric.leaf_domain_of("u1-n1") != fabric.leaf_domain_of("u2-n1")
    assert labels.is_valid_label_value(fabric.leaf_domain_of("u1-n1"))


def test_a_node_missing_an_hca_stays_in_its_units_leaf_domain() -> None:
    fabric = (
        TinyFabric().switch("r0").switch("r1")
        .node("full", "r0", "r1").node("other", "r0", "r1").node("short", "r0").build()
    )  # fmt: skip
    assert fabric.leaf_domain_of("short") == fabric.leaf_domain_of("full")


def test_domain_ids_are_deterministic() -> None:
    assert two_unit_rail_fabric().leaf_domain_of("u2-n2") == two_unit_rail_fabric().leaf_domain_of(
        "u2-n2"
    )


def test_smallest_common_domain_climbs_only_as_far_as_needed() -> None:
    fabric = two_unit_rail_fabric()
    assert fabric.smallest_common_domain(["u1-n1", "u1-n2"]) == (
        "leaf",
        fabric.leaf_domain_of("u1-n1"),
    )
    level, _ = fabric.smallest_common_domain(["u1-n1", "u2-n1"]) or ("", "")
    assert level == "spine"


def test_smallest_common_domain_is_none_across_disconnected_fabrics() -> None:
    fabric = TinyFabric().switch("a").switch("b").node("n1", "a").node("n2", "b").build()
    assert fabric.smallest_common_domain(["n1", "n2"]) is None


def test_hops_count_switches_on_the_rail() -> None:
    fabric = two_unit_rail_fabric()
    assert fabric.hops("u1-n1", "u1-n2", 0) == 1
    assert fabric.hops("u1-n1", "u2-n1", 0) == 3
    assert fabric.hops("u1-n1", "u2-n1", 5) is None


def test_hops_through_a_core_tier() -> None:
    fabric = (
        TinyFabric().switch("l1").switch("l2").switch("s1", "l1").switch("s2", "l2")
        .switch("c1", "s1", "s2").node("n1", "l1").node("n2", "l2").build()
    )  # fmt: skip
    assert fabric.hops("n1", "n2", 0) == 5
    assert fabric.smallest_common_domain(["n1", "n2"]) == ("block", fabric.block_of("n1"))


def test_oversubscription_is_down_over_up_bandwidth() -> None:
    tiny = TinyFabric().switch("l1").switch("s1", "l1")
    for n in range(4):
        tiny.node(f"n{n}", "l1")
    fabric = tiny.build()
    assert len(fabric.uplinks("l1")) == 1
    assert fabric.oversubscription("l1") == 4.0
    assert fabric.oversubscription("s1") is None


def test_link_rate_comes_from_width_and_speed() -> None:
    assert Link("a", 1, "b", 1, 4, "NDR").gbps == 400
    assert Link("a", 1, "b", 1, 4, "HDR").gbps == 200


def test_the_graph_is_frozen() -> None:
    fabric = two_unit_rail_fabric()
    assert nx.is_frozen(fabric.graph)
    with pytest.raises(nx.NetworkXError):
        fabric.graph.add_node("x")


def test_a_degraded_link_degrades_every_node_on_its_leaf() -> None:
    fabric = two_unit_rail_fabric()
    uplink = fabric.uplinks("u1r1")[0]
    degraded = fabric.with_link_health([uplink.key])
    assert degraded.node_health("u1-n1") == "degraded"
    assert degraded.node_health("u1-n2") == "degraded"
    assert degraded.node_health("u2-n1") == "ok"
    assert fabric.node_health("u1-n1") == "ok"


def test_a_link_reported_from_both_ends_is_kept_once() -> None:
    tiny = TinyFabric().switch("l1").switch("s1")
    tiny.builder.add_link("l1", 40, "s1", 3)
    tiny.builder.add_link("s1", 3, "l1", 40)
    assert len(tiny.node("n1", "l1").build().links) == 2


def test_description_fabric_keeps_the_descriptions_names() -> None:
    description = uniform_fabric(32, nodes_per_leaf=8, leaves_per_spine=2, spines_per_block=1)
    fabric = fabric_from_description(description)
    for node in description.nodes:
        expected = description.node_labels(node)
        assert fabric.leaf_domain_of(node.name) == expected[labels.LEAF]
        assert fabric.spine_domain_of(node.name) == expected[labels.SPINE]
        assert fabric.block_of(node.name) == expected[labels.BLOCK]
        assert fabric.leaf_of(node.name, 3) == expected[labels.rail_key(3)]


def test_description_fabric_without_rail_optimization_puts_a_node_on_one_leaf() -> None:
    description = parse_fabric_description(
        "name: t\nrails: 4\nrailOptimized: false\n"
        "blocks: [{name: b, spines: [{name: s, leaves: [{name: l, nodes: ['n[1-2]']}]}]}]\n"
    )
    fabric = fabric_from_description(description)
    assert fabric.leaves_of("n1") == {"l"}
    assert set(fabric.rail_leaves("n1")) == {0, 1, 2, 3}
