from __future__ import annotations

import pytest
from pydantic import ValidationError

from tpfabric_core import labels
from tpfabric_core.fabric.conventions import (
    PRESETS,
    Convention,
    canonical_labels,
    detect_convention,
    node_levels,
)


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
