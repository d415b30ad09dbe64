from __future__ import annotations

from fabric_builders import TinyFabric, storage_on_a_spine, two_unit_rail_fabric

from tpfabric_core.fabric.generator import generate_fat_tree, generate_superpod
from tpfabric_core.fabric.ibnetdiscover import IbnetdiscoverReport
from tpfabric_core.fabric.model import Fabric, HcaRole
from tpfabric_core.fabric.rails import analyze_rails


def test_rail_optimized_wiring_is_detected() -> None:
    report = analyze_rails(two_unit_rail_fabric())
    assert report.rail_optimized
    assert report.leaf_rail == {"u1r0": 0, "u1r1": 1, "u2r0": 0, "u2r1": 1}
    assert report.anomalies == ()


def test_a_fat_tree_is_not_rail_optimized_and_has_no_anomalies() -> None:
    report = analyze_rails(generate_fat_tree(nodes=16, nodes_per_leaf=8, hcas_per_node=4).fabric)
    assert not report.rail_optimized
    assert report.anomalies == ()


def test_unassigned_hcas_get_the_rail_of_their_leaf() -> None:
    tiny = TinyFabric().switch("r0").switch("r1").node("a", "r0", "r1").node("b", "r0", "r1")
    fabric = tiny.hca("r1", role=HcaRole.UNASSIGNED).build()
    unassigned = next(h for h in fabric.hcas.values() if h.role is HcaRole.UNASSIGNED)
    assert analyze_rails(fabric).hca_rail[unassigned.guid] == 1


def test_a_host_on_a_spine_is_reported_outside_the_leaf_domains() -> None:
    anomalies = analyze_rails(storage_on_a_spine()).anomalies
    assert [(a.kind, a.node, a.rail, a.switch) for a in anomalies] == [
        ("outside-leaf-domains", "nfs-01", 0, "s1")
    ]
    assert "a spine switch: outside the leaf domains" in anomalies[0].detail


def test_an_hca_on_another_units_leaf_is_reported() -> None:
    generated = generate_superpod(units=3, nodes_per_unit=4, rails=4, foreign=1, seed=3)
    ((node, rail),) = generated.foreign
    anomalies = analyze_rails(generated.fabric).anomalies
    assert [(a.kind, a.node, a.rail) for a in anomalies] == [("foreign-leaf", node, rail)]


def test_swapped_rails_are_reported_as_mixed_rail_leaves() -> None:
    generated = generate_superpod(units=2, nodes_per_unit=4, rails=4, swapped=1, seed=5)
    ((node, a, b),) = generated.swapped
    anomalies = analyze_rails(generated.fabric).anomalies
    assert {(x.kind, x.node, x.rail) for x in anomalies} == {
        ("mixed-rail-leaf", node, a), ("mixed-rail-leaf", node, b)
    }  # fmt: skip


def test_a_missing_hca_is_reported() -> None:
    fabric = (
        TinyFabric().switch("r0").switch("r1")
        .node("a", "r0", "r1").node("b", "r0", "r1").node("c", "r0").build()
    )  # fmt: skip
    anomalies = analyze_rails(fabric).anomalies
    assert [(x.kind, x.node, x.rail, x.switch) for x in anomalies] == [
        ("missing-hca", "c", 1, "r1")
    ]


def test_two_hcas_claiming_one_rail_are_reported() -> None:
    fabric = TinyFabric().switch("l").node("a", "l").node("a", "l").node("b", "l").build()
    assert [x.kind for x in analyze_rails(fabric).anomalies] == ["duplicate-rail"]


def test_the_swapped_rails_in_topographs_dump_are_found(
    example: tuple[Fabric, IbnetdiscoverReport],
) -> None:
    fabric, _ = example
    anomalies = analyze_rails(fabric).anomalies
    # its HCA-5 and HCA-6 (ports 2 and 3 of the four this dump shows) are on each other's leaf
    assert {(a.kind, a.node, a.rail) for a in anomalies} == {
        ("mixed-rail-leaf", "b08-p1-dgx-08-c01", 2), ("mixed-rail-leaf", "b08-p1-dgx-08-c01", 3)
    }  # fmt: skip
    details = sorted(a.detail for a in anomalies)
    assert details[0].startswith("port 2 of b08-p1-dgx-08-c01 (HCA-5) is cabled to ")
    assert "the rail-3 leaf of its unit" in details[0]
