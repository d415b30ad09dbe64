from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpfabric_core.errors import InputError
from tpfabric_core.fabric.generator import generate_superpod
from tpfabric_core.fabric.slurm import (
    SlurmBlock,
    SlurmSwitch,
    SlurmTopology,
    fabric_from_slurm_tree,
    format_topology_conf,
    parse_topology_conf,
    slurm_blocks_from_fabric,
    slurm_tree_from_fabric,
)

TREE = """\
# three levels
SwitchName=s0 Switches=s[1-2]
SwitchName=s1 Switches=l[1-2] LinkSpeed=400
SwitchName=s2 Switches=l[3-4]
SwitchName=l1 Nodes=dgx-[01-04]
SwitchName=l2 Nodes=dgx-[05-08]
SwitchName=l3 Nodes=dgx-[09-12]
SwitchName=l4 \\
    Nodes=dgx-[13-16]
"""


def test_tree_lines_expand_hostlists() -> None:
    topology = parse_topology_conf(TREE)
    assert topology.switches[1] == SlurmSwitch("s1", ("l1", "l2"), (), 400)
    assert topology.switches[3].nodes == ("dgx-01", "dgx-02", "dgx-03", "dgx-04")
    assert topology.switches[-1].nodes[-1] == "dgx-16"


def test_block_lines_and_block_sizes() -> None:
    topology = parse_topology_conf(
        "BlockName=b1 Nodes=n[1-4]\nblockname=b2 nodes=n[5-8]\nBlockSizes=4,8\n"
    )
    assert topology.blocks == (
        SlurmBlock("b1", ("n1", "n2", "n3", "n4")),
        SlurmBlock("b2", ("n5", "n6", "n7", "n8")),
    )
    assert topology.block_sizes == (4, 8)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SwitchName=s1 Switches=missing\n", "undefined switch"),
        ("SwitchName=s1 Nodes=n[1-\n", r"topology.conf:1: unbalanced"),
        ("SwitchName=s1 Colour=red\n", "unknown key"),
        ("SwitchName=s1 Nodes=a\nBlockName=b Nodes=c\n", "mixes"),
        ("SwitchName=s1 LinkSpeed=fast\n", "LinkSpeed must be an integer"),
        ("SwitchName=s1\nSwitchName\n", r"topology.conf:2: expected KEY=VALUE"),
    ],
)
def test_bad_input_names_the_problem(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_topology_conf(text)


def test_tree_import_builds_leaves_spines_and_core() -> None:
    fabric = fabric_from_slurm_tree(parse_topology_conf(TREE))
    assert fabric.leaf_domain_of("dgx-01") == "l1"
    assert fabric.spine_domain_of("dgx-01") == "s1"
    assert fabric.block_of("dgx-01") == "s0"
    assert fabric.hops("dgx-01", "dgx-05", 0) == 3
    assert fabric.hops("dgx-01", "dgx-16", 0) == 5


def test_import_export_import_is_stable() -> None:
    first = parse_topology_conf(TREE)
    text = format_topology_conf(first)
    assert parse_topology_conf(text) == first
    assert format_topology_conf(parse_topology_conf(text)) == text


def test_a_tree_exported_from_its_fabric_is_the_same_tree() -> None:
    topology = parse_topology_conf(TREE)
    exported = slurm_tree_from_fabric(fabric_from_slurm_tree(topology))
    assert {s.name: (s.switches, s.nodes) for s in exported.switches} == {
        s.name: (s.switches, s.nodes) for s in topology.switches
    }


def test_a_generated_fabric_exports_a_tree_and_blocks() -> None:
    fabric = generate_superpod(units=2, nodes_per_unit=4, rails=2).fabric
    tree = slurm_tree_from_fabric(fabric)
    leaves = [s for s in tree.switches if s.nodes]
    assert sorted(len(s.nodes) for s in leaves) == [4, 4]
    blocks = slurm_blocks_from_fabric(fabric, (4, 8))
    assert format_topology_conf(blocks).endswith("BlockSizes=4,8\n")
    assert parse_topology_conf(format_topology_conf(blocks)) == blocks


NAMES = st.from_regex(r"[a-z]{1,4}", fullmatch=True)


@st.composite
def trees(draw: st.DrawFn) -> SlurmTopology:
    leaves = draw(st.lists(NAMES, min_size=1, max_size=5, unique=True))
    switches = [
        SlurmSwitch(
            f"leaf-{leaf}", (), tuple(f"{leaf}-n{i:02d}" for i in range(draw(st.integers(1, 12))))
        )
        for leaf in leaves
    ]
    spine = SlurmSwitch(
        "spine", tuple(s.name for s in switches), (), draw(st.none() | st.integers(1, 800))
    )
    return SlurmTopology((spine, *switches))


@given(trees())
def test_any_tree_survives_export_and_import(topology: SlurmTopology) -> None:
    text = format_topology_conf(topology)
    parsed = parse_topology_conf(text)
    assert {s.name: (set(s.switches), set(s.nodes), s.link_speed) for s in parsed.switches} == {
        s.name: (set(s.switches), set(s.nodes), s.link_speed) for s in topology.switches
    }
    assert format_topology_conf(parsed) == text
