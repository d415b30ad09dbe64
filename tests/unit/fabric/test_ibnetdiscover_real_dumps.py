"""ibnetdiscover dumps nobody on the project wrote: older HCAs, odd lines, odd cabling.

The dumps are in ``data/real/`` with their sources and licences; small dumps written here in the
same style cover forms no public dump shows (ConnectX-3 ``mlx4_0`` hosts, ``ibnetdiscover -g``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tpfabric_core import labels
from tpfabric_core.fabric.ibnetdiscover import (
    GuidMapEntry,
    IbnetdiscoverOptions,
    IbnetdiscoverReport,
    parse_guid_map,
    parse_ibnetdiscover,
)
from tpfabric_core.fabric.model import Fabric
from tpfabric_core.fabric.node_labels import fabric_node_labels
from tpfabric_core.fabric.slurm import fabric_from_slurm_tree, parse_topology_conf
from tpfabric_core.labels import encode_label_value

REAL = Path(__file__).parent / "data" / "real"
DOCS = REAL / "ibtopotool-doc-dumps"
X5 = REAL / "x5-psmn-ibnetdiscover"
X5_HOSTLESS_LEAF = "S-0008f105001086a2"

Parsed = tuple[Fabric, IbnetdiscoverReport]


def parse(path: Path, guid_map: dict[str, GuidMapEntry] | None = None) -> Parsed:
    return parse_ibnetdiscover(path.read_text(), path.name, guid_map=guid_map)


@pytest.fixture(scope="module")
def x5() -> Parsed:
    return parse(X5 / "X5.topofile", guid_map=parse_guid_map((X5 / "X5.map").read_text()))


# -- 1. every description that names a host and an HCA --------------------------------------------

CONNECTX3 = """\
Switch\t36 "S-0002c9020046aa00"\t\t# "Infiniscale-IV Mellanox Technologies" base port 0 lid 2 lmc 0
[1]\t"H-0002c90300aa0010"[1](2c90300aa0011) \t\t# "qdr-01 mlx4_0" lid 6 4xQDR
[2]\t"H-0002c90300aa0020"[1](2c90300aa0021) \t\t# "qdr-02 mlx4_0" lid 7 4xQDR
[3]\t"H-0002c90300aa0030"[1](2c90300aa0031) \t\t# "qdr-03 HCA-1" lid 8 4xQDR
[4]\t"H-0002c90300aa0040"[1](2c90300aa0041) \t\t# "qdr-04 qib0" lid 9 4xQDR
[5]\t"H-0002c90300aa0050"[1](2c90300aa0051) \t\t# "qdr-05 ib" lid 10 4xQDR
[6]\t"H-0002c90300aa0060"[1](2c90300aa0061) \t\t# "qdr-06 mlx4_0" lid 11 4xQDR
[7]\t"H-0002c90300aa0070"[1](2c90300aa0071) \t\t# "qdr-06 mlx4_1" lid 12 4xQDR
"""


def test_connectx3_mlx4_and_device_descriptions_give_the_host_and_its_hca() -> None:
    fabric, report = parse_ibnetdiscover(CONNECTX3, "cx3")
    assert fabric.nodes == ("qdr-01", "qdr-02", "qdr-03", "qdr-04", "qdr-05", "qdr-06")
    assert report.ignored_hosts == ()
    assert {node: set(fabric.rail_leaves(node)) for node in fabric.nodes} == {
        "qdr-01": {0}, "qdr-02": {0}, "qdr-03": {0}, "qdr-04": {0}, "qdr-05": {0}, "qdr-06": {0, 1},
    }  # fmt: skip


# -- 2. a cable whose ends disagree ---------------------------------------------------------------


def test_a_cable_whose_ends_report_different_widths_is_degraded_not_fatal() -> None:
    fabric, report = parse(DOCS / "1.topo")  # the example of `man ibnetdiscover`
    degraded = {(link.key, f"{link.width}x{link.speed}") for link in fabric.degraded_links}
    assert degraded == {
        ((("S-0008f10400410015", 1), ("S-005442ba00003080", 10)), "1xSDR"),
        ((("H-0008f10403960558", 1), ("S-005442ba00003080", 12)), "1xSDR"),
    }
    assert any(
        w.startswith("1.topo: lines 15 and 26 report") and "as 4xSDR and 1xSDR" in w
        for w in report.warnings
    ), report.warnings


def test_a_ca_cabled_on_both_ports_is_two_hcas_each_known_by_its_port_guid() -> None:
    """``Ca 2 "H-0008f10403960558"``: port 1 (port GUID ...559) and port 2 (...55a) are both
    cabled, each an HCA (a rail endpoint) of its own."""
    fabric, _ = parse(DOCS / "1.topo")
    first, second = fabric.hcas["H-0008f10403960558"], fabric.hcas["H-0008f1040396055a"]
    assert (first.port_guid, second.port_guid) == ("0008f10403960559", "0008f1040396055a")
    assert first.description == second.description == "MT23108 InfiniHost Mellanox Technologies"
    ends = {link.other(h.id) for h in (first, second) for link in fabric.links_of(h.id)}
    assert ends == {"S-005442ba00003080"}


# -- 3. lines that are not records ----------------------------------------------------------------


def test_a_grouping_header_is_skipped_with_a_warning_naming_its_line() -> None:
    fabric, report = parse(DOCS / "1.topo")
    assert len(fabric.switches) == 2
    assert len(report.unassigned_hcas) == 5  # four CAs, one of them cabled on both its ports
    assert any("grouping header" in w and "line 7 'Non-Chassis Nodes'" in w
               for w in report.warnings)  # fmt: skip


def test_an_error_message_before_the_dump_is_skipped_with_a_warning_naming_its_line() -> None:
    fabric, report = parse(DOCS / "3.topo")
    assert len(fabric.switches) == 2
    assert any(w.startswith("3.topo: skipped 1 line") and "line 1 'src/query_smp.c:195" in w
               for w in report.warnings)  # fmt: skip


GROUPED = """\
Chassis 1 (guid 0x8f104004121a0)

# Line Nodes
vendid=0x8f1
switchguid=0x8f10400410015(8f10400410015)\t# ISR9288 Voltaire Line 3
Switch\t24 "S-0008f10400410015"\t\t# "ISR9288/ISR9096 Voltaire sLB-24D" base port 0 lid 3 lmc 0
[12][ext 7]\t"H-0008f10403960558"[1](8f10403960559) \t\t# "node-01 HCA-1" lid 10 4xDDR

Non-Chassis Nodes
"""


def test_ibnetdiscover_g_output_is_read() -> None:
    fabric, report = parse_ibnetdiscover(GROUPED, "grouped")
    assert fabric.leaf_of("node-01", 0) == "S-0008f10400410015"
    assert any("skipped 2 grouping header(s)" in w for w in report.warnings), report.warnings


# -- 4. and 5. which switches are leaves ----------------------------------------------------------


def test_a_leaf_level_switch_without_hosts_is_not_a_core_and_names_no_block(x5: Parsed) -> None:
    fabric, _ = x5
    assert fabric.level_of(X5_HOSTLESS_LEAF) == 0
    assert fabric.switches_at(2) == ()
    assert len(fabric.switches_at(1)) == 4
    blocks = {fabric.block_of(node) for node in fabric.nodes}
    assert blocks == {fabric.spine_domain_of(fabric.nodes[0])}
    assert X5_HOSTLESS_LEAF not in blocks


# -- 6. one HCA per node --------------------------------------------------------------------------


def test_one_hca_per_node_is_rail_0_without_a_warning_per_node(x5: Parsed) -> None:
    fabric, report = x5
    assert len(fabric.nodes) == 86
    assert all(
        {r: fabric.switch_label(leaf) for r, leaf in fabric.rail_leaves(n).items()}
        == {0: fabric.leaf_domain_of(n)}
        for n in fabric.nodes
    )
    assert not [w for w in report.warnings if "rail" in w], report.warnings


def test_the_x5_dump_and_its_slurm_topology_give_the_same_leaves_and_labels(x5: Parsed) -> None:
    fabric, _ = x5
    # The owners' topology.conf lists the hostless leaf's own spines in its Switches= as well as
    # the leaf in theirs: a cycle Slurm refuses ("Switch configuration is not a tree"). Without
    # that back-reference it is the tree they generated from this very dump.
    conf = (X5 / "X5.topology.conf").read_text()
    back_reference = f"SwitchName={X5_HOSTLESS_LEAF} Switches=S-0008f10500108530,S-0008f1050010851e"
    assert back_reference in conf
    conf = conf.replace(back_reference, f"SwitchName={X5_HOSTLESS_LEAF}")
    slurm = fabric_from_slurm_tree(parse_topology_conf(conf, "X5.topology.conf"))
    # GUIDs the map does not name are unassigned HCAs in the dump; in the Slurm file they are
    # node names ("H-003048c749450000") no Kubernetes node can have.
    named = [node for node in slurm.nodes if not node.startswith("H-")]
    assert sorted(named) == sorted(fabric.nodes)

    def leaf_sets(f: Fabric) -> set[frozenset[str]]:
        return {frozenset(n for n in nodes if n in fabric.nodes) for nodes in
                f.domains("leaf").values()} - {frozenset()}  # fmt: skip

    assert leaf_sets(fabric) == leaf_sets(slurm)
    assert len(leaf_sets(fabric)) == 6
    # the same labels, but that the dump names the Voltaire switches that name themselves
    # ("Voltaire 4036 # hoibp0013"), where the Slurm file has their GUIDs
    named = {encode_label_value(s): fabric.switch_label(s) for s in fabric.switches}
    slurm_labels = {
        n: {key: named.get(value, value) for key, value in fabric_node_labels(slurm)[n].items()}
        for n in fabric.nodes
    }
    assert slurm_labels == fabric_node_labels(fabric)
    assert fabric_node_labels(fabric)["sl390lin101"][labels.rail_key(0)] == "hoibp0013"
    assert fabric.switches["S-0008f105002036b4"].name == "hoibp0013"


# -- 8. filters and self-cabled ports -------------------------------------------------------------


def test_hosts_with_ufm_inside_their_name_are_ordinary_hosts() -> None:
    fabric, report = parse(DOCS / "3.topo")
    assert fabric.nodes == ("r-ufm100", "r-ufm101", "r-ufm111", "r-ufm216", "r-ufm96")
    assert report.ignored_hosts == ()


@pytest.mark.parametrize(
    ("host", "management"),
    [("ufm", True), ("ufm01", True), ("UFM-2", True), ("cufm-02", True), ("r-ufm100", False),
     ("gpu-ufm", False), ("localhost", True), ("ubuntu", True), ("ubuntu-01", False)],
)  # fmt: skip
def test_the_default_management_patterns_match_whole_names(host: str, management: bool) -> None:
    patterns = IbnetdiscoverOptions().management_patterns
    assert any(re.fullmatch(p, host) for p in patterns) is management


def test_switch_ports_cabled_to_each_other_are_left_out_with_a_warning() -> None:
    fabric, report = parse(DOCS / "3.topo")
    assert all(link.a != link.b for link in fabric.links)
    assert any(
        w.startswith("S-e41d2d030003e470 ('SwitchIB Mellanox Technologies') has ports cabled")
        and "(1-2, 19-21, 29-30)" in w
        for w in report.warnings
    ), report.warnings
