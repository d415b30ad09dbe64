"""The fabric profile: one model, its chart schema generated from it, errors that name the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tpfabric_core.errors import InputError
from tpfabric_core.fabric_profile import (
    init_argument,
    parse_fabric_profile,
    values_schema,
    with_values_schema,
)

REPO = Path(__file__).resolve().parents[2]
CHART_SCHEMA = REPO / "charts" / "tpfabric" / "values.schema.json"


def test_the_charts_schema_is_the_generated_one() -> None:
    text = CHART_SCHEMA.read_text()
    assert with_values_schema(text) == text, "run `tpfabric crds generate`"
    assert json.loads(text)["properties"]["fabric"]["properties"] == values_schema()["properties"]


@pytest.mark.parametrize(
    ("profile", "where", "words"),
    [
        ({"infiniband": {"serviceLevel": 16}}, "fabric.profile.infiniband.serviceLevel", "15"),
        (
            {"linkLayer": "roce", "roce": {"trafficClass": -1}},
            "fabric.profile.roce.trafficClass",
            "0",
        ),
        ({"linkLayer": "ethernet"}, "fabric.profile.linkLayer", "'infiniband' or 'roce'"),
        (
            {"linkLayer": "infiniband", "infiniband": {"adaptiveRoutingServiceLevels": [16]}},
            "fabric.profile.infiniband",
            "adaptiveRoutingServiceLevels[0]: 16 is not a service level",
        ),
        ({"roce": {"trafficClass": 104}}, "fabric.profile", "set linkLayer: roce"),
        (
            {"linkLayer": "roce", "roce": {"trafficClass": 104, "dscp": 20}},
            "fabric.profile.roce",
            "set trafficClass 80",
        ),
        ({"linkLayer": "roce", "ecmp": {"levels": ["leaf"]}}, "fabric.profile.ecmp", "above"),
        ({"linkLayer": "roce", "sharpp": True}, "fabric.profile.sharpp", "remove it"),
    ],
)
def test_a_bad_profile_names_the_field_and_the_fix(
    profile: dict[str, object], where: str, words: str
) -> None:
    with pytest.raises(InputError) as caught:
        parse_fabric_profile(json.dumps(profile), "--fabric-profile")
    assert f"--fabric-profile: {where}" in str(caught.value)
    assert words in str(caught.value)


def test_an_empty_profile_declares_nothing() -> None:
    assert init_argument(parse_fabric_profile("", "x")) is None
    assert init_argument(parse_fabric_profile('{"linkLayer": ""}', "x")) is None


def test_the_init_argument_is_what_rdma_init_reads() -> None:
    from tpfabric_rdma_init.fabric_contract import read_profile  # noqa: PLC0415

    profile = parse_fabric_profile(
        json.dumps(
            {
                "linkLayer": "roce",
                "roce": {"trafficClass": 106, "fifoTrafficClass": 84, "dscp": 26},
                "ecmp": {"levels": ["spine"], "qpsPerConnection": 2, "splitDataOnQps": True},
                "sharp": True,
                "nccl": {"railPlane": False},
            }
        ),
        "x",
    )
    contract = read_profile(init_argument(profile))
    assert (contract.link_layer, contract.traffic_class, contract.fifo_traffic_class) == (
        "roce",
        106,
        84,
    )
    assert (contract.ecmp_levels, contract.qps_per_connection) == (("spine",), 2)
    assert (contract.split_data_on_qps, contract.sharp, contract.rail_plane) == (True, True, False)
