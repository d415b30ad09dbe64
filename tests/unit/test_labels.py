from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpfabric_core import labels


def test_valid_names_are_kept_as_they_are() -> None:
    assert labels.encode_label_value("S-2c5eab0300b879c0") == "S-2c5eab0300b879c0"


def test_long_names_are_hashed_deterministically_and_stay_readable() -> None:
    name = "MF0;ufm-switch-with-a-very-long-node-description:MQM9700/U1/leaf/rail-7/unit-12"
    value = labels.encode_label_value(name)
    assert value == labels.encode_label_value(name)
    assert labels.is_valid_label_value(value)
    assert value.startswith("MF0-ufm-switch")


def test_names_that_differ_only_in_invalid_characters_get_different_values() -> None:
    assert labels.encode_label_value("leaf/1") != labels.encode_label_value("leaf:1")


@given(st.text(max_size=200))
def test_every_name_encodes_to_a_valid_label_value(name: str) -> None:
    assert labels.is_valid_label_value(labels.encode_label_value(name))


def test_rail_keys_are_per_rail() -> None:
    assert labels.rail_key(3) == "topology.tpfabric.io/rail-3"
    with pytest.raises(ValueError, match=">= 0"):
        labels.rail_key(-1)
