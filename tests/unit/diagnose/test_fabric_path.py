"""A port GUID resolves to the leaf switch port at the other end of its cable, and to that leaf's
uplinks, on the real public ibnetdiscover dumps of the tests (``tests/unit/fabric/data``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tpfabric_core.diagnose.fabric_path import FabricPaths
from tpfabric_core.fabric.builder import fabric_from_description
from tpfabric_core.fabric.ibnetdiscover import parse_guid_map, parse_ibnetdiscover
from tpfabric_core.fabric_description import parse_fabric_description

DUMPS = Path(__file__).parents[1] / "fabric" / "data"
REAL_DUMPS = [
    "topograph/example.out",
    "real/x5-psmn-ibnetdiscover/X5.topofile",
    "real/ibtopotool-doc-dumps/1.topo",
    "real/ibtopotool-doc-dumps/2.topo",
    "real/ibtopotool-doc-dumps/3.topo",
    "real/ibtopotool-doc-dumps/4.topo",
]
_SWITCH = re.compile(r'^Switch\s+\d+\s+"(S-[0-9a-fA-F]+)"')
_HCA_PORT = re.compile(r'^\[(\d+)\]\S*\s+"H-[0-9a-fA-F]+"\[\d+\]\S*?\(([0-9a-fA-F]+)\)')


def cabled_ports(text: str) -> dict[str, tuple[str, int]]:
    """Return, read straight from the dump's switch blocks, each HCA port GUID's switch and
    switch port."""
    found, switch = {}, None
    for line in text.splitlines():
        if (block := _SWITCH.match(line)) is not None:
            switch = block[1]
        elif not line.strip() or not line.startswith("["):
            switch = None if not line.strip() else switch
        elif switch is not None and (port := _HCA_PORT.match(line)) is not None:
            found[port[2].lower().zfill(16)] = (switch, int(port[1]))
    return found


@pytest.mark.parametrize("dump", REAL_DUMPS)
def test_every_hca_port_guid_of_a_real_dump_resolves_to_its_switch_port(dump: str) -> None:
    text = (DUMPS / dump).read_text()
    expected = cabled_ports(text)
    assert expected, "the dump lists HCA ports under its switches"
    paths = FabricPaths(parse_ibnetdiscover(text, dump)[0])
    resolved = {}
    for guid in expected:
        path = paths.by_guid(guid)
        assert path is not None, guid
        resolved[guid] = (path.leaf.switch, path.leaf.port)
    assert resolved == expected


def test_a_dgx_port_resolves_to_its_rail_leaf_port_and_the_leafs_uplinks() -> None:
    dump = "topograph/example.out"
    fabric, _ = parse_ibnetdiscover((DUMPS / dump).read_text(), dump)
    path = FabricPaths(fabric).by_guid("0xe09d7303007a4bd8")  # a08-p1-dgx-04-c01 mlx5_5
    assert path is not None
    assert (path.node, path.rail, path.hca_description) == (
        "a08-p1-dgx-04-c01",
        3,
        "a08-p1-dgx-04-c01 mlx5_5",
    )
    assert path.leaf.words == "leaf S-2c5eab0300b87b40 port 1 (A09-P1-IBLEAF-04-04)"
    assert [u.leaf_port for u in path.uplinks] == list(range(35, 51))
    assert {u.peer.tier for u in path.uplinks} == {"spine"}
    first = path.uplinks[0]
    assert (first.peer.switch, first.peer.name, first.peer.port) == (
        "S-2c5eab0300c26280",
        "A10-P1-IBSPINE-02",
        32,
    )


def test_the_cable_whose_ends_disagree_is_marked_on_the_path() -> None:
    dump = "real/ibtopotool-doc-dumps/1.topo"  # the example of `man ibnetdiscover`
    fabric, _ = parse_ibnetdiscover((DUMPS / dump).read_text(), dump)
    path = FabricPaths(fabric).by_guid("0008f10403960559")
    assert path is not None
    assert (path.leaf.switch, path.leaf.port, path.cable_degraded) == (
        "S-005442ba00003080",
        12,
        True,
    )


def test_x5_ports_resolve_with_their_hosts_named_by_the_guid_map() -> None:
    folder = DUMPS / "real/x5-psmn-ibnetdiscover"
    fabric, _ = parse_ibnetdiscover(
        (folder / "X5.topofile").read_text(),
        "X5.topofile",
        guid_map=parse_guid_map((folder / "X5.map").read_text()),
    )
    paths = FabricPaths(fabric)
    named = [
        p for g in cabled_ports((folder / "X5.topofile").read_text()) if (p := paths.by_guid(g))
    ]
    assert named
    assert any(p.node is not None for p in named)


def test_an_unknown_guid_resolves_to_nothing() -> None:
    dump = "topograph/example.out"
    fabric, _ = parse_ibnetdiscover((DUMPS / dump).read_text(), dump)
    assert FabricPaths(fabric).by_guid("0123456789abcdef") is None


def test_a_description_without_guids_still_gives_a_rails_leaf() -> None:
    description = parse_fabric_description(
        """
name: small
blocks:
- name: b
  spines:
  - name: s
    leaves:
    - {name: leaf-a, nodes: [n1, n2]}
"""
    )
    paths = FabricPaths(fabric_from_description(description))
    path = paths.leaf_of_rail("n1", 0)
    assert path is not None
    assert (path.leaf.port, path.guid) == (None, None)
    assert "leaf-a" in path.leaf.words
    assert paths.leaf_of_rail("no-such-node", 0) is None
