"""A Kueue Topology becomes tpfabric's levels: the same node labels, top first, named from the
bottom up (leaf, spine, block), the hostname level left out; anything else is an error naming
the field."""

from __future__ import annotations

from typing import Any

import pytest

from tpfabric_core.errors import InputError
from tpfabric_core.kueue_topology import levels_from_kueue_topology
from tpfabric_core.placement.topology import parse_levels

pytestmark = pytest.mark.unit


def topology(*keys: str, api: str = "kueue.x-k8s.io/v1beta2") -> dict[str, Any]:
    return {
        "apiVersion": api,
        "kind": "Topology",
        "metadata": {"name": "default"},
        "spec": {"levels": [{"nodeLabel": k} for k in keys]},
    }


def test_kueues_documented_gke_topology_gives_two_levels_and_drops_the_hostname() -> None:
    found = levels_from_kueue_topology(
        topology(
            "cloud.google.com/gce-topology-block",
            "cloud.google.com/gce-topology-subblock",
            "kubernetes.io/hostname",
        )
    )
    assert found.text() == (
        "spine=cloud.google.com/gce-topology-block,leaf=cloud.google.com/gce-topology-subblock"
    )
    assert len(found.notes) == 1
    assert "kubernetes.io/hostname" in found.notes[0]
    assert [level.name for level in parse_levels(found.text())] == ["spine", "leaf"]


def test_four_levels_name_the_top_one_by_its_label_and_v1beta1_is_read_too() -> None:
    found = levels_from_kueue_topology(
        topology(
            "example.com/topology-zone",
            "example.com/topology-block",
            "example.com/topology-rack",
            "example.com/topology-switch",
            api="kueue.x-k8s.io/v1beta1",
        )
    )
    assert [name for name, _ in found.levels] == ["zone", "block", "spine", "leaf"]
    assert found.notes == ()


def test_tpfabrics_own_labels_map_onto_its_own_names() -> None:
    found = levels_from_kueue_topology(
        topology(
            "topology.tpfabric.io/block", "topology.tpfabric.io/spine", "topology.tpfabric.io/leaf"
        )
    )
    assert found.text() == (
        "block=topology.tpfabric.io/block,spine=topology.tpfabric.io/spine,"
        "leaf=topology.tpfabric.io/leaf"
    )


@pytest.mark.parametrize(
    ("obj", "where"),
    [
        ({"apiVersion": "v1", "kind": "ConfigMap"}, "is not a Kueue Topology"),
        ({**topology("a/b"), "spec": {}}, "spec.levels: missing or empty"),
        (topology("a/b", ""), "spec.levels[1].nodeLabel: missing"),
        (topology("kubernetes.io/hostname"), "only kubernetes.io/hostname"),
        (topology("a/b", "a/b"), "--levels"),  # duplicate label keys: the placer's own check
        ("not an object", "not a YAML/JSON object"),
    ],
)
def test_what_is_not_a_usable_topology_is_an_error_naming_the_field(obj: Any, where: str) -> None:
    with pytest.raises(InputError) as raised:
        levels_from_kueue_topology(obj, "topo.yaml")
    assert where in str(raised.value)
