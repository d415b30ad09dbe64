from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpfabric_core.errors import InputError
from tpfabric_core.fabric.generator import generate_superpod
from tpfabric_core.fabric.slurm import (
    SlurmBlock,
    SlurmSwitch,
    SlurmTopology,
    fabric_from_slurm,
    fabric_from_slurm_tree,
    format_topology_conf,
    parse_slurm_topology,
    parse_topology_conf,
    parse_topology_yaml,
    slurm_blocks_from_fabric,
    slurm_tree_from_fabric,
)

# The Slurm file PSMN's owners generated for their X5 cluster (ltaulell/HPC_toolset, BSD 2-Clause;
# see data/real/x5-psmn-ibnetdiscover/SOURCE.txt).
X5_CONF = Path(__file__).parent / "data" / "real" / "x5-psmn-ibnetdiscover" / "X5.topology.conf"
# Line 4 makes S-0008f105001086a2 (a leaf switch without hosts) the parent of two spines that
# list it as their child; without that Switches= the file is a tree.
X5_CYCLE = "SwitchName=S-0008f105001086a2 Switches=S-0008f10500108530,S-0008f1050010851e"

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


# -- what Slurm refuses, and what tpfabric cannot guess --------------------------------------


def x5_without_its_cycle() -> SlurmTopology:
    text = X5_CONF.read_text()
    assert X5_CYCLE in text
    return parse_topology_conf(
        text.replace(X5_CYCLE, "SwitchName=S-0008f105001086a2"), "X5.topology.conf"
    )


def test_switches_that_are_their_own_ancestors_are_refused_naming_the_cycle() -> None:
    with pytest.raises(InputError) as error:
        parse_topology_conf(X5_CONF.read_text(), "X5.topology.conf")
    assert str(error.value).startswith(
        "X5.topology.conf:4: Switches= form a cycle: S-0008f105001086a2 (line 4) -> "
        "S-0008f10500108530 (line 11) -> S-0008f105001086a2"
    )
    assert "not a tree" in str(error.value)


def test_hosts_kubernetes_cannot_name_are_skipped_with_their_line_and_the_rule() -> None:
    imported = fabric_from_slurm(x5_without_its_cycle())
    assert set(imported.skipped_nodes) == {
        "H-78e7d1030024535c", "H-003048c749450000", "H-003048c74ae20000"
    }  # fmt: skip
    assert not set(imported.skipped_nodes) & set(imported.fabric.nodes)
    assert len(imported.fabric.nodes) == 86  # the 89 hosts named, less those three
    line_8 = next(w for w in imported.warnings if w.startswith("X5.topology.conf:8: "))
    assert "H-003048c749450000,H-003048c74ae20000" in line_8
    assert "RFC 1123 subdomain" in line_8
    assert "(h-003048c749450000)" in line_8  # the name kubelet would register


def test_a_leaf_switch_without_hosts_is_left_out_not_made_the_core() -> None:
    fabric = fabric_from_slurm(x5_without_its_cycle()).fabric
    assert "S-0008f105001086a2" not in fabric.switches
    assert len(fabric.domains("leaf")) == 6
    assert "S-0008f105001086a2" not in set(fabric.domains("block"))


def test_a_node_under_two_leaf_switches_is_an_error_naming_both_lines() -> None:
    text = "SwitchName=s1 Switches=l[1-2]\nSwitchName=l1 Nodes=n[1-4]\nSwitchName=l2 Nodes=n[4-6]\n"
    with pytest.raises(
        InputError, match=r"topology.conf:3: node n4 is in SwitchName=l1 \(line 2\)"
    ):
        fabric_from_slurm(parse_topology_conf(text))


def test_a_node_in_two_blocks_is_an_error() -> None:
    text = "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[4-8]\n"
    with pytest.raises(InputError, match=r"node n4 is in BlockName=b1 \(line 1\) and BlockName=b2"):
        fabric_from_slurm(parse_topology_conf(text))


@pytest.mark.parametrize("text", ["", "# generated by nobody\n\n"])
def test_an_empty_file_says_what_is_missing(text: str) -> None:
    with pytest.raises(InputError) as error:
        fabric_from_slurm(parse_topology_conf(text))
    assert "names no switch and no block (no SwitchName or BlockName line)" in str(error.value)
    assert "block topology" not in str(error.value)


def test_a_switch_with_nodes_is_a_leaf_and_its_switches_are_ignored_as_slurm_does() -> None:
    text = "SwitchName=l1 Nodes=n[1-2] Switches=l2\nSwitchName=l2 Nodes=n3\n"
    imported = fabric_from_slurm(parse_topology_conf(text))
    assert imported.warnings == (
        (
            "topology.conf:1: SwitchName=l1 has Nodes=, so it is a leaf: its Switches= are "
            "ignored (as Slurm does)"
        ),
    )
    assert imported.fabric.spine_domain_of("n1") != imported.fabric.spine_domain_of("n3")


# -- topology/block: a block is a leaf domain, BlockSizes aggregate blocks -----------------------

# Four GB200 NVL72-style racks of 18 trays, planned in 16s; 64 joins four racks (Slurm aggregates
# base_size * 2**k nodes as 2**k consecutive blocks).
RACKS = """\
BlockName=nvl1 Nodes=gb-[001-018]
BlockName=nvl2 Nodes=gb-[019-036]
BlockName=nvl3 Nodes=gb-[037-054]
BlockName=nvl4 Nodes=gb-[055-072]
BlockSizes=16,64
"""


def test_each_block_is_a_leaf_domain_and_block_sizes_join_consecutive_blocks() -> None:
    fabric = fabric_from_slurm(parse_topology_conf(RACKS)).fabric
    assert len(fabric.nodes) == 72
    assert fabric.leaf_domain_of("gb-001") == "nvl1"
    assert fabric.leaf_domain_of("gb-072") == "nvl4"
    assert {fabric.spine_domain_of(n) for n in ("gb-001", "gb-072")} == {"nvl1..nvl4"}


def test_blocks_without_block_sizes_are_leaf_domains_alone() -> None:
    fabric = fabric_from_slurm(parse_topology_conf(RACKS.replace("BlockSizes=16,64\n", ""))).fabric
    assert fabric.spine_domain_of("gb-001") == "nvl1"
    assert fabric.spine_domain_of("gb-019") == "nvl2"


def test_a_short_last_group_is_left_out_as_slurm_leaves_it_out() -> None:
    text = "".join(f"BlockName=b{i} Nodes=n{i}-[1-2]\n" for i in range(1, 6)) + "BlockSizes=2,4,8\n"
    fabric = fabric_from_slurm(parse_topology_conf(text)).fabric
    assert fabric.spine_domain_of("n1-1") == "b1..b2"
    assert fabric.block_of("n1-1") == "b1..b4"
    assert fabric.block_of("n4-2") == "b1..b4"
    assert fabric.spine_domain_of("n5-1") == fabric.block_of("n5-1") == "b5"


def test_block_sizes_must_be_the_base_times_powers_of_two() -> None:
    with pytest.raises(
        InputError, match=r"topology.conf:3: BlockSizes: 40 is not the base size 16"
    ):
        parse_topology_conf(
            "BlockName=b1 Nodes=n[1-16]\nBlockName=b2 Nodes=n[17-32]\nBlockSizes=16,40\n"
        )


# -- Slurm 25.05 topology.yaml --------------------------------------------------------------------

# The shape of `man 5 topology.yaml`: a list of topologies, the cluster_default one is imported.
TOPOLOGY_YAML = """\
# three topologies of one cluster
- topology: fabric
  cluster_default: true
  tree:
    switches:
      - switch: spine
        children: leaf[1-2]
      - switch: leaf1
        nodes: gpu-[01-04]
      - switch: leaf2
        nodes: gpu-[05-08]
- topology: racks
  cluster_default: false
  block:
    block_sizes: [4, 8]
    blocks:
      - block: rack1
        nodes: gpu-[01-04]
      - block: rack2
        nodes: gpu-[05-08]
- topology: plain
  flat: true
"""


def test_the_cluster_default_topology_of_a_topology_yaml_is_imported() -> None:
    topology = parse_slurm_topology(TOPOLOGY_YAML, "topology.yaml")
    assert topology.switches[0] == SlurmSwitch("spine", ("leaf1", "leaf2"))
    assert topology.switches[2].line == 10
    fabric = fabric_from_slurm(topology).fabric
    assert fabric.leaf_domain_of("gpu-05") == "leaf2"
    assert fabric.spine_domain_of("gpu-01") == "spine"


def test_a_named_block_topology_of_a_topology_yaml() -> None:
    topology = parse_topology_yaml(TOPOLOGY_YAML, topology="racks")
    assert topology.block_sizes == (4, 8)
    fabric = fabric_from_slurm(topology).fabric
    assert fabric.leaf_domain_of("gpu-05") == "rack2"
    assert fabric.spine_domain_of("gpu-05") == "rack1..rack2"


@pytest.mark.parametrize(
    ("text", "topology", "message"),
    [
        (TOPOLOGY_YAML, "plain", r"topology.yaml:21: topology 'plain' is flat"),
        (TOPOLOGY_YAML.replace("cluster_default: true", "cluster_default: false"), None,
         r"has 3 topologies \(fabric, racks, plain\) and none is cluster_default"),
        (TOPOLOGY_YAML.replace("children: leaf[1-2]", "children: leaf[1-3]"), None,
         r"topology.yaml:6: Switches= of SwitchName=spine names undefined switch\(es\) leaf3"),
        (TOPOLOGY_YAML.replace("      nodes: gpu-[01-04]\n", "      children: spine\n", 1), None,
         r"Switches= form a cycle: spine \(line 6\) -> leaf1 \(line 8\) -> spine"),
        (TOPOLOGY_YAML.replace("switches:", "switchs:"), None, r"topology.yaml:5: unknown key"),
        ("topology: fabric\n", None, r"expected a list of topologies .* found a dict"),
    ],
)  # fmt: skip
def test_topology_yaml_errors_name_the_line(text: str, topology: str | None, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_topology_yaml(text, topology=topology)
