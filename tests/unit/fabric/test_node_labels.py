from __future__ import annotations

import pytest
from fabric_builders import two_unit_rail_fabric
from hypothesis import given
from hypothesis import strategies as st

from tpfabric_core import labels
from tpfabric_core.fabric.node_labels import fabric_node_labels, label_diff

KEYS = st.sampled_from(
    [labels.BLOCK, labels.LEAF, labels.HEALTH, labels.rail_key(0), labels.rail_key(1)]
)
OTHER = st.sampled_from(["kubernetes.io/hostname", "nvidia.com/gpu.product", "team"])
VALUES = st.sampled_from(["a", "b", "ok"])


def test_labels_carry_levels_rails_and_health() -> None:
    fabric = two_unit_rail_fabric()
    node = fabric_node_labels(fabric)["u1-n1"]
    assert node == {
        labels.BLOCK: fabric.block_of("u1-n1"),
        labels.SPINE: fabric.spine_domain_of("u1-n1"),
        labels.LEAF: fabric.leaf_domain_of("u1-n1"),
        labels.HEALTH: "ok",
        labels.rail_key(0): "u1r0",
        labels.rail_key(1): "u1r1",
    }


def test_diff_sets_changed_and_removes_stale_tpfabric_labels_only() -> None:
    current = {labels.LEAF: "old", labels.rail_key(7): "gone", "team": "ml", labels.HEALTH: "ok"}
    desired = {labels.LEAF: "new", labels.HEALTH: "ok"}
    assert label_diff(current, desired) == ({labels.LEAF: "new"}, [labels.rail_key(7)])


def test_diff_refuses_to_manage_foreign_keys() -> None:
    with pytest.raises(ValueError, match=r"outside topology\.tpfabric\.io/"):
        label_diff({}, {"team": "ml"})


@given(
    current=st.dictionaries(st.one_of(KEYS, OTHER), VALUES),
    desired=st.dictionaries(KEYS, VALUES),
)
def test_applying_the_diff_reaches_desired_and_a_second_diff_is_empty(
    current: dict[str, str], desired: dict[str, str]
) -> None:
    to_set, to_remove = label_diff(current, desired)
    applied = {k: v for k, v in current.items() if k not in to_remove} | to_set
    assert {k: v for k, v in applied.items() if k.startswith(labels.PREFIX)} == desired
    assert {k: v for k, v in applied.items() if not k.startswith(labels.PREFIX)} == {
        k: v for k, v in current.items() if not k.startswith(labels.PREFIX)
    }
    assert label_diff(applied, desired) == ({}, [])
