from __future__ import annotations

from pathlib import Path

import pytest

from tpfabric_core import labels
from tpfabric_core.errors import InputError
from tpfabric_core.fabric_description import parse_fabric_description, uniform_fabric

SMALL = Path(__file__).parents[2] / "examples" / "fabrics" / "small.yaml"


def fabric_text(nodes: str = '["n[1-2]"]', extra: str = "") -> str:
    return (
        f"name: t\n{extra}blocks:\n- name: b\n  spines:\n  - name: s\n    leaves:\n"
        f"    - name: l\n      nodes: {nodes}\n"
    )


def test_small_example_has_64_nodes_in_8_leaves_of_2_units() -> None:
    fabric = parse_fabric_description(SMALL.read_text())
    assert len(fabric.nodes) == 64
    assert len({n.leaf for n in fabric.nodes}) == 8
    assert len({n.spine for n in fabric.nodes}) == 2


def test_nodes_get_one_label_per_level_and_per_rail() -> None:
    fabric = parse_fabric_description(SMALL.read_text())
    node = fabric.nodes[9]
    got = fabric.node_labels(node)
    assert got[labels.LEAF] == "su1-leaf2"
    assert got[labels.SPINE] == "su1"
    assert got[labels.BLOCK] == "pod1"
    assert [got[labels.rail_key(r)] for r in range(8)] == [f"su1-leaf2-rail{r}" for r in range(8)]


def test_without_rail_optimization_every_rail_is_the_leaf_switch() -> None:
    fabric = parse_fabric_description(fabric_text(extra="railOptimized: false\nrails: 2\n"))
    assert fabric.nodes[0].rail_switches == ("l", "l")


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        (
            fabric_text('["Bad_Name"]'),
            "blocks[0].spines[0].leaves[0].nodes",
            "valid Kubernetes node",
        ),
        (fabric_text('["n[2-1]"]'), "blocks[0].spines[0].leaves[0].nodes", "runs backwards"),
        (fabric_text(extra="rails: 0\n"), "rails", "greater than or equal to 1"),
        (fabric_text(extra="rdmaResource: rdma\n"), "rdmaResource", "extended resource name"),
        (fabric_text(extra="colour: red\n"), "colour", "Extra inputs are not permitted"),
        ("name: t\nblocks: []\n", "blocks", "at least 1 item"),
    ],
)
def test_schema_errors_name_the_field_path(text: str, where: str, problem: str) -> None:
    with pytest.raises(InputError, match=problem) as caught:
        parse_fabric_description(text, source="f.yaml")
    assert caught.value.where == f"f.yaml: {where}"


def test_a_node_listed_in_two_leaves_is_rejected() -> None:
    text = fabric_text('["n1"]') + "    - name: l2\n      nodes: [n1]\n"
    with pytest.raises(InputError, match=r"node 'n1' is listed twice"):
        parse_fabric_description(text)


def test_yaml_errors_give_the_line_number() -> None:
    with pytest.raises(InputError) as caught:
        parse_fabric_description("name: t\nblocks:\n  - [\n", source="f.yaml")
    assert caught.value.where == "f.yaml:4"


def test_a_non_mapping_document_says_what_was_expected() -> None:
    with pytest.raises(InputError, match="expected a mapping"):
        parse_fabric_description("- a\n- b\n")


def test_uniform_fabric_groups_nodes_into_leaves_spines_and_blocks() -> None:
    fabric = uniform_fabric(70, nodes_per_leaf=8, leaves_per_spine=4, spines_per_block=2)
    assert len(fabric.nodes) == 70
    assert len({n.leaf for n in fabric.nodes}) == 9  # the last leaf holds 6
    assert len({n.spine for n in fabric.nodes}) == 3
    assert len({n.block for n in fabric.nodes}) == 2
