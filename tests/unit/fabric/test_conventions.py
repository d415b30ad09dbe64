from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from tpfabric_core import labels
from tpfabric_core.fabric.conventions import (
    PRESETS,
    Convention,
    canonical_labels,
    detect_convention,
    levels_flag,
    node_levels,
    tiers_above_block,
)
from tpfabric_core.placement.topology import ClusterTopology, parse_levels

# AWS's documented EKS labels of three nodes (aws/aws-ofi-nccl doc/topology-aware.md, Apache 2.0;
# see data/real/aws-eks-labels-doc/SOURCE.txt).
AWS_LABELS = Path(__file__).parent / "data" / "real" / "aws-eks-labels-doc" / "labels.yaml"
TIER = "fabric.topograph.run/tier-"
LAYER = "topology.k8s.aws/network-node-layer-"


def test_topograph_network_labels_map_to_levels() -> None:
    node = {
        "network.topology.nvidia.com/accelerator": "nvl72-1",
        "network.topology.nvidia.com/leaf": "sw-leaf-1",
        "network.topology.nvidia.com/spine": "sw-spine-1",
        "network.topology.nvidia.com/core": "sw-core-1",
    }
    assert node_levels(node, PRESETS["topograph"]) == {
        "accelerator": "nvl72-1", "leaf": "sw-leaf-1", "spine": "sw-spine-1", "block": "sw-core-1"
    }  # fmt: skip


def test_topograph_tier_labels_count_from_the_node() -> None:
    node = {"fabric.topograph.run/tier-0": "leaf-7", "fabric.topograph.run/tier-1": "spine-2",
            "accelerator.topograph.run/domain": "clique-1"}  # fmt: skip
    assert node_levels(node, PRESETS["topograph-tiers"]) == {
        "leaf": "leaf-7", "spine": "spine-2", "accelerator": "clique-1"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("layers", "expected"),
    [
        ({1: "nn-a", 2: "nn-b", 3: "nn-c"}, {"block": "nn-a", "spine": "nn-b", "leaf": "nn-c"}),
        (
            {1: "nn-a", 2: "nn-b", 3: "nn-c", 4: "nn-d"},
            {"block": "nn-b", "spine": "nn-c", "leaf": "nn-d"},
        ),
    ],
)
def test_aws_layer_one_is_the_top_and_the_lowest_layer_the_leaf(
    layers: dict[int, str], expected: dict[str, str]
) -> None:
    node = {f"topology.k8s.aws/network-node-layer-{n}": v for n, v in layers.items()}
    assert node_levels(node, PRESETS["aws"]) == expected


def test_gke_block_and_subblock() -> None:
    node = {
        "cloud.google.com/gce-topology-block": "blk",
        "cloud.google.com/gce-topology-subblock": "sub",
        "cloud.google.com/gce-topology-host": "host",
    }
    assert node_levels(node, PRESETS["gke"]) == {"block": "blk", "leaf": "sub"}


def test_user_keys_are_configured_not_coded() -> None:
    convention = Convention.model_validate(
        {"name": "site", "levels": {"leaf": ["example.com/tor"], "spine": ["example.com/pod"]}}
    )
    result = canonical_labels({"n1": {"example.com/tor": "tor 12", "other": "x"}}, convention)
    assert result == {"n1": {labels.LEAF: labels.encode_label_value("tor 12")}}


def test_unknown_levels_are_rejected() -> None:
    with pytest.raises(ValidationError, match="unknown level"):
        Convention.model_validate({"name": "x", "levels": {"rack": ["k"]}})


def test_the_convention_most_nodes_carry_is_detected() -> None:
    nodes = {
        "a": {"topology.k8s.aws/network-node-layer-3": "x"},
        "b": {"topology.k8s.aws/network-node-layer-3": "y"},
        "c": {"cloud.google.com/gce-topology-block": "z"},
    }
    detected = detect_convention(nodes)
    assert detected is not None
    assert detected.name == "aws"
    assert detect_convention({"a": {"team": "ml"}}) is None


def test_nodes_without_any_level_get_no_labels() -> None:
    assert canonical_labels({"n1": {"team": "ml"}}, PRESETS["gke"]) == {}


# -- labels other tools write, at any depth, and the --levels that plans on them ---------------


def test_topograph_tiers_have_no_fixed_depth() -> None:
    node = {f"{TIER}{n}": f"sw-{n}" for n in range(5)}
    node["accelerator.topograph.run/domain"] = "nvl-1"
    convention = PRESETS["topograph-tiers"]
    assert node_levels(node, convention) == {
        "leaf": "sw-0", "spine": "sw-1", "block": "sw-2", "accelerator": "nvl-1"
    }  # fmt: skip
    assert tiers_above_block(node, convention) == (f"{TIER}3", f"{TIER}4")


def test_the_levels_flag_plans_on_every_topograph_tier_and_the_nvlink_domain() -> None:
    nodes = {
        f"n{i}": {**{f"{TIER}{n}": f"sw-{i}-{n}" for n in range(4)},
                  "accelerator.topograph.run/domain": f"nvl-{i}"}
        for i in range(2)
    }  # fmt: skip
    flag = levels_flag(nodes, PRESETS["topograph-tiers"])
    assert flag == (
        f"tier-3={TIER}3,block={TIER}2,spine={TIER}1,leaf={TIER}0,"
        "nvlink=accelerator.topograph.run/domain"
    )
    specs = parse_levels(flag)
    assert [spec.name for spec in specs] == ["tier-3", "block", "spine", "leaf", "nvlink"]
    assert specs[-1].keep_tp_groups


def test_aws_layers_have_no_fixed_depth() -> None:
    node = {f"{LAYER}{n}": f"nn-{n}" for n in range(1, 6)}
    assert node_levels(node, PRESETS["aws"]) == {"leaf": "nn-5", "spine": "nn-4", "block": "nn-3"}
    assert tiers_above_block(node, PRESETS["aws"]) == (f"{LAYER}2", f"{LAYER}1")


def test_awss_own_labels_plan_directly_with_levels() -> None:
    nodes = yaml.safe_load(AWS_LABELS.read_text())
    flag = levels_flag(nodes, PRESETS["aws"])
    assert flag == f"block={LAYER}1,spine={LAYER}2,leaf={LAYER}3"
    assert flag is not None
    topology = ClusterTopology.from_node_labels(nodes, parse_levels(flag))
    assert not topology.outside
    blocks = {node: topology.domain_of(node, "block").name for node in nodes}
    assert blocks == {
        "ip-192-168-0-1.us-west-2.compute.internal": "nn-1111111111example",
        "ip-192-168-50-1.us-west-2.compute.internal": "nn-4444444444example",
        "ip-192-168-51-1.us-west-2.compute.internal": "nn-4444444444example",
    }


@pytest.mark.parametrize(
    ("depths", "expected"),
    [
        ((3, 4), f"block={LAYER}1,spine={LAYER}2,leaf={LAYER}3"),
        ((4, 4), f"tier-3={LAYER}1,block={LAYER}2,spine={LAYER}3,leaf={LAYER}4"),
    ],
)
def test_aws_levels_use_the_layers_every_node_has(depths: tuple[int, ...], expected: str) -> None:
    nodes = {f"n{i}": {f"{LAYER}{n}": f"nn-{i}-{n}" for n in range(1, d + 1)}
             for i, d in enumerate(depths)}  # fmt: skip
    assert levels_flag(nodes, PRESETS["aws"]) == expected


def test_gke_block_and_subblock_plan_directly() -> None:
    nodes = {
        "a3-1": {"cloud.google.com/gce-topology-block": "b1",
                 "cloud.google.com/gce-topology-subblock": "sb1",
                 "cloud.google.com/gce-topology-host": "h1"},
    }  # fmt: skip
    assert levels_flag(nodes, PRESETS["gke"]) == (
        "block=cloud.google.com/gce-topology-block,leaf=cloud.google.com/gce-topology-subblock"
    )


def test_no_levels_flag_without_a_node_of_the_convention() -> None:
    assert levels_flag({"n1": {"team": "ml"}}, PRESETS["aws"]) is None


def test_numbered_tiers_are_detected_at_any_number() -> None:
    detected = detect_convention({"n1": {f"{TIER}7": "x"}})
    assert detected is not None
    assert detected.name == "topograph-tiers"


def test_a_tier_key_holds_the_number_once() -> None:
    with pytest.raises(ValidationError, match="tier_key holds"):
        Convention.model_validate({"name": "x", "tier_key": "example.com/tier"})
