"""One rail numbering carried to the pod: a node's rail map by port GUID (parsed defensively),
a pod's rails and plan level from its plan."""

from __future__ import annotations

import pytest

from tpfabric_core import labels
from tpfabric_core.fabric.ibnetdiscover import parse_ibnetdiscover
from tpfabric_core.rail_ports import (
    RAIL_PORTS_ANNOTATION,
    format_rail_ports,
    node_rails,
    parse_rail_ports,
    pod_rails,
    rail_ports_of,
)

GUIDS = {0: "e09d7303007a4bd8", 1: "e09d7303007a4bd9"}
RAIL_LABELS = {labels.rail_key(0): "ib5", labels.rail_key(1): "ib6", labels.LEAF: "l"}


def test_a_rail_map_round_trips_through_its_annotation() -> None:
    text = format_rail_ports(GUIDS)
    assert text == "0=0xe09d7303007a4bd8,1=0xe09d7303007a4bd9"
    assert parse_rail_ports(text) == (GUIDS, None)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "is empty"),
        (None, "is empty"),
        ("0=e09d7303007a4bd8", "'0=e09d7303007a4bd8' is not <rail>=0x<16 hex digits>"),
        ("0=0xe09d,1=0x", "is not <rail>=0x<16 hex digits>"),
        ("0=0xe09d7303007a4bd8,0=0xe09d7303007a4bd9", "named twice"),
        (",".join(f"{i}=0x{i:016x}" for i in range(65)), "names 65 rails, more than 64"),
    ],
)
def test_a_bad_rail_map_says_what_is_wrong_names_the_key_and_the_fix(
    text: object, words: str
) -> None:
    ports, problem = parse_rail_ports(text)
    assert ports == {}
    assert problem is not None
    assert words in problem
    assert RAIL_PORTS_ANNOTATION in problem
    assert "tpfabric topology label --ibnetdiscover" in problem


def test_a_nodes_rails_come_from_its_map_else_its_rail_labels() -> None:
    mapped = {RAIL_PORTS_ANNOTATION: format_rail_ports(GUIDS)}
    assert node_rails(RAIL_LABELS, mapped) == (((0, GUIDS[0]), (1, GUIDS[1])), None)
    assert node_rails(RAIL_LABELS, {}) == (((0, None), (1, None)), None)


def test_a_map_that_does_not_cover_the_nodes_rails_is_not_used_and_said() -> None:
    one = {RAIL_PORTS_ANNOTATION: format_rail_ports({0: GUIDS[0]})}
    rails, problem = node_rails(RAIL_LABELS, one)
    assert rails == ((0, None), (1, None))
    assert problem is not None
    assert "names rails [0], the node's topology.tpfabric.io/rail-<i> labels [0, 1]" in problem


def test_a_pod_is_pinned_by_port_guid_where_the_node_has_a_map() -> None:
    rails = ((0, GUIDS[0]), (1, GUIDS[1]))
    pinned = "0=0xe09d7303007a4bd8,1=0xe09d7303007a4bd9"
    assert pod_rails(rails, pod_gpus=8, node_gpus=8) == pinned
    assert pod_rails(rails, pod_gpus=4, node_gpus=8) == pinned, "rdma-init uses its own pins"


def test_without_a_map_only_a_whole_node_pod_gets_bare_rails() -> None:
    rails = ((0, None), (1, None))
    assert pod_rails(rails, pod_gpus=8, node_gpus=8) == "0,1"
    assert pod_rails(rails, pod_gpus=4, node_gpus=8) is None
    assert pod_rails((), pod_gpus=8, node_gpus=8) is None


DGX_DUMP = """\
Switch\t65 "S-2c5eab0300b87a80"\t\t# "MF0;ib5:SX6036/U1" enhanced port 0 lid 120 lmc 0
[1]\t"H-e09d7303007a4bd8"[1](e09d7303007a4bd8) \t\t# "dgx-01 mlx5_0" lid 5 4xNDR
[2]\t"H-e09d7303007a4bd9"[1](e09d7303007a4bd9) \t\t# "dgx-02 mlx5_0" lid 6 4xNDR

Switch\t65 "S-2c5eab0300b87a81"\t\t# "MF0;ib6:SX6036/U1" enhanced port 0 lid 121 lmc 0
[1]\t"H-e09d7303007a4bda"[1](e09d7303007a4bda) \t\t# "dgx-01 mlx5_3" lid 7 4xNDR
[2]\t"H-e09d7303007a4bdb"[1](e09d7303007a4bdb) \t\t# "dgx-02 mlx5_3" lid 8 4xNDR
"""


def test_a_dump_gives_each_node_its_rail_map() -> None:
    fabric, _ = parse_ibnetdiscover(DGX_DUMP)
    assert rail_ports_of(fabric, "dgx-01") == "0=0xe09d7303007a4bd8,1=0xe09d7303007a4bda"
