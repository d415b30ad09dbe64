"""`tpfabric topology show`: a readable tree of the fabric, and a picture of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import tpfabric

from tpfabric_cli.errors import EXIT_INPUT
from tpfabric_cli.fabric_picture import wrap_hostlist
from tpfabric_cli.topology import EXIT_EMPTY, Discovery, domain_tree
from tpfabric_core import labels


@pytest.fixture(scope="module")
def example_tree(example_out: Path) -> str:
    result = tpfabric("topology", "show", "--ibnetdiscover", example_out)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_tree_goes_spine_leaf_domain_rails_nodes(example_tree: str) -> None:
    lines = example_tree.splitlines()
    assert "example.out: 119 nodes, 8 leaf domains" in lines[0]
    spine = next(i for i, line in enumerate(lines) if "spine S-2c5eab0300c25f00" in line)
    leaf = next(i for i, line in enumerate(lines) if "b05-p1-dgx-05-c[01-18]" in line)
    assert spine < leaf
    # switches by the names their descriptions give them (MF0;B09-P1-IBLEAF-01-05:MQM9701/U1)
    assert "leaf domain B09-P1-IBLEAF-01-05-" in lines[leaf - 1]
    assert "rail 0 → B09-P1-IBLEAF-01-05" in lines[leaf + 1]


def test_long_node_lists_collapse_into_hostlist_ranges(example_tree: str) -> None:
    assert "a06-p1-dgx-02-c[01-04,07,10-12,14,16,18]" in example_tree
    assert "a06-p1-dgx-02-c01\n" not in example_tree


def test_anomalies_and_what_is_not_a_node_are_listed(example_tree: str) -> None:
    assert "cabling anomalies (2)" in example_tree
    assert (
        "port 2 of b08-p1-dgx-08-c01 (HCA-5) is cabled to B09-P1-IBLEAF-04-08, the rail-3 leaf "
        "of its unit, where its other nodes cable their port 3"
    ) in example_tree
    assert "69 unassigned HCAs" in example_tree
    assert "ignored B11-P1-CUFM-02" in example_tree


def test_no_line_is_cropped_when_piped(example_tree: str) -> None:
    assert "cable their port 3" in example_tree  # the end of the longest anomaly line
    assert max(len(line) for line in example_tree.splitlines()) > 80


def test_degraded_leaves_are_marked(example_out: Path, tmp_path: Path) -> None:
    counters = tmp_path / "counters.json"
    counters.write_text(
        json.dumps({"links": [{"node": "b05-p1-dgx-05-c01", "rail": 0, "link_downed": 3}]})
    )
    result = tpfabric("topology", "show", "--ibnetdiscover", example_out, "--counters", counters)
    assert result.exit_code == 0, result.output
    assert "rail 0 → B09-P1-IBLEAF-01-05 ✗ degraded" in result.stdout
    assert "degraded: b05-p1-dgx-05-c[01-18]" in result.stdout


def test_a_description_with_blocks_shows_the_block_level(small_fabric: Path) -> None:
    result = tpfabric("topology", "show", "--fabric", small_fabric, "--no-rails")
    assert result.exit_code == 0, result.output
    assert "block pod1 · 64 nodes" in result.stdout
    assert "spine su1" in result.stdout
    assert "dgx-su1-l1-[01-08]" in result.stdout
    assert "rail 0" not in result.stdout


def test_png_and_svg_pictures_are_written(example_out: Path, tmp_path: Path) -> None:
    png, svg = tmp_path / "fabric.png", tmp_path / "fabric.svg"
    result = tpfabric(
        "topology", "show", "--ibnetdiscover", example_out, "--png", png, "--svg", svg
    )
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in svg.read_text()[:1000]


def test_an_empty_fabric_exits_3_and_draws_nothing(example_bad_out: Path, tmp_path: Path) -> None:
    png = tmp_path / "fabric.png"
    result = tpfabric("topology", "show", "--ibnetdiscover", example_bad_out, "--png", png)
    assert result.exit_code == EXIT_EMPTY
    assert not png.exists()


def test_show_needs_a_source() -> None:
    result = tpfabric("topology", "show")
    assert result.exit_code == EXIT_INPUT
    assert "--cluster" in result.stderr


def test_a_tree_of_labels_marks_nodes_that_leave_their_domains_rail_leaf() -> None:
    def node(leaf: str, rail0: str) -> dict[str, str]:
        return {labels.LEAF: leaf, labels.SPINE: "s", labels.BLOCK: "b", labels.rail_key(0): rail0}

    discovery = Discovery(
        "test", {"n1": node("L", "sw1"), "n2": node("L", "sw1"), "n3": node("L", "sw9")}
    )
    (leaf,) = domain_tree(discovery).leaf_domains
    assert leaf.rails == ((0, "sw1"),)
    assert leaf.odd_rails == (("n3", 0, "sw9"),)


@pytest.mark.parametrize("width", [8, 12, 20, 40])
def test_picture_captions_wrap_between_node_ranges_never_inside_one(width: int) -> None:
    hosts = "a06-p1-dgx-02-c[01-04,07,10-12,14,16,18],b01-x[1-3]"
    lines = wrap_hostlist(hosts, width).split("\n")
    assert "".join(lines) == hosts
    assert all(line.endswith(",") for line in lines[:-1])
    pieces = hosts.split(",")
    for line in lines:  # over-long only where a single range is longer than the width
        assert len(line) <= width or line.rstrip(",") in pieces


def test_the_title_names_the_input_file_not_its_folders(example_out: Path) -> None:
    result = tpfabric("topology", "show", "--ibnetdiscover", example_out, "--no-rails")
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert first.startswith("example.out: 119 nodes")
    assert str(example_out.parent) not in first
