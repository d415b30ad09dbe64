"""`tpfabric topology discover`: the documented JSON shape, other formats, sources and errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_runner import tpfabric

from tpfabric_cli.errors import EXIT_INPUT
from tpfabric_cli.topology import EXIT_EMPTY
from tpfabric_core import labels
from tpfabric_core.hostlist import expand_hostlist


def discover_json(*args: str | Path) -> dict[str, Any]:
    result = tpfabric("topology", "discover", *args)
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


@pytest.fixture(scope="module")
def example_json(example_out: Path) -> dict[str, Any]:
    return discover_json("--ibnetdiscover", example_out, "--format", "json")


def test_json_has_exactly_nodes_anomalies_and_unassigned_hcas(
    example_json: dict[str, Any],
) -> None:
    assert list(example_json) == ["nodes", "anomalies", "unassigned_hcas"]
    assert len(example_json["nodes"]) == 119
    # a dump gives every node's rail map: rail -> the port GUID of the port cabled to it
    assert all(list(entry) == ["labels", "annotations"] for entry in example_json["nodes"].values())
    rail_map = example_json["nodes"]["a08-p1-dgx-04-c01"]["annotations"]
    assert list(rail_map) == ["topology.tpfabric.io/rail-ports"]
    assert "3=0xe09d7303007a4bd8" in rail_map["topology.tpfabric.io/rail-ports"]  # its mlx5_5


@pytest.mark.parametrize(
    ("hostlist", "rail", "leaf"),
    [
        # topograph's leaves S-2c5eab0300b879c0, ...b87a80, ...c26040, by their own names
        ("a05-p1-dgx-01-c[03-04]", 1, "A09-P1-IBLEAF-02-01"),
        ("a06-p1-dgx-02-c[01-04,07,10-12,14,16,18]", 0, "A09-P1-IBLEAF-01-02"),
        ("b05-p1-dgx-05-c[01-18]", 0, "B09-P1-IBLEAF-01-05"),
    ],
)
def test_rail_labels_are_topographs_leaves(
    example_json: dict[str, Any], hostlist: str, rail: int, leaf: str
) -> None:
    for node in expand_hostlist(hostlist):
        assert example_json["nodes"][node]["labels"][labels.rail_key(rail)] == leaf


def test_every_node_has_a_leaf_domain_shared_within_its_unit(example_json: dict[str, Any]) -> None:
    domains: dict[str, set[str]] = {}
    for node, entry in example_json["nodes"].items():
        domains.setdefault(node.rsplit("-c", 1)[0], set()).add(entry["labels"][labels.LEAF])
    assert all(len(unit) == 1 for unit in domains.values())
    assert len(set().union(*domains.values())) == 8


def test_management_hosts_and_unnamed_hcas_are_not_nodes(example_json: dict[str, Any]) -> None:
    nodes = set(example_json["nodes"])
    assert not {"localhost", "ubuntu", "B11-P1-CUFM-02"} & nodes
    unassigned = example_json["unassigned_hcas"]
    assert len(unassigned) == 69
    assert set(unassigned[0]) == {"guid", "description", "switch", "port"}
    assert all(h["description"].startswith("MT4129") for h in unassigned)


def test_anomalies_are_objects_naming_node_rail_and_switch(example_json: dict[str, Any]) -> None:
    anomalies = example_json["anomalies"]
    assert {(a["kind"], a["node"], a["rail"]) for a in anomalies} == {
        ("mixed-rail-leaf", "b08-p1-dgx-08-c01", 2),
        ("mixed-rail-leaf", "b08-p1-dgx-08-c01", 3),
    }
    assert all(a["switch"] and a["detail"] for a in anomalies)


def test_ignored_hosts_and_the_summary_go_to_stderr(example_out: Path) -> None:
    result = tpfabric("topology", "discover", "--ibnetdiscover", example_out)
    assert "ignored hosts: B11-P1-CUFM-02" in result.stderr
    assert "69 unassigned HCAs" in result.stderr
    assert "B11-P1-CUFM-02" not in result.stdout


def test_a_node_map_names_an_unnamed_hca(example_out: Path, tmp_path: Path) -> None:
    node_map = tmp_path / "guids.txt"
    node_map.write_text("0xe09d73030014c402 a05-p1-dgx-01-c02 5\n")
    document = discover_json("--ibnetdiscover", example_out, "--node-map", node_map)
    assert document["nodes"]["a05-p1-dgx-01-c02"]["labels"][labels.rail_key(5)]
    assert "e09d73030014c402" not in {h["guid"] for h in document["unassigned_hcas"]}


def test_yaml_adds_ignored_hosts_and_warnings(example_out: Path) -> None:
    result = tpfabric("topology", "discover", "--ibnetdiscover", example_out, "--format", "yaml")
    assert result.exit_code == 0, result.output
    document = yaml.safe_load(result.stdout)
    assert list(document)[:3] == ["nodes", "anomalies", "unassigned_hcas"]
    assert "SHARP aggregation node" in {h["reason"] for h in document["ignored_hosts"]}


def test_table_summarises_leaf_domains(example_out: Path) -> None:
    result = tpfabric("topology", "discover", "--ibnetdiscover", example_out, "--format", "table")
    assert result.exit_code == 0, result.output
    assert "b05-p1-dgx-05-c[01-18]" in result.stdout
    assert "cabling anomalies" in result.stdout


# -- example-bad.out and broken input ------------------------------------------------------------


def test_a_dump_without_switches_prints_an_empty_fabric_and_exits_3(example_bad_out: Path) -> None:
    result = tpfabric("topology", "discover", "--ibnetdiscover", example_bad_out)
    assert result.exit_code == EXIT_EMPTY == 3
    assert json.loads(result.stdout) == {"nodes": {}, "anomalies": [], "unassigned_hcas": []}
    assert "no switch in the dump" in result.stderr
    assert "no cluster node found" in result.stderr


def test_a_truncated_dump_is_one_error_line_with_file_and_line(
    example_out: Path, tmp_path: Path
) -> None:
    lines = example_out.read_text().splitlines()
    cut = next(i for i, line in enumerate(lines) if line.startswith("[1]") and "4xNDR" in line)
    truncated = tmp_path / "truncated.out"
    truncated.write_text("\n".join([*lines[:cut], lines[cut][:40]]) + "\n")
    result = tpfabric("topology", "discover", "--ibnetdiscover", truncated)
    assert result.exit_code == EXIT_INPUT
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(f"error: {truncated}:{cut + 1}: ")
    assert "Traceback" not in result.output


def test_garbage_names_the_first_line(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.out"
    garbage.write_text("this is not ibnetdiscover output\n")
    result = tpfabric("topology", "discover", "--ibnetdiscover", garbage)
    assert result.exit_code == EXIT_INPUT
    assert result.stderr.startswith(f"error: {garbage}:1: cannot read")


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    result = tpfabric("topology", "discover", "--ibnetdiscover", tmp_path / "nope.out")
    assert result.exit_code == EXIT_INPUT
    assert "cannot read ibnetdiscover dump" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_exactly_one_source_is_required(example_out: Path, small_fabric: Path) -> None:
    none = tpfabric("topology", "discover")
    both = tpfabric(
        "topology", "discover", "--ibnetdiscover", example_out, "--fabric", small_fabric
    )
    assert none.exit_code == both.exit_code == EXIT_INPUT
    assert "give exactly one fabric source" in both.stderr


# -- other sources --------------------------------------------------------------------------------


def test_labels_of_another_convention_become_canonical_levels(tmp_path: Path) -> None:
    source = tmp_path / "labels.yaml"
    source.write_text(
        yaml.safe_dump(
            {
                "gpu-1": {"network.topology.nvidia.com/leaf": "leaf-a",
                          "network.topology.nvidia.com/spine": "spine-1"},
                "gpu-2": {"network.topology.nvidia.com/leaf": "leaf-b",
                          "network.topology.nvidia.com/spine": "spine-1"},
                "cpu-1": {"kubernetes.io/os": "linux"},
            }
        )
    )  # fmt: skip
    result = tpfabric("topology", "discover", "--labels-from", source, "--convention", "topograph")
    assert result.exit_code == 0, result.output
    nodes = json.loads(result.stdout)["nodes"]
    assert nodes["gpu-1"]["labels"] == {labels.LEAF: "leaf-a", labels.SPINE: "spine-1"}
    assert "cpu-1" not in nodes
    assert "1 node(s) carry none of the topograph keys: cpu-1" in result.stderr


def test_a_kubectl_node_list_is_read_and_the_convention_detected(tmp_path: Path) -> None:
    node_list = {
        "kind": "List",
        "items": [
            {"metadata": {"name": "n1", "labels": {
                "topology.k8s.aws/network-node-layer-1": "nn-top",
                "topology.k8s.aws/network-node-layer-2": "nn-mid",
                "topology.k8s.aws/network-node-layer-3": "nn-low"}}},
        ],
    }  # fmt: skip
    source = tmp_path / "nodes.json"
    source.write_text(json.dumps(node_list))
    nodes = discover_json("--labels-from", source)["nodes"]
    assert nodes["n1"]["labels"] == {
        labels.BLOCK: "nn-top",
        labels.SPINE: "nn-mid",
        labels.LEAF: "nn-low",
    }


def test_labels_without_a_known_convention_are_an_input_error(tmp_path: Path) -> None:
    source = tmp_path / "labels.json"
    source.write_text(json.dumps({"n1": {"example.com/rack": "r1"}}))
    result = tpfabric("topology", "discover", "--labels-from", source)
    assert result.exit_code == EXIT_INPUT
    assert "no node carries the label keys of a known convention" in result.stderr


def test_a_user_convention_file_maps_plain_keys(tmp_path: Path) -> None:
    convention = tmp_path / "convention.yaml"
    convention.write_text("name: racks\nlevels: {leaf: [example.com/rack]}\n")
    source = tmp_path / "labels.json"
    source.write_text(json.dumps({"n1": {"example.com/rack": "r1"}}))
    document = discover_json("--labels-from", source, "--convention", convention)
    assert document["nodes"]["n1"]["labels"] == {labels.LEAF: "r1"}


def test_a_slurm_tree_is_a_source(tmp_path: Path) -> None:
    conf = tmp_path / "topology.conf"
    conf.write_text(
        "SwitchName=s1 Switches=l[1-2]\nSwitchName=l1 Nodes=n[1-2]\nSwitchName=l2 Nodes=n3\n"
    )
    nodes = discover_json("--slurm-topology", conf)["nodes"]
    assert {n: v["labels"][labels.LEAF] for n, v in nodes.items()} == {
        "n1": "l1", "n2": "l1", "n3": "l2"
    }  # fmt: skip
    assert {v["labels"][labels.SPINE] for v in nodes.values()} == {"s1"}


# -- Slurm blocks and topology.yaml, the labels other tools write --------------------------------

AWS_DOC = Path(__file__).parents[1] / "fabric" / "data" / "real" / "aws-eks-labels-doc"


def test_an_empty_slurm_file_says_what_it_lacks(tmp_path: Path) -> None:
    conf = tmp_path / "topology.conf"
    conf.write_text("# nothing yet\n")
    result = tpfabric("topology", "discover", "--slurm-topology", conf)
    assert result.exit_code == EXIT_INPUT
    assert "names no switch and no block (no SwitchName or BlockName line)" in result.stderr
    assert "block topology" not in result.stderr


def test_a_slurm_block_file_is_a_source(tmp_path: Path) -> None:
    conf = tmp_path / "topology.conf"
    conf.write_text("BlockName=r1 Nodes=n[1-2]\nBlockName=r2 Nodes=n[3-4]\nBlockSizes=2,4\n")
    nodes = discover_json("--slurm-topology", conf)["nodes"]
    assert {n: v["labels"][labels.LEAF] for n, v in nodes.items()} == {
        "n1": "r1", "n2": "r1", "n3": "r2", "n4": "r2"
    }  # fmt: skip
    assert {v["labels"][labels.SPINE] for v in nodes.values()} == {"r1..r2"}


def test_a_slurm_topology_yaml_is_a_source(tmp_path: Path) -> None:
    conf = tmp_path / "topology.yaml"
    conf.write_text(
        "- topology: t1\n  cluster_default: true\n  tree:\n    switches:\n"
        "      - switch: l1\n        nodes: n[1-2]\n"
    )
    nodes = discover_json("--slurm-topology", conf)["nodes"]
    assert {v["labels"][labels.LEAF] for v in nodes.values()} == {"l1"}


def test_slurm_hosts_kubernetes_cannot_name_are_warned_about(tmp_path: Path) -> None:
    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=l1 Nodes=n1,H-003048c749450000\n")
    result = tpfabric("topology", "discover", "--slurm-topology", conf)
    assert result.exit_code == 0, result.output
    assert list(json.loads(result.stdout)["nodes"]) == ["n1"]
    assert "topology.conf:1: skipped 1 node(s) that cannot be Kubernetes node names" in (
        " ".join(result.stderr.split())
    )


@pytest.mark.parametrize("name", ["aws-ofi-nccl-topology.json", "labels.yaml"])
def test_awss_documented_labels_are_read_in_awss_own_shape_too(name: str) -> None:
    result = tpfabric("topology", "discover", "--labels-from", AWS_DOC / name)
    assert result.exit_code == 0, result.output
    nodes = json.loads(result.stdout)["nodes"]
    assert nodes["ip-192-168-51-1.us-west-2.compute.internal"]["labels"] == {
        labels.BLOCK: "nn-4444444444example",
        labels.SPINE: "nn-7777777777example",
        labels.LEAF: "nn-8888888888example",
    }
    layer = "topology.k8s.aws/network-node-layer-"
    assert f"--levels block={layer}1,spine={layer}2,leaf={layer}3" in "".join(
        result.stderr.split("\n")
    )


def test_a_labels_file_of_another_shape_says_what_was_expected_and_found(tmp_path: Path) -> None:
    source = tmp_path / "labels.json"
    source.write_text(json.dumps([{"Name": "n1"}]))
    result = tpfabric("topology", "discover", "--labels-from", source)
    assert result.exit_code == EXIT_INPUT
    message = " ".join(result.stderr.split())
    assert "found a list" in message
    assert 'AWS\'s {"Nodes": [{"Name": node, "Topology": {label key: value}}]}' in message


def test_topograph_tiers_above_block_are_reported_and_kept_by_levels(tmp_path: Path) -> None:
    tier = "fabric.topograph.run/tier-"
    source = tmp_path / "labels.yaml"
    source.write_text(yaml.safe_dump({"n1": {f"{tier}{n}": f"sw{n}" for n in range(4)}}))
    result = tpfabric("topology", "discover", "--labels-from", source)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["nodes"]["n1"]["labels"][labels.BLOCK] == "sw2"
    stderr = "".join(result.stderr.split("\n"))
    assert f"1 node(s) carry tiers above block ({tier}3)" in stderr
    assert f"--levels tier-3={tier}3,block={tier}2,spine={tier}1,leaf={tier}0" in stderr


def test_counters_over_the_limit_mark_the_leafs_nodes_degraded(
    example_out: Path, tmp_path: Path
) -> None:
    counters = tmp_path / "counters.json"
    counters.write_text(
        json.dumps({"links": [{"node": "b05-p1-dgx-05-c01", "rail": 0, "symbol_errors": 5000}]})
    )
    nodes = discover_json("--ibnetdiscover", example_out, "--counters", counters)["nodes"]
    health = {n for n, v in nodes.items() if v["labels"][labels.HEALTH] == "degraded"}
    assert health == set(expand_hostlist("b05-p1-dgx-05-c[01-18]"))
