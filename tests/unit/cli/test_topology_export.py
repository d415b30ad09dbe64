"""`tpfabric topology export --slurm`: topology.conf that Slurm's parser reads back."""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import tpfabric

from tpfabric_cli.errors import EXIT_INPUT
from tpfabric_cli.topology import fabric_from_labels
from tpfabric_core import labels
from tpfabric_core.fabric.ibnetdiscover import parse_ibnetdiscover
from tpfabric_core.fabric.slurm import (
    fabric_from_slurm_tree,
    format_topology_conf,
    parse_topology_conf,
)


def export(*args: str | Path) -> str:
    result = tpfabric("topology", "export", "--slurm", *args)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_tree_round_trips_through_the_slurm_parser(example_out: Path) -> None:
    text = export("--ibnetdiscover", example_out)
    topology = parse_topology_conf(text, "exported")
    assert format_topology_conf(topology) == text
    fabric, _ = parse_ibnetdiscover(example_out.read_text())
    imported = fabric_from_slurm_tree(topology)
    assert set(imported.nodes) == set(fabric.nodes)
    partition = {frozenset(nodes) for nodes in fabric.domains("leaf").values()}
    assert {frozenset(nodes) for nodes in imported.domains("leaf").values()} == partition


def test_block_plugin_lists_a_block_per_leaf_domain_and_the_sizes(example_out: Path) -> None:
    text = export("--ibnetdiscover", example_out, "--block", "--block-sizes", "8,16")
    topology = parse_topology_conf(text, "exported")
    assert len(topology.blocks) == 8
    assert topology.block_sizes == (8, 16)


def test_blocks_and_spines_of_a_description_become_switches(small_fabric: Path) -> None:
    topology = parse_topology_conf(export("--fabric", small_fabric), "exported")
    names = [s.name for s in topology.switches]
    assert names[:3] == ["pod1", "su1", "su2"]
    assert {s.name: s.nodes for s in topology.switches}["su1-leaf1"][0] == "dgx-su1-l1-01"


def test_labels_of_another_convention_export_as_a_tree(tmp_path: Path) -> None:
    source = tmp_path / "labels.json"
    source.write_text(
        json.dumps({f"n{i}": {"network.topology.nvidia.com/leaf": f"leaf{i // 2}",
                              "network.topology.nvidia.com/spine": "sp"} for i in range(4)})
    )  # fmt: skip
    text = export("--labels-from", source)
    assert text.splitlines() == [
        "SwitchName=sp Switches=leaf[0-1]",
        "SwitchName=leaf0 Nodes=n[0-1]",
        "SwitchName=leaf1 Nodes=n[2-3]",
    ]


def test_a_fabric_shaped_like_labels_keeps_their_domain_ids() -> None:
    fabric = fabric_from_labels(
        {
            "a": {labels.LEAF: "l1", labels.SPINE: "s1", labels.BLOCK: "b"},
            "b": {labels.LEAF: "l2", labels.SPINE: "s2", labels.BLOCK: "b"},
            "c": {labels.SPINE: "s2"},
        }
    )
    assert fabric.nodes == ("a", "b")
    assert [fabric.leaf_domain_of(n) for n in fabric.nodes] == ["l1", "l2"]
    assert [fabric.spine_domain_of(n) for n in fabric.nodes] == ["s1", "s2"]
    assert {fabric.block_of(n) for n in fabric.nodes} == {"b"}


def test_a_format_must_be_chosen_and_block_sizes_be_numbers(example_out: Path) -> None:
    no_format = tpfabric("topology", "export", "--ibnetdiscover", example_out)
    bad_sizes = tpfabric(
        "topology", "export", "--slurm", "--block-sizes", "8,x", "--ibnetdiscover", example_out
    )
    assert no_format.exit_code == bad_sizes.exit_code == EXIT_INPUT
    assert "pass --slurm" in no_format.stderr
    assert "--block-sizes: expected positive integers" in bad_sizes.stderr
