"""`tpfabric topology` on ibnetdiscover dumps nobody on the project wrote."""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import tpfabric

from tpfabric_cli.topology import EXIT_EMPTY
from tpfabric_core import labels

REAL = Path(__file__).parents[1] / "fabric" / "data" / "real"
DOCS = REAL / "ibtopotool-doc-dumps"
X5 = REAL / "x5-psmn-ibnetdiscover"


def test_connectx3_hosts_are_nodes(tmp_path: Path) -> None:
    dump = tmp_path / "cx3.topo"
    dump.write_text(
        'Switch\t36 "S-0002c9020046aa00"\t\t# "Infiniscale-IV Mellanox Technologies" base port 0\n'
        '[1]\t"H-0002c90300aa0010"[1](2c90300aa0011) \t\t# "qdr-01 mlx4_0" lid 6 4xQDR\n'
        '[2]\t"H-0002c90300aa0020"[1](2c90300aa0021) \t\t# "qdr-02 mlx4_0" lid 7 4xQDR\n'
    )
    result = tpfabric("topology", "discover", "--ibnetdiscover", dump)
    assert result.exit_code == 0, result.output
    nodes = json.loads(result.stdout)["nodes"]
    assert {n: v["labels"][labels.rail_key(0)] for n, v in nodes.items()} == {
        "qdr-01": "S-0002c9020046aa00", "qdr-02": "S-0002c9020046aa00",
    }  # fmt: skip


def test_the_man_page_example_is_read_with_warnings_and_degraded_links() -> None:
    result = tpfabric("topology", "discover", "--ibnetdiscover", DOCS / "1.topo")
    assert result.exit_code == EXIT_EMPTY, result.output  # its HCAs have no host names
    assert "2 degraded links" in result.stderr
    assert "'Non-Chassis Nodes'" in result.stderr
    assert "as 4xSDR and 1xSDR" in result.stderr


def test_ignored_hosts_are_one_hostlist_per_reason() -> None:
    args = ("--ibnetdiscover", DOCS / "3.topo", "--node-pattern", r"r-ufm1\d\d")
    discovered = tpfabric("topology", "discover", *args)
    assert discovered.exit_code == 0, discovered.output
    assert "ignored hosts: r-ufm[96,216] (does not match the node pattern)" in discovered.stderr
    shown = tpfabric("topology", "show", *args)
    assert "ignored r-ufm[96,216] (does not match the node pattern, 2 HCAs)" in shown.stdout


def test_a_picture_of_a_fabric_without_nodes_is_refused_aloud(tmp_path: Path) -> None:
    png = tmp_path / "x5.png"
    result = tpfabric("topology", "show", "--ibnetdiscover", X5 / "X5.topofile", "--png", png)
    assert result.exit_code == EXIT_EMPTY
    assert not png.exists()
    assert f"not drawing {png}: the fabric has no cluster node" in result.stderr


def test_one_hca_per_node_gets_rail_0_labels_and_no_warning_per_node() -> None:
    result = tpfabric(
        "topology", "discover", "--ibnetdiscover", X5 / "X5.topofile", "--node-map", X5 / "X5.map"
    )
    assert result.exit_code == 0, result.output
    nodes = json.loads(result.stdout)["nodes"]
    assert len(nodes) == 86
    assert all(labels.rail_key(0) in entry["labels"] for entry in nodes.values())
    assert "rail" not in result.stderr
