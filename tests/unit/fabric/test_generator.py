from __future__ import annotations

from collections import Counter

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tpfabric_core.fabric.builder import fabric_from_description
from tpfabric_core.fabric.generator import (
    generate_fat_tree,
    generate_superpod,
    write_fabric_description,
    write_ibnetdiscover,
)
from tpfabric_core.fabric.ibnetdiscover import parse_ibnetdiscover
from tpfabric_core.fabric.model import DOMAIN_LEVELS, Fabric
from tpfabric_core.fabric_description import parse_fabric_description


def assert_same_fabric(a: Fabric, b: Fabric) -> None:
    assert a.nodes == b.nodes
    assert a.links == b.links
    assert set(a.switches) == set(b.switches)
    assert {s: a.level_of(s) for s in a.switches} == {s: b.level_of(s) for s in b.switches}
    for node in a.nodes:
        assert a.rail_leaves(node) == b.rail_leaves(node)
        for level in DOMAIN_LEVELS:
            assert a.domain_of(node, level) == b.domain_of(node, level)


def round_trip(fabric: Fabric) -> Fabric:
    imported, report = parse_ibnetdiscover(write_ibnetdiscover(fabric))
    assert report.unassigned_hcas == ()
    assert report.warnings == ()
    return imported


def test_superpod_has_a_leaf_per_unit_and_rail() -> None:
    fabric = generate_superpod(units=3, nodes_per_unit=4, rails=8).fabric
    assert len(fabric.nodes) == 12
    assert len(fabric.leaves) == 24
    assert fabric.rails == tuple(range(8))
    assert len(fabric.domains("leaf")) == 3


def test_generation_is_deterministic() -> None:
    one = generate_superpod(units=2, nodes_per_unit=4, foreign=1, swapped=1, degraded=2, seed=7)
    two = generate_superpod(units=2, nodes_per_unit=4, foreign=1, swapped=1, degraded=2, seed=7)
    assert one.fabric.links == two.fabric.links
    assert (one.foreign, one.swapped, one.degraded) == (two.foreign, two.swapped, two.degraded)


def test_oversubscription_sets_the_leaf_uplinks() -> None:
    fabric = generate_superpod(
        units=1, nodes_per_unit=32, spines_per_rail=4, oversubscription=2
    ).fabric
    leaf = fabric.leaves[0]
    assert fabric.oversubscription(leaf) == 2.0


def test_a_core_tier_joins_blocks() -> None:
    fabric = generate_superpod(units=4, nodes_per_unit=2, rails=2, units_per_block=2).fabric
    assert fabric.switches_at(2)
    first, last = fabric.nodes[0], fabric.nodes[-1]
    assert fabric.spine_domain_of(first) != fabric.spine_domain_of(last)
    assert fabric.smallest_common_domain([first, last]) == ("block", fabric.block_of(first))
    assert fabric.hops(first, last, 0) == 5


def test_fat_tree_puts_all_hcas_of_a_node_on_one_leaf() -> None:
    fabric = generate_fat_tree(nodes=20, nodes_per_leaf=8, hcas_per_node=2).fabric
    assert all(len(fabric.leaves_of(n)) == 1 for n in fabric.nodes)
    assert len(fabric.leaves) == 3


def test_degraded_links_are_marked() -> None:
    generated = generate_fat_tree(nodes=8, degraded=2, seed=1)
    assert {link.key for link in generated.fabric.degraded_links} == set(generated.degraded)


def test_superpod_round_trips_through_ibnetdiscover_text() -> None:
    fabric = generate_superpod(units=3, nodes_per_unit=4, rails=4, units_per_block=2).fabric
    assert_same_fabric(fabric, round_trip(fabric))


def test_miscabled_superpod_round_trips_through_ibnetdiscover_text() -> None:
    fabric = generate_superpod(units=3, nodes_per_unit=4, rails=4, foreign=2, swapped=1).fabric
    assert_same_fabric(fabric, round_trip(fabric))


def test_fat_tree_round_trips_through_ibnetdiscover_text() -> None:
    fabric = generate_fat_tree(nodes=24, nodes_per_leaf=8, hcas_per_node=2).fabric
    assert_same_fabric(fabric, round_trip(fabric))


@settings(max_examples=15, deadline=None)
@given(
    units=st.integers(1, 4),
    nodes=st.integers(1, 6),
    rails=st.integers(1, 8),
    foreign=st.integers(0, 2),
    swapped=st.integers(0, 2),
    seed=st.integers(0, 1000),
)
def test_any_generated_fabric_round_trips(
    units: int, nodes: int, rails: int, foreign: int, swapped: int, seed: int
) -> None:
    generated = generate_superpod(
        units=units, nodes_per_unit=nodes, rails=rails, spines_per_rail=2,
        foreign=foreign, swapped=swapped, seed=seed,
    )  # fmt: skip
    # a dump tells a node's swapped cables only from the unit's other nodes: a swap is seen
    # where most nodes of the unit are cabled in order (rails are the leaves' majority)
    swaps = Counter(node.rsplit("-dgx-", 1)[0] for node, _, _ in generated.swapped)
    assume(all(2 * count < nodes for count in swaps.values()))
    assert_same_fabric(generated.fabric, round_trip(generated.fabric))


def test_the_launcher_description_has_the_same_domains() -> None:
    fabric = generate_superpod(units=4, nodes_per_unit=4, rails=2, units_per_block=2).fabric
    description = parse_fabric_description(write_fabric_description(fabric, "gen"))
    assert description.rails == 2
    assert description.rail_optimized
    described = fabric_from_description(description)
    assert described.nodes == fabric.nodes
    for level in DOMAIN_LEVELS:
        assert sorted(described.domains(level).values(), key=sorted) == sorted(
            fabric.domains(level).values(), key=sorted
        )
