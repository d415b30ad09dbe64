from __future__ import annotations

from pathlib import Path

import pytest

from tpfabric_core import labels
from tpfabric_core.errors import InputError
from tpfabric_core.fabric.ibnetdiscover import (
    GuidMapEntry,
    IbnetdiscoverOptions,
    IbnetdiscoverReport,
    normalize_guid,
    parse_guid_map,
    parse_ibnetdiscover,
    switch_name,
)
from tpfabric_core.fabric.model import Fabric, HcaRole
from tpfabric_core.fabric.node_labels import fabric_node_labels
from tpfabric_core.hostlist import expand_hostlist

Example = tuple[Fabric, IbnetdiscoverReport]

SWITCH = 'Switch\t65 "S-2c5eab0300b87a80"\t\t# "MF0;LEAF:MQM9701/U1" enhanced port 0 lid 120 lmc 0'
PORT = '[1]\t"H-e09d7303008594bc"[1](e09d7303008594bc) \t\t# "dgx-01 HCA-1" lid 525 4xNDR'
UNNAMED = (
    '[2]\t"H-e09d730300858d88"[1](e09d730300858d88) \t\t# "MT4129 ConnectX7   Mellanox" lid 5 4xNDR'
)


# -- acceptance on topograph's example.out ---------------------------------------------------


@pytest.mark.parametrize(
    ("hostlist", "leaf", "rail"),
    [
        ("a05-p1-dgx-01-c[03-04]", "S-2c5eab0300b879c0", 1),
        ("a06-p1-dgx-02-c[01-04,07,10-12,14,16,18]", "S-2c5eab0300b87a80", 0),
        ("b05-p1-dgx-05-c[01-18]", "S-2c5eab0300c26040", 0),
    ],
)
def test_leaves_agree_with_topographs_tree(
    example: Example, hostlist: str, leaf: str, rail: int
) -> None:
    fabric, _ = example
    for node in expand_hostlist(hostlist):
        assert fabric.leaf_of(node, rail) == leaf
    assert fabric.level_of(leaf) == 0


def test_every_named_dgx_node_gets_a_label_per_rail_and_a_leaf_domain(example: Example) -> None:
    fabric, _ = example
    node_labels = fabric_node_labels(fabric)
    assert len(node_labels) == 119
    for node, node_label in node_labels.items():
        rails = fabric.rail_leaves(node)
        assert {labels.rail_key(r) for r in rails} <= node_label.keys()
        assert len(rails) in (3, 4)  # a05 has three rails in this dump, the other units four
        assert labels.LEAF in node_label
        assert all(labels.is_valid_label_value(v) for v in node_label.values())


def test_nodes_of_a_unit_share_a_leaf_domain_and_units_differ(example: Example) -> None:
    fabric, _ = example
    by_unit: dict[str, set[str]] = {}
    for node in fabric.nodes:
        by_unit.setdefault(node.rsplit("-c", 1)[0], set()).add(fabric.leaf_domain_of(node))
    assert len(by_unit) == 8
    assert all(len(domains) == 1 for domains in by_unit.values())
    assert len(set().union(*by_unit.values())) == 8


def test_label_values_name_switches_as_their_descriptions_do(example: Example) -> None:
    """``MF0;B09-P1-IBLEAF-01-05:MQM9701/U1`` is the switch ``B09-P1-IBLEAF-01-05``: the rail
    and leaf labels read as the operators' cabling sheets do; the model keeps the GUID ids."""
    fabric, _ = example
    node_labels = fabric_node_labels(fabric)["b05-p1-dgx-05-c01"]
    assert fabric.leaf_of("b05-p1-dgx-05-c01", 0) == "S-2c5eab0300c26040"
    assert node_labels[labels.rail_key(0)] == "B09-P1-IBLEAF-01-05"
    assert fabric.switches["S-2c5eab0300c26040"].name == "B09-P1-IBLEAF-01-05"


@pytest.mark.parametrize(
    ("description", "name"),
    [
        ("MF0;ib5:SX6036/U1", "ib5"),
        ("MF0;switch-de779e:SX6012/U1", "switch-de779e"),
        ("Voltaire 4036 # hoibp0013", "hoibp0013"),
        ("Voltaire 4036 - 36 QDR ports switch", None),
        ("SwitchIB Mellanox Technologies", None),
        ("MT43132 Mellanox Technologies", None),
        ("", None),
    ],
)
def test_a_switch_is_named_by_its_description_where_it_names_itself(
    description: str, name: str | None
) -> None:
    assert switch_name(description) == name


def test_two_switches_of_one_name_keep_their_guids_with_a_warning() -> None:
    twin = SWITCH.replace("2c5eab0300b87a80", "2c5eab0300b87a81")
    other = PORT.replace("e09d7303008594bc", "e09d7303008594bd").replace("dgx-01", "dgx-02")
    fabric, report = parse_ibnetdiscover(f"{SWITCH}\n{PORT}\n{twin}\n{other}\n", "dump")
    assert {s.name for s in fabric.switches.values()} == {None}
    assert fabric_node_labels(fabric)["dgx-01"][labels.LEAF] == "S-2c5eab0300b87a80"
    assert any("LEAF given to several switches" in w for w in report.warnings)


def test_levels_come_from_the_graph(example: Example) -> None:
    fabric, _ = example
    assert len(fabric.leaves) == 31
    spines = fabric.switches_at(1)
    assert len(spines) == 9
    assert all("IBSPINE" in fabric.switches[s].description for s in spines)


def test_unnamed_hcas_are_reported_not_invented_as_nodes(example: Example) -> None:
    fabric, report = example
    assert len(report.unassigned_hcas) == 69
    assert all(h.description.startswith("MT4129") for h in report.unassigned_hcas)
    assert all(fabric.hcas[f"H-{h.guid}"].node is None for h in report.unassigned_hcas)


def test_ufm_aggregation_and_generic_hosts_are_reported_not_nodes(example: Example) -> None:
    fabric, report = example
    ignored = {h.host: h for h in report.ignored_hosts}
    assert set(ignored) == {
        "B11-P1-CUFM-02", "Mellanox Technologies Aggregation Node", "localhost", "ubuntu"
    }  # fmt: skip
    assert len(ignored["Mellanox Technologies Aggregation Node"].guids) == 40
    assert not set(ignored) & set(fabric.nodes)


def test_rails_are_numbered_densely_whatever_the_devices_are_called(example: Example) -> None:
    """The fabric's order, not the names: this dump shows four ports of each node, named
    mlx5_0/1/4/5 on some units and HCA-1/2/5/6 on others; both are rails 0-3."""
    fabric, _ = example
    a08, b05 = fabric.rail_leaves("a08-p1-dgx-04-c01"), fabric.rail_leaves("b05-p1-dgx-05-c01")
    assert set(a08) == set(b05) == {0, 1, 2, 3}
    by_rail = {h.rail: h.description.split()[-1] for h in fabric.hcas_of("a08-p1-dgx-04-c01")}
    assert by_rail == {0: "mlx5_0", 1: "mlx5_1", 2: "mlx5_4", 3: "mlx5_5"}
    assert fabric.rails == (0, 1, 2, 3)


def test_each_node_port_is_known_by_its_port_guid(example: Example) -> None:
    fabric, _ = example
    (hca,) = [h for h in fabric.hcas_of("a08-p1-dgx-04-c01") if h.description.endswith("mlx5_5")]
    assert hca.port_guid == "e09d7303007a4bd8"  # [1](e09d7303007a4bd8) in the dump


# -- bad input ------------------------------------------------------------------------------------


def test_a_dump_without_switches_is_an_empty_fabric_with_a_warning(data_dir: Path) -> None:
    text = (data_dir / "topograph" / "example-bad.out").read_text()
    fabric, report = parse_ibnetdiscover(text)
    assert fabric.nodes == ()
    assert any("no switch" in w for w in report.warnings)


def test_a_truncated_line_is_an_error_with_its_line_number() -> None:
    text = f"{SWITCH}\n{PORT[:40]}\n"
    with pytest.raises(InputError, match=r"^dump:2: cannot read"):
        parse_ibnetdiscover(text, "dump")


def test_a_speed_cut_short_is_an_error() -> None:
    with pytest.raises(InputError, match=r"dump:2: unknown link speed 'ND'"):
        parse_ibnetdiscover(f"{SWITCH}\n{PORT.removesuffix('R')}\n", "dump")


def test_a_line_that_is_not_a_record_is_skipped_with_a_warning_naming_it() -> None:
    fabric, report = parse_ibnetdiscover(f"# comment\n{SWITCH}\nhello world\n{PORT}\n", "dump")
    assert fabric.nodes == ("dgx-01",)
    assert any(w.startswith("dump: skipped 1 line") and "line 3 'hello world'" in w
               for w in report.warnings)  # fmt: skip


def test_a_file_without_any_record_is_an_error_naming_its_first_line() -> None:
    with pytest.raises(InputError, match=r"^dump:2: cannot read 'hello world'"):
        parse_ibnetdiscover("# comment\nhello world\n", "dump")


def test_a_port_line_before_any_block_is_an_error() -> None:
    with pytest.raises(InputError, match="before any Switch or Ca block"):
        parse_ibnetdiscover(f"{PORT}\n", "dump")


# -- GUID map and options -------------------------------------------------------------------------


def test_a_guid_map_names_an_unnamed_hca() -> None:
    guid_map = {"e09d730300858d88": GuidMapEntry("dgx-02", 0)}
    fabric, report = parse_ibnetdiscover(f"{SWITCH}\n{PORT}\n{UNNAMED}\n", guid_map=guid_map)
    assert fabric.nodes == ("dgx-01", "dgx-02")
    assert fabric.leaf_of("dgx-02", 0) == "S-2c5eab0300b87a80"
    assert report.unassigned_hcas == ()


def test_a_guid_map_without_rail_takes_the_rail_of_the_leaf() -> None:
    guid_map = {"e09d730300858d88": GuidMapEntry("dgx-02")}
    fabric, _ = parse_ibnetdiscover(f"{SWITCH}\n{PORT}\n{UNNAMED}\n", guid_map=guid_map)
    assert fabric.leaf_of("dgx-02", 0) == "S-2c5eab0300b87a80"


def test_guid_map_files_are_lines_or_yaml() -> None:
    lines = "# guid node rail\n0xE09D730300858D88 dgx-02 3\ne09d:7303:0085:8d89 dgx-03\n"
    assert parse_guid_map(lines) == {
        "e09d730300858d88": GuidMapEntry("dgx-02", 3),
        "e09d730300858d89": GuidMapEntry("dgx-03"),
    }
    yaml_text = "e09d730300858d88: dgx-02\n'0xe09d730300858d89': {node: dgx-03, rail: 1}\n"
    assert parse_guid_map(yaml_text) == {
        "e09d730300858d88": GuidMapEntry("dgx-02"),
        "e09d730300858d89": GuidMapEntry("dgx-03", 1),
    }


def test_a_bad_guid_map_line_names_its_line() -> None:
    with pytest.raises(InputError, match=r"map:2:"):
        parse_guid_map("e09d730300858d88 dgx-02\nnot-a-guid dgx-03\n", "map")


def test_guids_are_normalized() -> None:
    assert normalize_guid("H-E09D") == "000000000000e09d"


def test_a_node_pattern_keeps_other_hosts_out() -> None:
    options = IbnetdiscoverOptions(node_pattern=r"gpu-.*")
    fabric, report = parse_ibnetdiscover(f"{SWITCH}\n{PORT}\n", options=options)
    assert fabric.nodes == ()
    assert report.ignored_hosts[0].reason == "does not match the node pattern"


def test_a_host_without_rail_token_is_not_a_node() -> None:
    line = PORT.replace("dgx-01 HCA-1", "login-01")
    fabric, report = parse_ibnetdiscover(f"{SWITCH}\n{line}\n")
    assert fabric.nodes == ()
    assert fabric.hcas["H-e09d7303008594bc"].role is HcaRole.MANAGEMENT
    assert "no rail token" in report.ignored_hosts[0].reason
