"""The fabric's own figures for the cost model, from the placer's flags (placement.cost_flags)."""

from __future__ import annotations

import pytest

from tpfabric_core.errors import InputError
from tpfabric_core.placement.cost import DEFAULT_COST
from tpfabric_core.placement.cost_flags import cost_model
from tpfabric_core.placement.topology import DEFAULT_LEVELS, parse_levels


def test_nothing_given_keeps_the_default_model() -> None:
    assert cost_model(DEFAULT_LEVELS) is DEFAULT_COST


def test_a_mapping_given_replaces_the_default_whole() -> None:
    cost = cost_model(
        DEFAULT_LEVELS, oversubscription="block=3,cluster=7", background_load="spine=0"
    )
    assert dict(cost.oversubscription) == {"block": 3.0, "cluster": 7.0}
    assert dict(cost.background_load) == {"spine": 0.0}
    assert cost.link_gbps == DEFAULT_COST.link_gbps  # the rest stays


def test_the_names_are_the_levels_of_the_cluster() -> None:
    gke = parse_levels("zone=cloud.google.com/gce-topology-block,leaf=example.com/subblock")
    assert dict(cost_model(gke, oversubscription="zone=2").oversubscription) == {"zone": 2.0}
    with pytest.raises(InputError, match="'spine' is not a level a path crosses; use one of zone"):
        cost_model(gke, oversubscription="spine=2")


@pytest.mark.parametrize(
    ("flag", "text", "words"),
    [
        ("oversubscription", "leaf=2", "'leaf' is not a level a path crosses"),
        ("oversubscription", "spine=0.5", "'spine=0.5': the value must be a number at least 1"),
        ("oversubscription", "spine=inf", "the value must be a number at least 1"),
        ("oversubscription", "spine=2,spine=3", "'spine' is given twice"),
        ("oversubscription", "spine", "'spine' has no '='"),
        ("oversubscription", "spine=2,", "empty entry"),
        ("background_load", "block=1", "from 0 up to, not including, 1"),
        ("background_load", "block=-0.1", "from 0 up to, not including, 1"),
        ("background_load", "block=lots", "the value must be a number"),
    ],
)
def test_bad_figures_name_the_flag_the_entry_and_the_fix(flag: str, text: str, words: str) -> None:
    with pytest.raises(InputError) as caught:
        cost_model(DEFAULT_LEVELS, **{flag: text})
    message = str(caught.value)
    assert message.startswith(f"--{flag.replace('_', '-')}: ")
    assert words in message
    assert "; " in message  # and how to fix it
